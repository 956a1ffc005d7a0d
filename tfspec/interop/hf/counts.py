"""transformers' parameter count of an imported spec, where it differs from tfspec's.

Some classes count by another convention than tfspec (``Family.count_differences``): Marian
and Pegasus store their sinusoid tables as parameters, which tfspec computes; BART's family
keeps the trained final_logits_bias as a buffer, which tfspec counts as the output bias.
``report`` prints the difference beside the count, so a user comparing it with
``model.num_parameters()`` reads why they differ where they read the number."""

from __future__ import annotations

from tfspec.interop.hf.imports import FAMILIES


def transformers_count(spec, total: int) -> dict | None:
    """``{"architecture", "total", "differences": [{"count", "what"}]}`` for a spec ``tfspec
    import`` wrote (its ``reference.architecture``) whose class counts otherwise than tfspec's
    ``total``; None for other specs and where the counts agree."""
    architecture = spec.reference.architecture if spec.reference is not None else None
    family = next((f for f in FAMILIES.values() if architecture in f.architectures), None)
    if family is None:
        return None
    differences = [{"count": n, "what": what} for n, what in family().count_differences(spec, architecture) if n]
    if not differences:
        return None
    return {"architecture": architecture, "total": total + sum(d["count"] for d in differences),
            "differences": differences}


def count_line(count: dict) -> str:
    """``transformers counts 414,307,328 (MarianMTModel): +2,097,152 sinusoid tables ...``"""
    parts = ", ".join(f"{d['count']:+,} {d['what']}" for d in count["differences"])
    return f"transformers counts {count['total']:,} ({count['architecture']}): {parts}"
