"""Training cost of a run from the FLOP count, beside the paper's Table 2 estimate.

tfspec counts the work the model needs: 3 x forward matmul FLOPs per sequence (forward +
backward, ``tfspec.analysis.flops``) x sequences per step x steps, where a step of T tokens
holds T / n sequences of length n (an encoder-decoder's step also holds T source tokens, as the
paper's ~25000 + 25000-token batches do, §5.1). The paper instead multiplies training time by
the number of GPUs and their sustained single-precision rate (Table 2's footnote): that is the
hardware's capacity over the run, idle and non-matmul time included, so it bounds tfspec's count
from above and their ratio is the utilisation it implies.
"""

from __future__ import annotations

from dataclasses import dataclass

from tfspec.analysis.flops import FlopReport
from tfspec.errors import TfspecError
from tfspec.paper import TABLE2, Table2Cost

TOKENS_PER_STEP = 25_000
"""Target tokens per training step: the paper's batches (§5.1)."""


@dataclass(frozen=True)
class TrainingCost:
    steps: int
    tokens_per_step: int
    n: int
    per_step: float
    """Training FLOPs of one step: 3 x forward per sequence x tokens_per_step / n."""
    paper: Table2Cost | None
    """The paper's Table 2 cost of the same model, if the spec is one of its rows."""

    @property
    def total(self) -> float:
        return self.per_step * self.steps

    @property
    def utilisation(self) -> float | None:
        """tfspec's count over the paper's hardware-time estimate, for a run as long as the paper's."""
        if self.paper is None or self.steps != self.paper.steps:
            return None
        return self.total / self.paper.flops

    def to_json(self) -> dict:
        out = {"steps": self.steps, "tokens_per_step": self.tokens_per_step, "n": self.n,
               "sequences_per_step": self.tokens_per_step / self.n, "flops_per_step": self.per_step,
               "total_flops": self.total, "method": "3 x forward matmul FLOPs x sequences per step x steps"}
        if self.paper is not None:
            p = self.paper
            out["paper"] = {"row": p.row, "flops": p.flops, "method": f"{p.hours:g} h x {p.gpus} GPUs x "
                            f"{p.tflops_per_gpu:g} TFLOPS (training time x GPUs x sustained rate)",
                            "steps": p.steps, "ratio": self.utilisation}
        return out


def training_cost(report: FlopReport, steps: int, tokens_per_step: int = TOKENS_PER_STEP,
                  reference_row: str | None = None) -> TrainingCost:
    """Training FLOPs of ``steps`` steps of ``tokens_per_step`` tokens at the report's length."""
    if steps < 1 or tokens_per_step < 1:
        raise TfspecError(f"--steps ({steps}) and --tokens-per-step ({tokens_per_step}) must be positive")
    per_step = report.training * tokens_per_step / report.n
    return TrainingCost(steps, tokens_per_step, report.n, per_step, TABLE2.get(reference_row))
