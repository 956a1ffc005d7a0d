"""User-facing errors: the CLI prints them as one line each and exits with status 2.

Anything that is not a ``TfspecError`` is a bug in tfspec and keeps its traceback.
"""

from __future__ import annotations

from dataclasses import dataclass


class TfspecError(Exception):
    """An error caused by the user's input (a spec, a file, a size), not by tfspec."""

    def lines(self) -> list[str]:
        return str(self).splitlines() or [type(self).__name__]


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a spec: where it is (file, line, field path) and what to do."""

    file: str
    line: int | None
    path: str
    message: str

    def __str__(self) -> str:
        where = self.file + (f":{self.line}" if self.line else "")
        return f"{where}: {self.path}: {self.message}" if self.path else f"{where}: {self.message}"


class SpecError(TfspecError):
    """A spec that cannot be loaded or validated; carries every problem found."""

    def __init__(self, problems: list[Problem]):
        self.problems = problems
        super().__init__("\n".join(map(str, problems)))

    @classmethod
    def one(cls, file: str, message: str, path: str = "", line: int | None = None) -> SpecError:
        return cls([Problem(file, line, path, message)])

    def lines(self) -> list[str]:
        return [str(p) for p in self.problems]
