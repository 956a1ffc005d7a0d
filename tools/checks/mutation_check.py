"""Do the tests fail when the code is wrong? Each curated mutant in ``tools/checks/mutants/`` is a
deliberate, plausible bug (a mask off by one, a rotary half swapped, a length penalty's sign
flipped, ...): one exact text replacement in one file, with the tests that cover that code.
The check applies each mutant to a private copy of the tree, runs only those tests, and
reports the mutants that survive (their tests still pass). The working tree is never touched,
so an interrupted check leaves nothing behind.

    python tools/checks/mutation_check.py                 # every mutant: exit 1 if one survives
    python tools/checks/mutation_check.py --only gelu     # mutants whose name contains "gelu"
    python tools/checks/mutation_check.py --list          # the mutants and their tests

Before the mutants run, their tests run once on the unmutated copy (skip with --no-baseline):
a test that already fails would "kill" every mutant that selects it.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MUTANTS_DIR = Path(__file__).resolve().parent / "mutants"


@dataclass(frozen=True)
class Mutant:
    """One bug: ``old`` (occurring exactly once in ``file``) replaced by ``new``."""

    name: str
    file: str
    old: str
    new: str
    tests: tuple[str, ...]
    area: str


def load_mutants() -> list[Mutant]:
    """Every mutant of every area file (``tools/checks/mutants/AREA.py`` holds ``MUTANTS``, a list of
    dicts with name, file, old, new and tests); names are unique and each ``old`` text occurs
    exactly once and each test named exists, so a stale mutant is an error rather than a silent pass."""
    mutants: list[Mutant] = []
    for path in sorted(MUTANTS_DIR.glob("*.py")):
        spec = importlib.util.spec_from_file_location(f"mutants_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        for entry in module.MUTANTS:
            mutants.append(Mutant(area=path.stem, **{**entry, "tests": tuple(entry["tests"])}))
    names = [m.name for m in mutants]
    doubled = {n for n in names if names.count(n) > 1}
    problems = [f"name used twice: {n}" for n in sorted(doubled)]
    for m in mutants:
        count = (REPO / m.file).read_text().count(m.old) if (REPO / m.file).is_file() else -1
        if count != 1:
            problems.append(f"{m.name}: its text occurs {max(count, 0)} times in {m.file} (needs exactly 1)")
        problems += [f"{m.name}: no test {test}" for test in m.tests if not _test_exists(test)]
    if problems:
        sys.exit("error: stale mutants:\n  " + "\n  ".join(problems))
    return mutants


def _test_exists(test: str) -> bool:
    """Whether pytest's ``path::name[params]`` names a file of the repository holding that test."""
    path, _, name = test.partition("::")
    function = name.split("[")[0].split("::")[-1]
    source = REPO / path
    return source.is_file() and (not function or f"def {function}(" in source.read_text())


def copy_tree(dest: Path) -> Path:
    """The tracked and untracked-not-ignored files of the repository, copied to ``dest``, laid
    out so that ``import tfspec`` with ``dest`` first on the path finds the copy throughout
    (backends/ and specs/ install inside the tfspec namespace: links stand in for that)."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = REPO / name
        if source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    for package in ("backends", "specs"):
        (dest / "tfspec" / package).symlink_to(Path("..") / package)
    for modules in REPO.glob("clients/*/node_modules"):  # installed, not tracked: the JavaScript clients' tests
        (dest / modules.relative_to(REPO)).symlink_to(modules)
    return dest


def run_tests(tree: Path, tests: tuple[str, ...], timeout: float) -> tuple[int, str]:
    """pytest on ``tests`` inside ``tree``; returns (exit code, last lines of its output)."""
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONDONTWRITEBYTECODE": "1"}
    command = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "--no-header", *tests]
    try:
        done = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return -1, "timed out"
    tail = [line for line in done.stdout.splitlines() if line.strip()][-3:]
    return done.returncode, " | ".join(tail)


def check(tree: Path, mutant: Mutant, timeout: float) -> tuple[str, float, str]:
    """Apply ``mutant`` in ``tree``, run its tests, restore: (verdict, seconds, detail)."""
    path = tree / mutant.file
    original = path.read_text()
    path.write_text(original.replace(mutant.old, mutant.new, 1))
    start = time.perf_counter()
    try:
        code, tail = run_tests(tree, mutant.tests, timeout)
    finally:
        path.write_text(original)
    verdict = {0: "SURVIVED", 1: "killed"}.get(code, "timed out" if code == -1 else f"error (pytest exit {code})")
    return verdict, time.perf_counter() - start, tail


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", default="", help="run the mutants whose name or area contains this text")
    p.add_argument("--list", action="store_true", help="list the mutants and their tests, run nothing")
    p.add_argument("--no-baseline", action="store_true", help="skip the unmutated run of the selected tests")
    p.add_argument("--timeout", type=float, default=600, help="seconds one mutant's tests may take (default 600)")
    args = p.parse_args()
    mutants = [m for m in load_mutants() if args.only in m.name or args.only in m.area]
    if args.list:
        for m in mutants:
            print(f"{m.area}: {m.name}\n    {m.file}; tests: {' '.join(m.tests)}")
        print(f"{len(mutants)} mutants")
        return 0
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="tfspec-mutants-") as tmp:
        tree = copy_tree(Path(tmp))
        if not args.no_baseline:
            selected = tuple(dict.fromkeys(t for m in mutants for t in m.tests))
            code, tail = run_tests(tree, selected, args.timeout * 4)
            if code != 0:
                print(f"error: the selected tests fail without any mutant: {tail}", file=sys.stderr)
                return 2
            print(f"baseline: {len(selected)} test selections pass unmutated ({time.perf_counter() - start:.0f} s)")
        survivors = []
        for i, m in enumerate(mutants, 1):
            verdict, seconds, tail = check(tree, m, args.timeout)
            print(f"[{i:>3}/{len(mutants)}] {verdict:<9} {seconds:6.1f} s  {m.area}: {m.name}", flush=True)
            if verdict != "killed":
                survivors.append(m)
                print(f"      {m.file}; {' '.join(m.tests)}\n      {tail}")
    killed = len(mutants) - len(survivors)
    print(f"{len(mutants)} mutants: {killed} killed, {len(survivors)} not killed, "
          f"in {time.perf_counter() - start:.0f} s")
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main())
