"""Each engine of a comparison timed in a fresh process of its own (issue 37).

Engines in one process disturb each other: CTranslate2 ran ~10x slower in a process where
PyTorch's OpenMP threads had run, and beside onnxruntime sessions both moved by up to 2x
(BENCHMARKS.md, "The rule for speed comparisons"). So a
benchmark's parent process only prepares (exports, model directories, sources saved as .npy)
and collects numbers; every timing, bandwidth read and reference check runs in a process
launched for it, which names the engines it may import and fails if another one got imported.
Rounds rotate which engine goes first. This module imports the standard library only: it is
what each worker process starts from.

    python tools/bench/isolated.py JOB      # the worker side; JOB is the JSON that ``Job.run`` writes
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

TOOLS = Path(__file__).resolve().parent
ENGINES = ("torch", "onnxruntime", "ctranslate2", "transformers", "onnxruntime_genai", "llama_cpp")
"""Top-level modules of the engines compared: each starts thread pools of its own, which is
why no two may share a timing process."""


@dataclasses.dataclass(frozen=True)
class Job:
    """``tools/<module>.py``'s ``function(threads=..., **kwargs)``, to run in a fresh process
    that may import only ``engines``. ``bare``: run ``tools/bench/peer_bare.py`` as a script under
    ``python -I`` instead (tools/ not on the path: nothing of the harness or of tfspec can be
    imported), the control a table's peer column is held to."""

    module: str
    function: str
    engines: tuple[str, ...] = ()
    kwargs: dict = dataclasses.field(default_factory=dict)
    bare: bool = False
    env: dict = dataclasses.field(default_factory=dict)
    """Environment variables of the process on top of the parent's (an engine's backend switch)."""
    python: str = ""
    """The worker's interpreter (default: the parent's): an engine installed in a venv of its own
    (llama-cpp-python) runs there; its worker imports the standard library, numpy and the tool."""

    def but(self, **changes) -> Job:
        """This job with another function or extra keyword arguments."""
        kwargs = self.kwargs | changes.pop("kwargs", {})
        return dataclasses.replace(self, kwargs=kwargs, **changes)

    def run(self, threads: int) -> tuple[Any, int]:
        """(result, pid of the process that computed it). OMP/MKL variables cap the thread pools
        an engine starts before the function sets its own count explicitly."""
        job = json.dumps({"module": self.module, "function": self.function, "engines": list(self.engines),
                          "kwargs": {"threads": threads, **self.kwargs}})
        script = ["-I", str(TOOLS / "peer_bare.py")] if self.bare else [str(TOOLS / "isolated.py")]
        env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads), **self.env)
        if not self.bare:  # every engine of a table under the same memory conditions, tfspec's and peers'
            env = as_tfspec(env)
        done = subprocess.run([self.python or sys.executable, *script, job], capture_output=True, text=True, env=env)
        if done.returncode:
            raise SystemExit(f"{self.module}.{self.function} failed in its own process (exit {done.returncode}):\n"
                             + done.stderr[-4000:])
        answer = json.loads(done.stdout)
        return answer["result"], answer["pid"]


def as_tfspec(env: dict) -> dict:
    """``env`` as the ``tfspec`` command sets up its own process: huge pages for weights where the
    kernel makes them opt-in (tfspec/hugepages.py; the command re-executes itself with them).
    Every engine's column gets it, peers' too: one memory condition for a table. The bare
    controls run as their peers' users start them, without it, so a peer the tunable slows shows
    against its control (``peer_bare.invalid``)."""
    from tfspec import hugepages

    return hugepages.environment(env) if hugepages.wanted(env) else env


def conditions() -> str:
    """The memory condition every engine column runs under, for a table's header."""
    from tfspec import hugepages

    if hugepages.wanted(dict(os.environ)):
        return (f"huge pages for every engine ({hugepages.VARIABLE}={hugepages.TUNABLE}; bare controls without; "
                f"{hugepages.SWITCH}=0 for none)")
    return "no huge-page tunable for any engine"


def interleave(jobs: dict[str, Job | Callable[[], Any]], rounds: int, threads: int,
               each_round: Callable[[], None] = lambda: None) -> dict[str, list]:
    """Name -> one result per round: every job once a round, each in a fresh process (a job
    may also be a function starting one its own way: Node.js, a browser), the order rotated by
    one a round so that no engine always runs first (or right after the same one);
    ``each_round`` (a bandwidth read, say) opens every round, under the same load."""
    names, out = list(jobs), {name: [] for name in jobs}
    for r in range(rounds):
        each_round()
        for name in names[r % len(names):] + names[:r % len(names)]:
            job = jobs[name]
            out[name].append(job.run(threads)[0] if isinstance(job, Job) else job())
    return out


def with_bare(jobs: dict[str, Job], peers, name: Callable[[str], str] = lambda peer: f"{peer} bare") -> dict:
    """``jobs`` with each of ``peers``' bare run (its job under ``python -I tools/bench/peer_bare.py``)
    named ``name(peer)`` right after it: the control's column beside the peer's."""
    out = {}
    for key, job in jobs.items():
        out[key] = job
        if key in peers:
            out[name(key)] = dataclasses.replace(job, bare=True)
    return out


def foreign(engines) -> list[str]:
    """The engines imported in this process that are not among ``engines``."""
    return [e for e in ENGINES if e in sys.modules and e not in engines]


def answer(result: Any, engines, stdout) -> None:
    """Write the worker's answer, after refusing a process that holds a foreign engine: its
    threads would have competed with the one being timed."""
    if extra := foreign(engines):
        sys.exit(f"refused: this process imported {', '.join(extra)}, which is not among its engines "
                 f"({', '.join(engines) or 'none'}): an engine is timed in a process of its own")
    json.dump({"pid": os.getpid(), "result": result}, stdout)
    stdout.flush()


def worker(text: str) -> None:
    """The worker side of ``Job.run``: stdout carries the answer only (what the engines print
    goes to stderr)."""
    job = json.loads(text)
    stdout = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    result = getattr(importlib.import_module(job["module"]), job["function"])(**job["kwargs"])
    answer(result, job["engines"], stdout)


if __name__ == "__main__":
    worker(sys.argv[1])
