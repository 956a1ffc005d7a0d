"""Huge pages for weights (tfspec/hugepages.py): when the command line re-executes itself, and
that the re-executed process really gets 2 MiB pages for glibc-allocated memory, as the kernel
reports them (/proc/self/smaps_rollup), which numpy's own arrays would hide (numpy madvises)."""

import os
import subprocess
import sys
import textwrap

import pytest

from tfspec import hugepages


def mode_file(tmp_path, text):
    path = tmp_path / "enabled"
    path.write_text(text)
    return path


@pytest.mark.parametrize("text, environ, expected", [
    ("always [madvise] never\n", {}, True),
    ("[always] madvise never\n", {}, False),  # every program gets them already
    ("always madvise [never]\n", {}, False),
    ("always [madvise] never\n", {"TFSPEC_HUGE_PAGES": "0"}, False),
    ("always [madvise] never\n", {"GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}, False),  # already re-executed
    ("always [madvise] never\n", {"GLIBC_TUNABLES": "glibc.malloc.hugetlb=0"}, False),  # the user's own choice
    ("always [madvise] never\n", {"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"}, True),  # other tunables: kept
    ("always [madvise] never\n", {"TFSPEC_HUGE_PAGES_REEXECUTED": "1"}, False),  # never twice, whatever else
])
def test_wanted_only_where_the_kernel_makes_them_opt_in(tmp_path, text, environ, expected):
    if not hugepages.wanted({}, mode_file(tmp_path, "always [madvise] never\n")):
        pytest.skip("not Linux with glibc 2.35 or later")
    assert hugepages.wanted(environ, mode_file(tmp_path, text)) is expected


def test_wanted_is_false_without_the_kernel_file(tmp_path):
    assert hugepages.wanted({}, tmp_path / "missing") is False


def test_environment_keeps_other_tunables():
    env = hugepages.environment({"GLIBC_TUNABLES": "glibc.malloc.arena_max=2", "HOME": "/h"})
    assert env["GLIBC_TUNABLES"] == "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1"
    assert env["HOME"] == "/h" and env["TFSPEC_HUGE_PAGES_REEXECUTED"] == "1"
    assert hugepages.environment({})["GLIBC_TUNABLES"] == "glibc.malloc.hugetlb=1"


PROBE = textwrap.dedent("""
    import ctypes, os, sys
    from tfspec import hugepages
    hugepages.reexec()
    size = 64 << 20
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    block = libc.malloc(size)  # what onnxruntime and PyTorch allocate through
    ctypes.memset(block, 1, size)
    huge = next(int(line.split()[1]) for line in open("/proc/self/smaps_rollup") if line.startswith("AnonHugePages"))
    print(huge, os.environ.get("GLIBC_TUNABLES", ""))
""")


def probe(**env) -> tuple[str, int]:
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True,
                          env={k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"} | env)
    huge, _, tunables = done.stdout.strip().partition(" ")
    return tunables, int(huge)


@pytest.mark.skipif(not hugepages.wanted({}), reason="transparent huge pages are not opt-in (madvise) here")
def test_the_reexecuted_process_gets_huge_pages_for_malloc():
    tunables, huge = probe()
    assert "glibc.malloc.hugetlb=1" in tunables
    assert huge >= 32 << 10  # kB: most of the 64 MiB block on 2 MiB pages
    _, before = probe(TFSPEC_HUGE_PAGES="0")
    assert before < huge


CALLED = textwrap.dedent("""
    import os, sys
    pid = os.getpid()
    sys.argv = ["tfspec", "compile", "tiny", "--device", "meta"]  # a weights command, as a notebook's argv might be
    from tfspec.cli import main
    code = main()
    print(code, os.getpid() == pid, os.environ.get("TFSPEC_HUGE_PAGES_REEXECUTED"))
""")


def test_calling_main_from_python_never_replaces_the_process():
    """A notebook or a wrapper calling ``tfspec.cli.main()`` (argv from sys.argv) keeps running:
    only the ``tfspec`` command itself re-executes (``cli.command``)."""
    env = {k: v for k, v in os.environ.items() if k not in ("GLIBC_TUNABLES", "TFSPEC_HUGE_PAGES")}
    done = subprocess.run([sys.executable, "-c", CALLED], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines()[-1] == "0 True None"


@pytest.mark.skipif(not hugepages.wanted({}), reason="transparent huge pages are not opt-in (madvise) here")
def test_the_command_reexecutes_once_and_says_so_when_verbose():
    env = {k: v for k, v in os.environ.items() if k not in ("GLIBC_TUNABLES", "TFSPEC_HUGE_PAGES")}
    done = subprocess.run([sys.executable, "-m", "tfspec", "compile", "tiny", "--device", "meta"], capture_output=True,
                          text=True, env=env | {"TFSPEC_VERBOSE": "1"}, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stderr.count("huge pages: re-executing with GLIBC_TUNABLES=glibc.malloc.hugetlb=1") == 1
