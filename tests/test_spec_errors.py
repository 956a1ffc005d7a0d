"""Bad input gets one clear line per problem, naming file, line, field and fix; exit status 2."""

from __future__ import annotations

import subprocess
import sys

import pytest

GOOD = """\
vocab: 1000
d_model: 64
heads: 4
d_ff: 128
encoder: {layers: 2, block: [self_attention, ffn]}
decoder: {layers: 2, block: [causal_self_attention, cross_attention, ffn]}
"""

CASES = {
    # name: (spec text, substrings every error line set must contain)
    "malformed_yaml": ("vocab: 1000\nd_model: [64\n", ["spec.yaml:", "malformed YAML"]),
    "top_level_list": ("- 1\n- 2\n", ["spec.yaml:1", "must be a YAML mapping"]),
    "specials_only": (GOOD.replace("vocab: 1000", "vocab: 4"), ["spec.yaml:1: vocab.size", "no room for ordinary"]),
    "one_ordinary_token": (GOOD.replace("vocab: 1000", "vocab: 5"), ["spec.yaml:1: vocab.size", "at least 6"]),
    "zero_layers": (GOOD.replace("{layers: 2, block: [self", "{layers: 0, block: [self"),
                    ["spec.yaml:5", "encoder.layers", "greater than or equal to 1"]),
    "unknown_key": (GOOD + "dmodel: 512\n", ["spec.yaml:7", "dmodel", "did you mean 'd_model'"]),
    "unknown_nested_key": (GOOD.replace("{layers: 2, block: [self", "{layer: 2, block: [self"),
                           ["spec.yaml:5", "encoder.layer", "did you mean 'layers'"]),
    "wrong_type": (GOOD.replace("d_model: 64", "d_model: big"), ["spec.yaml:2", "d_model", "integer", "'big'"]),
    "heads_do_not_divide": (GOOD.replace("d_model: 64", "d_model: 50"),
                            ["heads", "d_model (50)", "heads (4)", "set d_k and d_v"]),
    "non_positive": (GOOD.replace("d_ff: 128", "d_ff: 0"), ["spec.yaml:4", "d_ff", "greater than or equal to 1"]),
    "negative_layers": (GOOD.replace("{layers: 2, block: [self", "{layers: -1, block: [self"),
                        ["encoder.layers", "greater than or equal to 1"]),
    "restricted_r_below_1": (GOOD.replace("block: [self_attention", "block: [{kind: restricted_self_attention, r: 0}"),
                             ["spec.yaml:5", "encoder.block[0].r", "greater than or equal to 1"]),
    "unknown_kind": (GOOD.replace("[self_attention", "[self_atention"),
                     ["encoder.block[0]", "unknown layer kind 'self_atention'", "did you mean 'self_attention'"]),
    "bad_literal": (GOOD + "norm: prenorm\n", ["spec.yaml:7", "norm", "did you mean 'pre'"]),
    "duplicate_key": (GOOD + "d_model: 128\n", ["spec.yaml:7", "duplicate key 'd_model'", "line 2"]),
    "decoder_sees_future": (GOOD.replace("[causal_self_attention", "[self_attention"),
                            ["spec.yaml:6", "decoder.block[0]", "future tokens", "causal_self_attention"]),
    "cross_attention_in_encoder": (GOOD.replace("[self_attention, ffn]", "[cross_attention, ffn]"),
                                   ["spec.yaml:5", "encoder.block[0]", "cross_attention", "only fits"]),
    "family_mismatch": ("family: decoder-only\n" + GOOD, ["encoder", "decoder-only has no encoder"]),
    "missing_vocab": (GOOD.replace("vocab: 1000\n", ""), ["vocab", "missing required field"]),
    "tie_all_unshared": (GOOD.replace("vocab: 1000", "vocab: {size: 1000, shared: false, target_size: 900}")
                         + "tie_embeddings: all\n",
                         ["tie_embeddings", "shared"]),
    "shared_vocab_sizes": (GOOD.replace("vocab: 1000", "vocab: {size: 1000, target_size: 900}"),
                           ["vocab.target_size", "shared"]),
    "buckets_without_relative_bias": (GOOD + "positional: {kind: relative, buckets: 16}\n",
                                      ["spec.yaml:7", "buckets shapes relative_bias or disentangled or gated_relative_bias positions", "kind is relative"]),
    "relative_bias_too_short": (GOOD + "positional: {kind: relative_bias, buckets: 32, max_distance: 16}\n",
                                ["positional.max_distance", "max_distance (16) must exceed buckets // 2 (16)"]),
    "scale_of_additive_scores": (GOOD.replace("[self_attention", "[{kind: self_attention, score: additive, scale: 1}"),
                                 ["encoder.block[0]", "scale (1.0) multiplies dot-product scores", "score is additive"]),
    "tie_inputs_decoder_only": ("family: decoder-only\ntie_embeddings: inputs\n" + GOOD.replace(
        "encoder: {layers: 2, block: [self_attention, ffn]}\n", "").replace("cross_attention, ", ""),
                                ["tie_embeddings", "'inputs' ties the source embedding"]),
    "python_tag": ('name: !!python/object/apply:os.system ["touch pwned"]\n' + GOOD, ["malformed YAML"]),
    "missing_extends": ("extends: nowhere.yaml\n" + GOOD, ["spec.yaml:1", "extends", "no such spec"]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_spec_is_one_clear_error(case, cli, write_spec, tmp_path, monkeypatch):
    text, needles = CASES[case]
    monkeypatch.chdir(tmp_path)
    path = write_spec(text)
    code, out, err = cli("validate", path)
    assert code == 2
    assert out == ""
    lines = err.strip().splitlines()
    assert all(line.startswith("error: ") for line in lines) and len(lines) <= 3, err
    for needle in needles:
        assert needle in err, f"{needle!r} not in {err!r}"
    assert not (tmp_path / "pwned").exists()


def test_cyclic_extends(cli, write_spec):
    write_spec("extends: b.yaml\n" + GOOD, "a.yaml")
    path = write_spec("extends: a.yaml\n", "b.yaml")
    code, _, err = cli("validate", path)
    assert code == 2 and "cycle" in err and "b.yaml -> a.yaml -> b.yaml" in err


def test_error_in_inherited_field_points_at_the_base_file(cli, write_spec):
    write_spec(GOOD.replace("d_ff: 128", "d_ff: -5"), "parent.yaml")
    path = write_spec("extends: parent.yaml\nheads: 2\n", "child.yaml")
    code, _, err = cli("validate", path)
    assert code == 2 and "parent.yaml:4: d_ff" in err


def test_error_in_overridden_field_points_at_the_child(cli, write_spec):
    write_spec(GOOD, "parent.yaml")
    path = write_spec("extends: parent.yaml\nheads: 2\nd_ff: -5\n", "child.yaml")
    code, _, err = cli("validate", path)
    assert code == 2 and "child.yaml:3: d_ff" in err and "parent.yaml" not in err


def _alias_bomb() -> str:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 9)]
    return "\n".join(lines) + "\n" + GOOD.replace("block: [self_attention, ffn]", "block: *a8")


