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
    assert env["HOME"] == "/h"
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
