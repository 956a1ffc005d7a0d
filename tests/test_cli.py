"""The command line end to end: help, schema, graph dumps, reports, table3, compile, extends."""

from __future__ import annotations

import json
import math

import jsonschema
import pytest
import torch
import torch.nn.functional as F
import yaml

from tfspec import build_graph, load_spec
from tfspec.backends.torch import build_module
from tfspec.cli import parser
from tests.conftest import SPECS
from tests.test_params import PAPER_MILLIONS, closed_form

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
    assert all(p["numel"] == math.prod(p["shape"]) for p in dump["params"].values())
    assert dump["num_params"] == sum(p["numel"] for p in dump["params"].values()) == closed_form(load_spec(spec))
    d = load_spec(spec).d_model
    assert shapes[dump["ports"]["memory"]] == ["B", "S", d]
    assert shapes[dump["ports"]["logits"]][:2] == ["B", "T"]


def test_graph_dot_and_mermaid(cli, tmp_path):
    # tiny's tensors counted by hand: per stack, tokens -> embedding -> positions -> dropout (3); per post-norm
    # sub-layer, x -> f -> dropout, x and the dropout -> add -> norm (5), cross-attention also reads the
    # memory (6); the decoder's output -> projection (1). Two layers in each stack.
    edges = 3 + 2 * (5 + 5) + 3 + 2 * (5 + 6 + 5) + 1
    code, out, _ = cli("graph", "tiny", "--format", "dot")
    assert code == 0 and out.startswith('digraph "tiny"') and out.count("->") == edges
    code, _, _ = cli("graph", "tiny", "--format", "mermaid", "-o", tmp_path / "g.mmd")
    text = (tmp_path / "g.mmd").read_text()
    assert code == 0 and text.startswith("flowchart TD") and text.count("-->") == edges


def test_report_json_and_markdown(cli):
    d, d_ff = 512, 2048  # by hand: biased projections, a gain and a bias per LayerNorm, one shared matrix
    attention, ffn, norm = 4 * (d * d + d), 2 * d * d_ff + d_ff + d, 2 * d
    encoder, decoder = 6 * (attention + ffn + 2 * norm), 6 * (2 * attention + ffn + 3 * norm)
    code, out, _ = cli("report", "base", "--format", "json")
    report = json.loads(out)
    parts = report["params"]
    assert code == 0 and report["name"] == "transformer-base" and parts["total"] == 37000 * d + encoder + decoder
    assert (parts["embeddings"]["total"], parts["encoder"]["total"], parts["decoder"]["total"]) == (37000 * d, encoder,
                                                                                                    decoder)
    assert (parts["encoder"]["ffn"], parts["encoder"]["norm"]) == (6 * ffn, 6 * 2 * norm)
    assert parts["decoder"]["attention"] == 6 * 2 * attention
    code, out, _ = cli("report", "table3/E1", "--format", "json")  # learned positions: two 1024 x 512 tables
    embeddings = json.loads(out)["params"]["embeddings"]
    assert code == 0 and embeddings == {"embedding": 37000 * d, "positional": 2 * 1024 * d, "total": 39048 * d}
    code, out, _ = cli("report", "base", "--format", "markdown")
    assert code == 0 and "| component | parameters | share |" in out and f"| encoder | {encoder:,} |" in out


def test_table3_command(cli):
    """Each row's count against the closed form, its paper figure against Table 3 as printed."""
    code, out, _ = cli("table3", "--format", "json")
    rows = json.loads(out)
    assert code == 0 and len(rows) == 20
    for r in rows:
        assert r["params"] == closed_form(load_spec(r["spec"])) and r["paper_millions"] == PAPER_MILLIONS.get(r["spec"])
        if r["paper_millions"]:
            assert r["deviation"] == pytest.approx(r["params"] / 1e6 / r["paper_millions"] - 1)
            assert abs(r["deviation"]) <= 0.07
    code, out, _ = cli("table3")
    assert code == 0 and "does not fudge" in out


def test_compile_runs_a_training_step(cli):
    torch.manual_seed(0)
    code, out, _ = cli("compile", "tiny")
    count = f"{closed_form(load_spec('tiny')):,}"
    assert code == 0 and f"parameters: IR {count}, module {count} (equal)" in out and "forward + backward" in out
    torch.manual_seed(0)  # the same weights, batch (2 x 16) and dropout through the library
    model = build_module(load_spec("tiny"))
    generator = torch.Generator().manual_seed(0)
    src, tgt = (torch.randint(4, 1000, (2, 16), generator=generator) for _ in range(2))
    loss = F.cross_entropy(model(src, tgt).flatten(0, 1), tgt.flatten())
    assert f"loss {loss.item():.3f} (uniform would be {math.log(1000):.3f})" in out


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