def _alias_bomb_inline() -> str:
    """The same bomb as a layer's kind: pydantic printed the expanded value (3 GB, then abort)."""
    nested = '&a0 ["ffn", "ffn"]'
    for i in range(1, 9):
        nested = f"&a{i} [{nested}" + f", *a{i - 1}" * 8 + "]"
    return GOOD.replace("block: [self_attention, ffn]", f"block: [{{kind: {nested}}}]")


@pytest.mark.parametrize("content,needle", [
    (b"\xff\xfe\x00bad", "not UTF-8"),
    (("a: " + "[" * 20000 + "]" * 20000 + "\n").encode(), "nested too deeply"),
    (_alias_bomb().encode(), "aliases expand to 2,345,679,042 values"),  # must answer at once
    (_alias_bomb_inline().encode(), "its aliases expand to"),
])
def test_hostile_files(cli, tmp_path, content, needle):
    path = tmp_path / "spec.yaml"
    path.write_bytes(content)
    code, _, err = cli("validate", path)
    assert code == 2 and needle in err and "Traceback" not in err


def test_missing_file(cli, tmp_path):
    code, _, err = cli("validate", tmp_path / "absent.yaml")
    assert code == 2 and "absent.yaml" in err and "no such spec file" in err


def test_a_training_run_given_as_spec_says_what_to_do(cli, tmp_path):
    """`report` names the run's export; `export` of a run with a broken run.json says so, once."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text("{}")
    code, _, err = cli("report", run)
    assert code == 2 and err.count("error:") == 1 and "a training run, not a spec" in err
    assert f"`tfspec export {run}`" in err
    code, _, err = cli("export", run, "-o", tmp_path / "out")
    assert code == 2 and err.count("error:") == 1 and "run.json: corrupt" in err and not (tmp_path / "out").exists()


def test_all_problems_reported_together(cli, write_spec):
    path = write_spec(GOOD.replace("d_ff: 128", "d_ff: 0").replace("d_model: 64", "d_model: x"))
    code, _, err = cli("validate", path)
    assert code == 2 and "d_ff" in err and "d_model" in err


def test_unknown_keys_and_bad_values_are_reported_in_one_run(cli, write_spec):
    """An unknown key used to stop validation there; every key and value refused on its own is
    listed at once, each on its line, and nothing that only follows from a refused value."""
    text = (GOOD.replace("d_model: 64", "d_modle: 64\nd_model: 64").replace("d_ff: 128", "d_ff: 1.5")
            .replace("{layers: 2, block: [causal", "{layers: 2, blocks: 3, block: [causal"))
    code, _, err = cli("validate", write_spec(text))
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 3 and all(line.startswith("error: ") for line in lines), err
    assert "spec.yaml:2: d_modle: unknown field (did you mean 'd_model'?)" in lines[0]
    assert any("spec.yaml:5: d_ff:" in line and "integer" in line for line in lines)
    assert any("spec.yaml:7: decoder.blocks: unknown field (did you mean 'block'?)" in line for line in lines)


def good_params(d: int) -> int:
    """GOOD's parameters by hand at d_model d: biased projections, a gain and a bias per LayerNorm,
    source and target embeddings of 1000 rows (the projection shares the target's)."""
    attention, ffn, norm = 4 * (d * d + d), 2 * d * 128 + 128 + d, 2 * d
    return 2 * 1000 * d + 2 * (attention + ffn + 2 * norm) + 2 * (2 * attention + ffn + 3 * norm)


def test_absurd_size_warns_and_compile_refuses_before_allocating(cli, write_spec):
    path = write_spec(GOOD.replace("d_model: 64", "d_model: 1048576").replace("heads: 4", "heads: 4"))
    code, out, err = cli("validate", path)
    count = good_params(1048576)
    assert code == 0 and "warning" in err and f"{count:,} parameters" in out
    assert f"{count:.3g} parameters ({count * 4 / 2**40:.1f} TiB in float32)" in err
    code, out, err = cli("compile", path)
    assert code == 2 and "more than" in err and "--device meta" in err


def test_cli_process_prints_no_traceback(write_spec):
    path = write_spec(GOOD + "dmodel: 1\n")
    proc = subprocess.run([sys.executable, "-m", "tfspec", "validate", str(path)], capture_output=True, text=True)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and "dmodel" in proc.stderr


def test_good_spec_validates(cli, write_spec):
    code, out, err = cli("validate", write_spec(GOOD))
    assert code == 0 and out.startswith("ok: ") and f"{good_params(64):,} parameters" in out and err == ""


def test_independent_cross_field_problems_are_all_reported(tmp_path, cli):
    """Three checks between fields that do not depend on each other: three `error:` lines at
    their own lines, one run (issue 54), where pydantic's after-validator would stop at the first."""
    path = tmp_path / "three.yaml"
    path.write_text("extends: base\nkv_heads: 3\nnorm_type: rms\nnorm_bias: true\nfamily: encoder-decoder\n"
                    "tie_embeddings: all\nvocab: {size: 1000, shared: false, target_size: 900}\n", encoding="utf-8")
    code, _, err = cli("validate", path)
    lines = [line for line in err.splitlines() if line.startswith(f"error: {path}:")]
    assert code == 2
    assert any(":2: kv_heads: heads (8) must be a multiple of kv_heads (3)" in line for line in lines), err
    assert any(":4: norm_bias: RMSNorm has no bias" in line for line in lines), err
    assert any(":6: tie_embeddings: tie_embeddings 'all' ties the source embedding" in line for line in lines), err
