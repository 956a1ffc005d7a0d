"""Specs with numbers, keys, paths and sizes no real model has: one `error:` line, at once.

Each case is a class of input that once ended in a traceback or a hang (issue 16): numbers that
overflowed numpy/int32 or ran validation for minutes, keys that reached ``int()``, paths the
file system refuses, and files of megabytes.
"""

from __future__ import annotations

import json
import time

import pytest

from test_spec_errors import GOOD
from tfspec.cli import main
from tfspec.spec import Spec


def refused(cli, path, *needles, command="validate"):
    started = time.perf_counter()
    code, out, err = cli(command, path)
    lines = err.strip().splitlines()
    assert code == 2, err
    assert lines and all(line.startswith("error: ") for line in lines) and len(lines) <= 3, err
    for needle in needles:
        assert needle in err, f"{needle!r} not in {err!r}"
    assert time.perf_counter() - started < 5


@pytest.mark.parametrize("text,needles", [
    (GOOD.replace("d_model: 64", "d_model: " + "9" * 5000), ["malformed YAML", "cannot be read"]),
    (GOOD.replace("d_model: 64", "d_model: 0x" + "F" * 5000), ["d_model", "less than or equal to 1048576",
                                                               "an integer of"]),
    (GOOD.replace("d_ff: 128", f"d_ff: {2**63}"), ["d_ff", "less than or equal to 1048576"]),
    (GOOD.replace("layers: 2, block: [self", f"layers: {10**30}, block: [self"), ["encoder.layers", "1024"]),
    (GOOD.replace("[self_attention, ffn]", f"[{{kind: conv, kernel: 3, dilation: {10**12}}}, ffn]"),
     ["encoder.block[0].dilation", "less than or equal to"]),
    (GOOD + "norm_eps: .nan\n", ["norm_eps", "finite number"]),
    (GOOD + "positional: {kind: rotary, base: .inf}\n", ["positional.base", "finite number"]),
    (GOOD + "dropout: 1e400\n", ["dropout"]),
])
def test_numbers_beyond_any_model(cli, write_spec, text, needles):
    refused(cli, write_spec(text), *needles)


def test_heterogeneous_groups_count_towards_the_layer_bound(cli, write_spec):
    groups = ", ".join(["{layers: 1000, block: [ffn]}"] * 3)
    path = write_spec(GOOD.replace("{layers: 2, block: [self_attention, ffn]}", f"{{groups: [{groups}]}}"))
    refused(cli, path, "encoder.groups", "3,000 layers", "1,024")


@pytest.mark.parametrize("key", ["²", "١", "0", "d-model", "?"])
def test_keys_that_are_not_field_names(cli, write_spec, key):
    refused(cli, write_spec(GOOD + f"'{key}': 3\n"), "is not a field name")


def test_keys_of_other_yaml_types(cli, write_spec):
    refused(cli, write_spec(GOOD + "? [a, b]\n: 3\n"), "malformed YAML", "unhashable key")
    refused(cli, write_spec(GOOD + "7: 3\n"), "'7' is not a field name")


@pytest.mark.parametrize("extends", ["a" * 5000, "x/" * 3000 + "base.yaml", "/dev/zero", "''"])
def test_extends_the_file_system_refuses(cli, write_spec, extends):
    refused(cli, write_spec(f"extends: {extends}\n" + GOOD), "extends")


def test_spec_path_too_long(cli):
    refused(cli, "a" * 5000 + ".yaml", "no such spec file")


def test_huge_spec_file_is_refused_before_parsing(cli, tmp_path):
    path = tmp_path / "spec.yaml"
    entries = "\n".join(["  - ffn"] * 1_500_000)
    path.write_text(GOOD.replace("encoder: {layers: 2, block: [self_attention, ffn]}", "encoder:\n layers: 2\n"
                                 f" block:\n{entries}"))
    refused(cli, path, "too large for a spec")


def test_long_block_lists_are_refused_by_length(cli, write_spec):
    path = write_spec(GOOD.replace("[self_attention, ffn]", "[" + ", ".join(["ffn"] * 5000) + "]"))
    refused(cli, path, "encoder.block", "at most 64")


def test_largest_legal_sizes_analyse_quickly(cli, write_spec):
    """At every bound at once a spec still validates and reports (it cannot be allocated here)."""
    path = write_spec("vocab: 16777216\nd_model: 1048576\nheads: 4096\nd_ff: 1048576\n"
                      "positional: {kind: learned, max_len: 16777216}\n"
                      "encoder: {layers: 2, block: [{kind: conv, kernel: 4096, dilation: 1048576}, ffn]}\n"
                      "decoder: {layers: 2, block: [causal_self_attention, cross_attention, ffn]}\n")
    started = time.perf_counter()
    code, out, err = cli("report", path)
    assert code == 0 and "warning:" in err and "parameters" in out
    assert time.perf_counter() - started < 10
    for command in (["compile"], ["export", "-o", path.parent / "out"]):  # refused before allocating
        code, _, err = cli(command[0], path, *command[1:])
        assert code == 2 and "--device meta" in err and not (path.parent / "out").exists()


def test_bounds_are_in_the_json_schema(cli):
    code, out, _ = cli("schema")
    schema = json.loads(out)
    fields = schema["properties"]
    assert fields["d_model"]["maximum"] == 2**20 and fields["d_model"]["minimum"] == 1
    layers = schema["$defs"]["Stack"]["properties"]["layers"]["anyOf"][0]
    assert layers["maximum"] == 1024


def test_api_validation_names_the_source():
    with pytest.raises(Exception) as info:
        from tfspec.spec import spec_from_data
        spec_from_data({"vocab": 10, "d_model": -1}, "run.json")
    assert "run.json" in str(info.value) and "d_model" in str(info.value)
    assert Spec.model_json_schema()["properties"]["heads"]["maximum"] == 4096


def test_a_bug_keeps_its_traceback(monkeypatch, capsys, write_spec):
    """Input errors are one line; a bug in tfspec is not disguised as one."""
    import tfspec.cli as cli_module

    def broken(spec):
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr("tfspec.cli.specs.build_graph", broken)
    code = main(["validate", str(write_spec(GOOD))])
    err = capsys.readouterr().err
    assert code == cli_module.BUG and "Traceback" in err and "ZeroDivisionError" in err and "this is a bug" in err
