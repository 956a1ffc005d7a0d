"""Transparent huge pages for weights, where the kernel makes them opt-in.

With transparent huge pages in ``madvise`` mode (the default of Debian, Ubuntu and most cloud
images), memory gets 2 MiB pages only where a program asks for them. numpy asks for its large
arrays; onnxruntime's and PyTorch's allocators (glibc's malloc) do not, so their weights sit on
4 KiB pages and a step that reads them pays a TLB miss every 4 KiB, dearly so in a virtual
machine (two levels of page tables). On the 2-core Xeon VM where this was measured, one thread
summed a 256 MB PyTorch tensor at 7.1 GB/s on 4 KiB pages and 15.1 GB/s on huge pages, and a
batch-1 decoding step of a 100 MB Llama took 11.2 ms before and 9.6 ms after; while other
processes loaded the machine, 2.4 against 12.1 GB/s and 29.0 against 10.0 ms.

glibc reads its tunables only when a process starts, so the ``tfspec`` command (``cli.command``,
never ``cli.main``, which a notebook or a wrapper may call) re-executes itself once, before
anything is loaded, with ``glibc.malloc.hugetlb=1`` added to ``GLIBC_TUNABLES`` (glibc 2.35 and
later: malloc then madvises its large blocks), and marks the new process (``REEXECUTED``) so that
it cannot do so again. ``TFSPEC_HUGE_PAGES=0`` keeps the process as started, and so does a
``glibc.malloc.hugetlb`` setting of the user's own. Nothing changes where the kernel gives huge
pages to every program (``always``), forbids them (``never``), or the C library is not glibc.
``TFSPEC_VERBOSE=1`` says on standard error what was done.
"""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path

VARIABLE = "GLIBC_TUNABLES"
TUNABLE = "glibc.malloc.hugetlb=1"
SWITCH = "TFSPEC_HUGE_PAGES"
"""Set to 0 to run without re-executing (to compare, or where exec is unwelcome)."""
REEXECUTED = "TFSPEC_HUGE_PAGES_REEXECUTED"
"""Set in the re-executed process: it never re-executes again, whatever its tunables say."""
VERBOSE = "TFSPEC_VERBOSE"
MODE = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def wanted(environ: dict | None = None, mode: Path | None = None) -> bool:
    """Whether this process would get huge pages for its weights only by re-executing."""
    environ, mode = os.environ if environ is None else environ, MODE if mode is None else mode
    own = "glibc.malloc.hugetlb=" in environ.get(VARIABLE, "")  # the user's setting (or ours, already)
    if environ.get(SWITCH) == "0" or environ.get(REEXECUTED) or own or not sys.platform.startswith("linux"):
        return False
    library, version = platform.libc_ver()
    try:
        if library != "glibc" or tuple(int(part) for part in version.split(".")[:2]) < (2, 35):
            return False
        return "[madvise]" in mode.read_text()
    except (OSError, ValueError):
        return False


def environment(environ: dict | None = None) -> dict:
    """``environ`` (default: this process's) with the tunable added, other tunables kept, and
    marked as re-executed."""
    environ = dict(os.environ if environ is None else environ)
    environ[VARIABLE] = ":".join(part for part in (environ.get(VARIABLE, ""), TUNABLE) if part)
    environ[REEXECUTED] = "1"
    return environ


def reexec() -> None:
    """Replace this process by the same command line with huge pages on, where ``wanted``;
    return (and run on as is) where not, or where the exec itself fails."""
    if not wanted():
        return
    env = environment()
    if os.environ.get(VERBOSE) == "1":
        print(f"huge pages: re-executing with {VARIABLE}={env[VARIABLE]} (weights on 2 MiB pages; "
              f"{SWITCH}=0 runs as started)", file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)
    except OSError as e:
        if os.environ.get(VERBOSE) == "1":
            print(f"huge pages: not re-executed ({e}); running as started", file=sys.stderr)
        return
