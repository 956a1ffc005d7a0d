"""Parameter counts: IR vs emitted module, vs a closed-form count, vs the paper's Table 3."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tfspec import build_graph, load_spec
from tfspec.backends.torch import build_module
from tests.conftest import SHIPPED

# Table 3 of Vaswani et al. 2017, "params x10^6" column (arXiv:1706.03762).
PAPER_MILLIONS = {"base": 65, "table3/B1": 58, "table3/B2": 60, "table3/C1": 36, "table3/C2": 50,
                  "table3/C3": 80, "table3/C4": 28, "table3/C5": 168, "table3/C6": 53, "table3/C7": 90,
                  "big": 213}


def closed_form(spec) -> int:
    """The paper's model counted by hand: shared embedding/projection matrix, biased projections,
    and for pre-norm stacks the final LayerNorm of encoder and decoder."""
    d, f, h, dk, dv, n = spec.d_model, spec.d_ff, spec.heads, spec.d_k, spec.d_v, spec.encoder.num_layers
    attention = d * h * dk * 2 + 2 * h * dk + d * h * dv + h * dv + h * dv * d + d
    ffn = 2 * d * f + f + d
    norm = 2 * d
    learned = spec.positional.max_len * d * 2 if spec.positional.kind == "learned" else 0
    final = 2 * norm if spec.uses_final_norm else 0
    return (spec.vocab.size * d + learned + final + n * (attention + ffn + 2 * norm)
            + n * (2 * attention + ffn + 3 * norm))


@pytest.mark.parametrize("name", SHIPPED)
def test_ir_count_equals_module_numel(name):
    graph = build_graph(load_spec(name))
    module = build_module(graph, device="meta")
    assert sum(p.numel() for p in module.parameters()) == graph.num_params
    assert {n: tuple(p.shape) for n, p in module.named_parameters()} == {n: p.shape for n, p in graph.params.items()}


@pytest.mark.parametrize("name", [n for n in SHIPPED if n != "tiny" and not n.startswith(("table1/", "zoo/", "tasks/", "variants/"))])
def test_paper_models_match_closed_form(name):
    spec = load_spec(name)
    assert build_graph(spec).num_params == closed_form(spec)


@pytest.mark.parametrize("name", sorted(PAPER_MILLIONS))
def test_table3_within_7_percent(name):
    spec = load_spec(name)
    assert spec.reference.params_millions == PAPER_MILLIONS[name]  # transcribed correctly
    assert abs(build_graph(spec).num_params / 1e6 / PAPER_MILLIONS[name] - 1) <= 0.07


def test_base_count_is_the_known_63m():
    assert build_graph(load_spec("base")).num_params == 63_082_496


def test_tied_matrix_is_one_parameter():
    module = build_module(load_spec("tiny"))
    emb = module.get_parameter("encoder.embed.weight")
    assert module.decoder.embed.weight is emb and module.output.weight is emb


def test_untied_and_output_tying(write_spec):
    counts = {}
    for tie in ("none", "output", "all"):
        path = write_spec(f"extends: tiny\ntie_embeddings: {tie}\n", f"{tie}.yaml")
        graph = build_graph(load_spec(path))
        counts[tie] = graph.num_params
        assert sum(p.numel() for p in build_module(graph, device="meta").parameters()) == graph.num_params
    matrix = 1000 * 64
    assert counts["none"] - counts["output"] == matrix and counts["output"] - counts["all"] == matrix


def test_report_of_big_model_allocates_nothing_and_skips_torch():
    code = ("import sys; from tfspec.cli import main; main(['report', 'big', '--format', 'json']);"
            "assert 'torch' not in sys.modules, 'report imported torch'")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert f'"total": {closed_form(load_spec("big"))}' in out.stdout
