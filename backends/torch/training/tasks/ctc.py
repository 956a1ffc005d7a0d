"""CTC on lines of frames (Graves et al. 2006): a spec with frames and a ctc head learns to read a
line's labelling, and the framewise baseline (the same spec on per-frame labels) beside it.

A step draws ``config.batch`` lines from ``default_rng([seed, step])``, so a resumed run sees
the batches an uninterrupted one would; the loss is summed over them and divided by their
number. The reader takes a directory from ``tfspec data digit-lines``; the evaluation is the
character error rate on its dev and held-out test lines, of best paths, prefix beam search and
(when given) an exported model, against the framewise baseline's collapsed best paths.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from ..ctc import OBJECTIVES, LinesConfig, make_batch, train_lines, transcribe_lines
from ..trainer import Loop, Task
from . import misfit, task

BEAM_WIDTH = 8
"""Prefix beam search's width in the training run's scores."""
TRAINED = ("ctc", "framewise")
"""What a run trains on lines, each into RUN/OBJECTIVE: CTC, then the framewise baseline."""


@task("ctc")
class CTC(Task):
    trains = "a spec with frames and a ctc head, beside its framewise baseline"
    reads = "lines of frames (`tfspec data digit-lines`)"

    @staticmethod
    def fits(spec) -> bool:
        return spec.frames is not None and getattr(spec.head, "kind", None) == "ctc"

    @classmethod
    def holds(cls, data: Path) -> bool:
        from tfspec.data.digits import read_manifest

        return read_manifest(data) is not None

    def __init__(self, spec, config: LinesConfig, lines: list, objective: str = "ctc"):
        super().__init__(spec, config, Loop.of(config))
        self.lines, self.objective, self.label = lines, objective, f"{objective} "

    def batches(self, state: dict, count: int, mine: slice) -> tuple[list[dict], float]:
        rng = np.random.default_rng([self.loop.seed, state["step"]])
        drawn = [self.lines[i] for i in rng.integers(0, len(self.lines), self.config.batch)]
        return [make_batch(drawn, self.spec.head.symbols)], self.config.batch

    def loss(self, net, model, batch: dict):
        return OBJECTIVES[self.objective](model, batch, self.spec.head.blank), {}


def read_lines(spec, data: Path | None) -> dict[str, list]:
    """Every split of a digit-lines directory, refused in one line when ``data`` is something else."""
    from tfspec.data.digits import SPLITS, read_digit_lines

    if data is None or not CTC.holds(data):
        raise misfit(spec, CTC, data, f"{data}: no digit-lines manifest" if data else "no --data")
    return {split: read_digit_lines(data, split) for split in SPLITS}


def train_with_baseline(spec, lines: list, run: Path, config: LinesConfig, progress: bool = True, log=print,
                        resume: bool = False) -> tuple[dict, dict]:
    """CTC, then the framewise baseline, on the same lines and steps: ({objective: model},
    {objective: {steps, minutes}})."""
    models, training = {}, {}
    for objective in TRAINED:
        log(f"{spec.name}: {objective} on {len(lines):,} lines ({config.steps:,} steps of {config.batch} lines"
            f"{f', at most {config.max_minutes:g} min' if config.max_minutes else ''})")
        began = time.perf_counter()
        models[objective], last = train_lines(spec, lines, run / objective, config, objective, progress, log, resume)
        training[objective] = {"steps": last["step"], "minutes": round((time.perf_counter() - began) / 60, 2)}
    return models, training


def score(head, models: dict, exported, splits: dict[str, list]) -> dict[str, dict[str, float]]:
    """{model: {split: character error rate}} of the CTC model (best path, prefix beam, and
    ``exported``, a function reading frames into text, when given) and the framewise baseline."""
    from tfspec.ctc import character_error_rate

    rows = [("CTC, best path", "ctc", 1), (f"CTC, prefix beam {BEAM_WIDTH}", "ctc", BEAM_WIDTH),
            ("framewise baseline, collapsed", "framewise", 1)]
    scores = {}
    for split, lines in splits.items():
        references = [line.text for line in lines]
        for label, objective, beam in rows:
            hypotheses = transcribe_lines(models[objective], lines, head, beam)
            scores.setdefault(label, {})[split] = character_error_rate(hypotheses, references)
        if exported is not None:
            hypotheses = [exported(line.frames) for line in lines]
            scores.setdefault("CTC, ONNX Runtime best path", {})[split] = character_error_rate(hypotheses, references)
    return scores


def write_results(run: Path, splits: dict, scores: dict, training: dict, minutes: float) -> None:
    """RUN/results.json: the lines scored, every CER, each objective's steps and minutes."""
    record = {"lines": {s: len(lines) for s, lines in splits.items()}, "cer": scores, "training": training,
              "minutes": round(minutes, 2)}
    (run / "results.json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
