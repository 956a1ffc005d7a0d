"""Plain-text and Markdown tables for the CLI (no terminal codes: output pipes cleanly)."""

from __future__ import annotations


def render(headers: list[str], rows: list[list], fmt: str = "text") -> str:
    cells = [[str(c) for c in headers]] + [["" if c is None else str(c) for c in row] for row in rows]
    if fmt == "markdown":
        out = ["| " + " | ".join(cells[0]) + " |", "|" + "|".join("---" for _ in headers) + "|"]
        return "\n".join(out + ["| " + " | ".join(r) + " |" for r in cells[1:]]) + "\n"
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    numeric = [all(_numeric(r[i]) for r in cells[1:] if r[i]) for i in range(len(headers))]
    lines = []
    for r in cells:
        lines.append("  ".join(c.rjust(w) if num else c.ljust(w) for c, w, num in zip(r, widths, numeric)).rstrip())
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines) + "\n"


def _numeric(text: str) -> bool:
    return text.replace(",", "").replace(".", "").replace("%", "").replace("+", "").replace("-", "").replace(
        "M", "").strip().isdigit()


def millions(n: int) -> str:
    return f"{n / 1e6:.1f}M"
