"""Mutated specs never crash or hang tfspec: each ends in exit 0, or exit 2 with `error:` lines.

Every example takes a shipped spec (merged through ``extends``), applies one to four mutations
(deleted, duplicated and retyped fields, boundary and absurd numbers, unknown and non-ASCII
keys, odd ``extends:`` values, truncated or garbled text) and runs ``validate``, ``report`` and
``compile --device meta`` in-process, each under a hard time limit. A traceback, another exit
status or a slow command fails the example, and hypothesis shrinks it to a minimal spec.

The default profile (CI) runs a few hundred examples; ``TFSPEC_FUZZ=5000 pytest
tests/test_fuzz.py`` runs thousands.
"""

from __future__ import annotations

import contextlib
import copy
import io
import os
import signal
import time

import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from conftest import SHIPPED
from tfspec.cli import main
from tfspec.layers import SUBLAYERS
from tfspec.spec import bounds
from tfspec.spec.loader import _load_tree, resolve

EXAMPLES = int(os.environ.get("TFSPEC_FUZZ", "250"))
LIMIT_S = 10  # per command: generous for a loaded CI machine; typical commands take < 0.1 s
COMMANDS = (["validate"], ["report"], ["compile", "--device", "meta"])
BIG_INT = "9" * 5000  # Python refuses to convert strings of more than 4300 digits to int

ABSURD = [0, -1, 1, 2, 3, 7, 2**31 - 1, 2**31, 2**32 + 1, 2**53 + 1, 2**63, -2**63, 2**64, 10**12, 10**30,
          "__BIG__", 1e308, -1e308, 1e-320, 0.5, -0.0, 1.5, float("inf"), float("-inf"), float("nan"), True,
          False, None, "", "x", "²", "١٢", "1e3", "0x10", "∞", "null", "~", [], {}, [1, 2], {"a": 1},
          {"kind": "ffn"}, "a" * 5000]
LIMITS = [getattr(bounds, name) for name in dir(bounds) if name.startswith("MAX_")]
ABSURD += LIMITS + [limit + 1 for limit in LIMITS]  # the largest legal value of each kind, and one past it
LAYER_OPTIONS = sorted({name for kind in SUBLAYERS.values() for name in kind.model_fields} - {"kind"})
ODD_KEYS = ["²", "١", "𝟙", "ℌ", "d_model ", "D_MODEL", "0", "-1", "__class__", "kind", "layers", "é", "\u200b",
            "\x7f", "a.b", "[0]", 0, 1, -1, 1.5, True, None]
ODD_EXTENDS = ["", "/", ".", "..", "/dev/zero", "/etc/passwd", "/proc/self/status", "spec.yaml", "base",
               "table3/C5", "../" * 40 + "x.yaml", "a" * 300 + ".yaml", "x/" * 3000 + "y.yaml", "nowhere.yaml",
               "\x00", "*", "~/spec.yaml", "specs", "https://example.org/spec.yaml"]


def merged(name: str) -> dict:
    """A shipped spec's data with its extends chain applied, as a file of its own would state it."""
    data, _ = _load_tree(resolve(name), ())
    data.pop("extends", None)
    return data


SOURCES = {name: merged(name) for name in SHIPPED}


def paths(node, prefix=()):
    """Every (path, value) in a nested dict/list, the root included."""
    yield prefix, node
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, value in items:
        yield from paths(value, prefix + (key,))


def at(node, path):
    for key in path:
        node = node[key]
    return node


def fresh(value):
    """A copy of a drawn value: the shared lists and dicts of ABSURD must not be mutated in
    place by later mutations (a dict placed inside itself never ends)."""
    return copy.deepcopy(value)


