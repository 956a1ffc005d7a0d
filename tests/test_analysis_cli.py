"""`tfspec report` FLOP/path/cost sections, `tfspec plot`, errors, and analysis without torch."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import REPO


@pytest.mark.parametrize("command", ["table1", "plot"])
def test_new_commands_explain_themselves(command, capsys):
    from tfspec.cli import parser

    with pytest.raises(SystemExit) as exit_:
        parser().parse_args([command, "--help"])
    assert exit_.value.code == 0 and "Table 1" in capsys.readouterr().out


def base_flops(n: int, d: int = 512, d_ff: int = 2048) -> tuple[int, int, int]:
    """(one self-attention, one FFN, the whole forward pass) of the base model at length n, by hand:
    2 FLOPs per multiply-add, every attention score counted (dense, masked ones too). Attention =
    W^Q, W^K, W^V, W^O (8 n d^2) + scores and weighted values (4 n^2 d), cross-attention the same
    with m = n keys; FFN 4 n d d_ff; the 37000-way projection 2 n d V; 6 + 6 layers."""
    attention, ffn = 8 * n * d * d + 4 * n * n * d, 4 * n * d * d_ff
    return attention, ffn, 6 * (attention + ffn) + 6 * (2 * attention + ffn) + 2 * n * d * 37000


def test_report_text_has_flops_paths_and_paper_cost(cli):
    code, out, _ = cli("report", "base", "--n", "32")
    assert code == 0 and "forward FLOPs at n = 32" in out and "training (forward + backward = 3 x forward)" in out
    forward = base_flops(32)[2]
    shown = f"forward: {forward:.3g} FLOPs per sequence, {forward / 32:.3g} per token"  # 4.07e9, not 4.07e+09
    assert shown.replace("e+0", "e") in out
    assert "encoder: 12 sub-layers, 12 sequential operations, longest path 12 hops at n = 32" in out
    assert "training cost: 100,000 steps x 25,000 tokens" in out
    assert "paper, Table 2 (base, 100,000 steps): 3.3e18" in out
    assert "| component | parameters | share |" in cli("report", "base", "--format", "markdown")[1]


def test_report_json_carries_table1_measures_per_layer(cli):
    code, out, _ = cli("report", "base", "--format", "json", "--n", "40", "--steps", "1000",
                       "--tokens-per-step", "4000")
    report = json.loads(out)
    assert code == 0 and report["params"]["total"] == 63_082_496  # the parameter report is unchanged
    layers = {(r["stack"], r["layer"]): r for r in report["layers"]}
    attention = layers["encoder", "self_attention"]
    assert attention["count"] == 6 and attention["complexity"] == "O(n²·d)"
    assert attention["sequential_ops"] == {"class": "O(1)", "at_n": 1}
    assert attention["max_path_length"] == {"class": "O(1)", "at_n": 1}
    assert layers["decoder", "ffn"]["max_path_length"]["class"] is None  # position-wise
    one_attention, one_ffn, forward = base_flops(40)
    assert attention["forward_flops"] == one_attention and layers["decoder", "ffn"]["forward_flops"] == one_ffn
    flops = report["flops"]
    assert flops["forward_per_sequence"] == forward
    assert flops["training_per_sequence"] == 3 * forward  # the backward pass: twice the forward's products
    cost = report["training_cost"]
    assert cost["steps"] == 1000 and cost["sequences_per_step"] == 100
    assert cost["total_flops"] == pytest.approx(1000 * 100 * flops["training_per_sequence"])
    assert cost["paper"]["flops"] == 3.3e18 and cost["paper"]["ratio"] is None  # not the paper's run length
    assert report["paths"]["decoder"] == {"sublayers": 18, "sequential_ops": 18, "max_path_length": 18,
                                          "reach": 39, "causal": True}


def test_report_of_recurrent_and_restricted_stacks(cli, write_spec):
    path = write_spec("""
        family: encoder-only
        vocab: 100
        d_model: 32
        heads: 4
        encoder:
          layers: 2
          block: [{kind: restricted_self_attention, r: 3}, {kind: recurrent, cell: gru, bidirectional: true}]
    """)
    code, out, _ = cli("report", path, "--n", "50", "--format", "json")
    report = json.loads(out)
    assert code == 0 and report["training_cost"] is None
    # Position 0 to 49: 4 sub-layer hops, 3 + 3 positions by attention, the other 43 along the recurrences.
    assert report["paths"]["encoder"]["max_path_length"] == 4 + 43
    gru = next(r for r in report["layers"] if r["layer"].startswith("recurrent"))
    assert gru["sequential_ops"] == {"class": "O(n)", "at_n": 50} and gru["complexity"] == "O(n·d²)"
    assert "pass --steps" in cli("report", path)[1]


def test_report_bad_options_are_clear_errors(cli, capsys):
    code, _, err = cli("report", "base", "--n", "100000")
    assert code == 2 and err.startswith("error:") and "n must be 1.." in err
    for args in (["--n", "0"], ["--steps", "-5"]):  # out of range: the parser names the flag
        with pytest.raises(SystemExit) as info:
            cli("report", "base", *args)
        assert info.value.code == 2 and f"argument {args[0]}: must be between 1" in capsys.readouterr().err


def test_plot_writes_png_and_svg(cli, tmp_path):
    code, out, _ = cli("plot", "-o", tmp_path / "table1.png")
    assert code == 0 and (tmp_path / "table1.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    code, _, _ = cli("plot", "tiny", "--d", "128", "-o", tmp_path / "tiny.svg")
    svg = (tmp_path / "tiny.svg").read_text()
    assert code == 0 and "<svg" in svg and "n = d = 128" in svg


def test_plot_errors(cli, tmp_path, monkeypatch):
    code, _, err = cli("plot", "-o", tmp_path / "x.pdf")
    assert code == 2 and ".png or .svg" in err
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if not installed
    code, _, err = cli("plot", "-o", tmp_path / "x.png")
    assert code == 2 and "pip install 'tfspec[plot]'" in err


def test_table1_spec_with_two_layers_is_refused(write_spec):
    from tfspec import load_spec
    from tfspec.analysis.table1 import single_layer
    from tfspec.errors import TfspecError

    with pytest.raises(TfspecError, match="exactly one layer"):
        single_layer(load_spec(write_spec("extends: base.yaml\nvocab: 100\n")))


def test_analysis_of_big_and_48_layers_runs_without_torch(tmp_path):
    """Analysis is pure: spec -> IR -> formulas and position graphs, never a tensor."""
    (tmp_path / "xl.yaml").write_text("family: decoder-only\nvocab: 50257\nd_model: 1600\nheads: 25\nd_ff: 6400\n"
                                      "norm: pre\ntie_embeddings: output\n"
                                      "decoder: {layers: 48, block: [causal_self_attention, ffn]}\n")
    script = textwrap.dedent(f"""
        import sys, time
        from tfspec import build_graph, load_spec
        from tfspec.analysis.complexity import layer_facts
        from tfspec.analysis.cost import training_cost
        from tfspec.analysis.flops import analyze_flops
        from tfspec.analysis.paths import stack_paths
        for ref in ("big", {str(tmp_path / "xl.yaml")!r}):
            started = time.perf_counter()
            spec = load_spec(ref)
            report = analyze_flops(build_graph(spec), 128)
            facts = [layer_facts(row.layer) for row in report.layers if row.layer is not None]
            paths = [stack_paths([x for _, x in stack.sublayers()], 128) for _, stack in spec.stacks]
            training_cost(report, 1000)
            print(ref, report.forward, len(facts), [p.longest for p in paths], time.perf_counter() - started)
        assert "torch" not in sys.modules, "analysis imported torch"
    """)
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    big, xl = done.stdout.splitlines()
    assert big.split()[3:5] == ["[12,", "18]"] and xl.split()[3] == "[96]"
