"""The command line end to end: help, schema, graph dumps, reports, table3, compile, extends."""

from __future__ import annotations

import json

import jsonschema
import pytest
import yaml

from tfspec import build_graph, load_spec
from tfspec.cli import parser
from tests.conftest import SPECS

COMMANDS = ["validate", "schema", "graph", "report", "table3", "compile", "list"]


def test_help_explains_every_command(cli, capsys):
    with pytest.raises(SystemExit) as exit_:
        parser().parse_args(["--help"])
    text = capsys.readouterr().out
    assert exit_.value.code == 0 and all(c in text for c in COMMANDS) and "SPEC" in text
    for command in COMMANDS:
        with pytest.raises(SystemExit) as exit_:
            parser().parse_args([command, "--help"])
        assert exit_.value.code == 0 and len(capsys.readouterr().out.splitlines()) >= 3


def test_schema_is_valid_json_schema_that_checks_specs(cli):
    code, out, _ = cli("schema")
    schema = json.loads(out)
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    validator.validate(yaml.safe_load((SPECS / "base.yaml").read_text()))
    bad = yaml.safe_load((SPECS / "base.yaml").read_text()) | {"d_model": -1}
    assert not validator.is_valid(bad)
    assert "description" in schema["properties"]["d_model"]


@pytest.mark.parametrize("spec", ["tiny", "base"])
def test_graph_json_is_consistent(cli, spec):
    code, out, _ = cli("graph", spec, "--format", "json")
    dump = json.loads(out)
    shapes = {n["name"]: n["shape"] for n in dump["nodes"]}
    assert code == 0 and dump["edges"]
    for edge in dump["edges"]:
        assert edge["shape"] == shapes[edge["from"]]
    for node in dump["nodes"]:
        for param in node["params"].values():
            assert param in dump["params"]
    assert dump["num_params"] == sum(p["numel"] for p in dump["params"].values())
    d = load_spec(spec).d_model
    assert shapes[dump["ports"]["memory"]] == ["B", "S", d]
    assert shapes[dump["ports"]["logits"]][:2] == ["B", "T"]


def test_graph_dot_and_mermaid(cli, tmp_path):
    code, out, _ = cli("graph", "tiny", "--format", "dot")
    assert code == 0 and out.startswith('digraph "tiny"') and out.count("->") == build_graph(load_spec("tiny")).nx.number_of_edges()
    code, _, _ = cli("graph", "tiny", "--format", "mermaid", "-o", tmp_path / "g.mmd")
    assert code == 0 and (tmp_path / "g.mmd").read_text().startswith("flowchart TD")


def test_report_json_and_markdown(cli):
    code, out, _ = cli("report", "base", "--format", "json")
    report = json.loads(out)
    assert code == 0 and report["name"] == "transformer-base" and report["params"]["total"] == 63_082_496
    parts = report["params"]
    assert parts["embeddings"]["total"] + parts["encoder"]["total"] + parts["decoder"]["total"] == 63_082_496
    assert parts["encoder"]["ffn"] == 6 * (2 * 512 * 2048 + 2048 + 512)
    code, out, _ = cli("report", "base", "--format", "markdown")
    assert code == 0 and "| component | parameters | share |" in out


def test_table3_command(cli):
    code, out, _ = cli("table3", "--format", "json")
    rows = json.loads(out)
    assert code == 0 and len(rows) == 20
    assert all(abs(r["deviation"]) <= 0.07 for r in rows if r["paper_millions"])
    code, out, _ = cli("table3")
    assert code == 0 and "does not fudge" in out


def test_compile_runs_a_training_step(cli):
    code, out, _ = cli("compile", "tiny")
    assert code == 0 and "(equal)" in out and "forward + backward" in out


def test_list_names_every_shipped_spec(cli):
    code, out, _ = cli("list")
    assert code == 0 and all(name in out for name in ("base", "big", "tiny", "table3/C5"))


def test_extends_merges_replaces_and_deletes(write_spec):
    write_spec("""
        name: parent
        description: the parent
        vocab: 100
        d_model: 32
        heads: 4
        d_ff: 64
        family: encoder-only
        encoder: {layers: 3, block: [self_attention, ffn]}
        reference: {source: somewhere, params_millions: 1}
    """, "parent.yaml")
    child = load_spec(write_spec("""
        extends: parent.yaml
        encoder: {layers: 1}
        d_ff: null
    """, "child.yaml"))
    assert child.name == "child" and child.description == "" and child.reference is None
    assert child.encoder.num_layers == 1 and [b.kind for b in child.encoder.block] == ["self_attention", "ffn"]
    assert child.d_ff == 2048  # null removed the inherited value: the default applies
    grouped = load_spec(write_spec("""
        extends: parent.yaml
        encoder:
          layers: null
          block: null
          groups:
            - {layers: 2, block: [{kind: conv, kernel: 3}, ffn]}
            - {layers: 1, block: [self_attention, ffn]}
    """, "grouped.yaml"))
    assert grouped.encoder.num_layers == 3
    kinds = [n.op for n in build_graph(grouped).nodes() if n.op in ("conv", "attention")]
    assert kinds == ["conv", "conv", "attention"]
