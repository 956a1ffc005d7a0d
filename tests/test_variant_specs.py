"""The combined-variant specs of ``specs/variants`` (issue 57, part E): each validates, reports
and has the Table 1 facts of its layers; and ``tfspec train`` (the language-model task on the
shipped sample) trains ``variants/crosslayer-lm`` (value residual, residual attention, token
shift): its loss falls below the unigram entropy of the targets it predicts, and a run
interrupted and resumed gives the uninterrupted run's losses, step for step."""

from __future__ import annotations

import collections
import json
import math
from pathlib import Path

import pytest

from tfspec.analysis.complexity import layer_facts
from tfspec.cli import main
from tfspec.data import load_tokenizer, sample_dir
from tfspec.paper import TABLE1
from tfspec.spec import load_spec

VARIANTS = sorted(p.stem for p in (Path(__file__).parents[1] / "specs" / "variants").glob("*.yaml"))
SPEC = "variants/crosslayer-lm"


def test_there_is_a_handful():
    assert len(VARIANTS) >= 4, VARIANTS


@pytest.mark.parametrize("name", VARIANTS)
def test_each_validates_reports_and_has_table1_facts(name, capsys):
    """``tfspec report`` works, and every attention layer has the paper's self-attention row
    (Table 1: O(n²·d), O(1) sequential operations, O(1) path), however its layers are linked."""
    spec = load_spec(f"variants/{name}")
    assert main(["report", f"variants/{name}"]) == 0
    assert f"{spec.name}:" in capsys.readouterr().out
    paper = next(row for row in TABLE1 if row.label == "Self-Attention")
    for _, stack in spec.stacks:
        for _, layer in stack.sublayers():
            if layer.component == "attention":
                facts = layer_facts(layer)
                assert (facts.complexity, facts.sequential_ops, facts.max_path_length) == \
                    (paper.complexity, paper.sequential_ops, paper.max_path_length)


def losses(run: Path, key: str = "loss") -> list[float]:
    return [json.loads(line)[key] for line in (run / "metrics.jsonl").read_text().splitlines()]


def unigram_entropy(run: Path) -> float:
    """Entropy (nats per token) of the targets' unigram distribution: every token of the train
    split's target lines and their EOS, as the run's tokenizer cuts them."""
    tokenizer, counts = load_tokenizer(run / "tokenizer.model"), collections.Counter()
    for line in (sample_dir() / "train.de").read_text().splitlines():
        counts.update(tokenizer.encode(line.strip()) + [tokenizer.eos_id()])
    total = sum(counts.values())
    return -sum(c / total * math.log(c / total) for c in counts.values())


def train(run: Path, steps: int, *extra: str) -> None:
    args = ["--steps", str(steps), "--batch-tokens", "1200", "--warmup", "20", "--lr-scale", "2",
            "--save-every", str(max(steps // 2, 1)), "--log-every", "1", "--threads", "1", "--quiet"]
    assert main(["train", SPEC, "--out", str(run), *args, *extra]) == 0


def interrupted(run: Path, steps: int) -> list[float]:
    """The losses of a run stopped at half its steps and resumed to the end."""
    train(run, steps // 2)
    train(run, steps, "--resume")
    return losses(run)


def test_a_short_run_learns_and_resumes_exactly(tmp_path):
    """8 steps: the loss falls, and the interrupted run's losses are the uninterrupted one's."""
    whole = tmp_path / "whole"
    train(whole, 8)
    assert losses(whole)[-1] < losses(whole)[0]
    assert interrupted(tmp_path / "resumed", 8) == losses(whole)


@pytest.mark.slow
def test_a_longer_run_falls_well_below_the_unigram_baseline_and_resumes_exactly(tmp_path):
    """160 steps: the last 20 steps' mean loss is half a nat below the unigram entropy (a model
    of context, not of token frequencies), with the same curve after --resume."""
    whole = tmp_path / "whole"
    train(whole, 160)
    baseline, curve = unigram_entropy(whole), losses(whole, "nll")
    assert sum(curve[-20:]) / 20 < baseline - 0.5, (curve[-20:], baseline)
    assert interrupted(tmp_path / "resumed", 160) == losses(whole)
