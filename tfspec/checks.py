"""One comparison of two implementations of the same model (ONNX graphs or a Hugging Face
checkpoint against the PyTorch backend): what was compared, by how much they differ, and
the tolerance that decides it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Check:
    name: str
    diff: float
    """Largest absolute difference (for token checks: the number of differing tokens)."""
    tolerance: float

    @property
    def ok(self) -> bool:
        return self.diff <= self.tolerance

    def __str__(self) -> str:
        mark = "ok  " if self.ok else "FAIL"
        return f"{mark} {self.name}: max |diff| {self.diff:.2e} (tolerance {self.tolerance:g})"