def near(value):
    """Boundary values around a number: off by one, negated, scaled far out."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return [value]
    return [value - 1, value + 1, -value, value * 2**20, value * 10**15, 0]


@st.composite
def mutation(draw, data):
    """Apply one mutation to ``data`` in place."""
    path, value = draw(st.sampled_from(list(paths(data))))
    parent = at(data, path[:-1]) if path else None
    op = draw(st.sampled_from(["delete", "retype", "near", "unknown_key", "duplicate", "extends", "kind"]))
    if op == "delete" and path:
        del parent[path[-1]]
    elif op == "retype" and path:
        parent[path[-1]] = fresh(draw(st.sampled_from(ABSURD)))
    elif op == "near" and path:
        parent[path[-1]] = draw(st.sampled_from(near(value)))
    elif op == "unknown_key" and isinstance(value, dict):
        key = draw(st.one_of(st.sampled_from(ODD_KEYS), st.text(min_size=1, max_size=6)))
        value[key] = fresh(draw(st.sampled_from(ABSURD)))
    elif op == "duplicate" and isinstance(value, list) and value:
        value.extend(value * draw(st.integers(1, 3)))
    elif op == "duplicate" and isinstance(value, dict) and value:
        source = draw(st.sampled_from(sorted(value, key=str)))
        value[draw(st.sampled_from(sorted(value, key=str)))] = value[source]
    elif op == "extends":
        data["extends"] = draw(st.sampled_from(ODD_EXTENDS))
    elif op == "kind" and isinstance(value, dict) and "kind" in value:
        value["kind"] = draw(st.sampled_from([*SUBLAYERS, "self_atention", "", 3]))
        for option in draw(st.lists(st.sampled_from(LAYER_OPTIONS), min_size=1, max_size=3)):
            value[option] = fresh(draw(st.sampled_from(ABSURD)))


@st.composite
def mutated_spec(draw) -> str:
    """YAML text of a shipped spec after 1-4 mutations, sometimes garbled at the text level."""
    data = yaml.safe_load(yaml.safe_dump(SOURCES[draw(st.sampled_from(sorted(SOURCES)))]))
    for _ in range(draw(st.integers(1, 4))):
        draw(mutation(data))
    text = yaml.safe_dump(data, allow_unicode=draw(st.booleans()), sort_keys=False).replace("__BIG__", BIG_INT)
    garble = draw(st.sampled_from(["none"] * 6 + ["truncate", "insert", "duplicate_line"]))
    cut = draw(st.integers(0, max(0, len(text) - 1)))
    if garble == "truncate":
        text = text[:cut]
    elif garble == "insert":
        text = text[:cut] + draw(st.sampled_from([":", "- ", "\t", "&a ", "*a", "!!python/name:os.system", "{",
                                                  "]", "'", '"', "\\", "%YAML 1.1\n", "---\n", "\x00", "\ufeff",
                                                  "? ", "|\n", "!x "])) + text[cut:]
    elif garble == "duplicate_line":
        lines = text.splitlines(keepends=True)
        text += draw(st.sampled_from(lines)) if lines else ""
    return text


class Hang(Exception):
    pass


def _alarm(signum, frame):
    raise Hang


def run(*args) -> tuple[int, str, float]:
    """(exit status, stderr, seconds) of `tfspec args...` in-process, stopped after LIMIT_S."""
    err = io.StringIO()
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(LIMIT_S)
    started = time.perf_counter()
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            code = main([str(a) for a in args])
    except Hang:
        code = "hang"
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    return code, err.getvalue(), time.perf_counter() - started


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(text=mutated_spec())
def test_mutated_specs_end_cleanly(text, tmp_path_factory):
    path = tmp_path_factory.mktemp("fuzz") / "spec.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogateescape")
    for command in COMMANDS:
        code, err, seconds = run(command[0], path, *command[1:])
        event(f"{command[0]}: exit {code}")
        assert code in (0, 2), f"tfspec {command[0]}: exit {code}\n{err[-3000:]}"
        assert "Traceback" not in err, err[-3000:]
        lines = [line for line in err.splitlines() if line.strip()]
        if code == 2:
            assert lines and all(line.startswith(("error:", "warning:")) for line in lines), err[-3000:]
        if code != 0:
            break  # a spec refused by validate is refused the same way by the others


@pytest.mark.parametrize("name", ["base", "zoo/universal"])
def test_shipped_sources_pass(name, tmp_path):
    """The unmutated merged specs are valid: the mutations start from working models."""
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(SOURCES[name]))
    for command in COMMANDS:
        assert run(command[0], path, *command[1:])[0] == 0
