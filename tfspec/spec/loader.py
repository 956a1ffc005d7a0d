"""Reading specs: safe YAML, ``extends:`` inheritance, and errors that point at the line.

Specs are data. They are parsed with PyYAML's safe loader only (no tags, no Python objects),
and every problem is reported as ``file:line: field.path: message`` with the fix, from the
file that set the field, even when it came in through ``extends``.
"""

from __future__ import annotations

import copy
import re
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from tfspec.errors import Problem, SpecError
from tfspec.layers import SUBLAYERS
from tfspec.spec.base import did_you_mean
from tfspec.spec.bounds import MAX_SPEC_BYTES, MAX_SPEC_VALUES, MAX_TEXT
from tfspec.spec.schema import Spec

Origins = dict[tuple, tuple[str, int]]
NOT_INHERITED = ("name", "description", "extends", "reference")


def shipped_specs() -> Path:
    """The folder of specs installed with tfspec (``specs/`` in a checkout)."""
    return Path(str(resources.files("tfspec.specs")))


def resolve(ref: str | Path, relative_to: Path | None = None) -> Path:
    """A spec path, a directory holding ``spec.yaml`` (what ``tfspec import`` writes), or the
    name of a shipped spec (``base``, ``table3/C1``)."""
    candidates = [Path(ref)] if relative_to is None else [relative_to / ref]
    candidates.append(candidates[0] / "spec.yaml")
    if not str(ref).endswith((".yaml", ".yml")):
        candidates.append(shipped_specs() / f"{ref}.yaml")
    candidates.append(shipped_specs() / str(ref))
    return next((c for c in candidates if _is_file(c)), candidates[0])


def _is_file(path: Path) -> bool:
    """``path.is_file()``, False where the name itself is impossible (too long, a NUL byte)."""
    try:
        return path.is_file()
    except (OSError, ValueError):
        return False


def load_spec(ref: str | Path) -> Spec:
    """Read, merge and validate a spec; raise ``SpecError`` listing every problem."""
    path = resolve(ref)
    data, origins = _load_tree(path, ())
    data.setdefault("name", path.stem)
    return spec_from_data(data, str(path), origins)


PASSES = 8
"""Validations at most per spec: each pass sets aside the values the last one refused."""


def spec_from_data(data: Any, source: str, origins: Origins | None = None) -> Spec:
    """Validate spec data read from ``source`` (a spec file, or a spec stored inside a manifest,
    run or checkpoint); problems become a ``SpecError`` naming ``source`` and listing every one.

    pydantic stops a model at an unknown key and runs cross-field checks only on fields that
    parsed, so one pass shows the first layer of problems. Each further pass validates the data
    without the keys and values already refused, until nothing more can be set aside: what
    depends on a refused value (a check quoting its field, a field it leaves missing) is not
    reported, since its fix may change."""
    problems: list[Problem] = []
    removed: list[tuple] = []
    for _ in range(PASSES):
        try:
            spec = Spec.model_validate(data)
        except ValidationError as e:
            errors = [err for err in e.errors() if not _follows_from(err, removed)]
        else:
            if not problems:
                return spec
            break
        problems += [p for p in (_problem(err, origins or {}, source) for err in errors) if p not in problems]
        refused = [path for err in errors if (path := _refused_path(err)) is not None]
        if not refused:
            break
        data = copy.deepcopy(data)
        if not all(_drop(data, path) for path in refused):
            break
        removed += refused
    raise SpecError(problems)


def _refused_path(err: dict) -> tuple | None:
    """The data path of a key or value ``err`` refuses on its own (an unknown key, a value of
    the wrong type or range), which a further pass can leave out; None for cross-field checks
    and missing fields, which leaving out cannot settle."""
    if err["type"] in ("missing", "spec_field"):
        return None
    loc = _user_loc(err["loc"])
    if err["type"] == "unknown_field":
        loc += ((err.get("ctx") or {}).get("field"),)
    return loc if loc and isinstance(loc[-1], str) else None


def _follows_from(err: dict, removed: list[tuple]) -> bool:
    """Whether ``err`` may only follow from a value set aside: a field it leaves missing, or a
    cross-field check naming it."""
    loc = _user_loc(err["loc"])
    if err["type"] == "missing":
        return loc in removed
    return err["type"] == "spec_field" and any(re.search(rf"\b{re.escape(path[-1])}\b", err["msg"])
                                                for path in removed)


def _drop(data: Any, path: tuple) -> bool:
    """Delete the key at ``path`` from nested ``data`` in place; False where it is not there."""
    for part in path[:-1]:
        if isinstance(data, dict) and part in data:
            data = data[part]
        elif isinstance(data, list) and isinstance(part, int) and 0 <= part < len(data):
            data = data[part]
        else:
            return False
    if isinstance(data, dict) and path[-1] in data:
        del data[path[-1]]
        return True
    return False


def _load_tree(path: Path, chain: tuple[Path, ...]) -> tuple[dict, Origins]:
    """The merged data of ``path`` and its ``extends`` ancestors, with where each key came from."""
    if not _is_file(path):
        if not chain and _is_file(path / "run.json"):
            raise SpecError.one(_short(path), f"a training run, not a spec (`tfspec export {_short(path)}` exports "
                                "it; other commands take the spec it trained, docs/training.md)")
        raise SpecError.one(_short(path), "no such spec file" + (" (is the path right?)" if not chain else ""))
    if path.resolve() in chain:
        cycle = " -> ".join(p.name for p in (*chain, path.resolve()))
        raise SpecError.one(str(path), f"extends forms a cycle: {cycle}; remove one extends", "extends")
    node, data = _parse(path)
    if not isinstance(data, dict):
        raise SpecError.one(str(path), "a spec must be a YAML mapping of fields (name: ..., d_model: ...)",
                            line=1)
    origins: Origins = {}
    _record_lines(node, (), str(path), origins, set())
    base = data.get("extends")
    if base is None:
        return data, origins
    line = origins.get(("extends",), (None, None))[1]
    if not isinstance(base, str) or not base or len(base) > MAX_TEXT or "\0" in base:
        raise SpecError.one(str(path), "extends must be a file path or a shipped spec name", "extends", line)
    base_path = resolve(base, path.parent)
    if not _is_file(base_path):
        raise SpecError.one(str(path), f"extends {_short(base)!r}, but no such spec ({_short(base_path)}) exists",
                            "extends", line)
    base_data, base_origins = _load_tree(base_path, (*chain, path.resolve()))
    for key in NOT_INHERITED:
        base_data.pop(key, None)
        base_origins = {k: v for k, v in base_origins.items() if k[:1] != (key,)}
    return _merge(base_data, data), base_origins | origins


def _parse(path: Path) -> tuple[yaml.Node | None, Any]:
    """The YAML node tree of ``path`` (for line numbers) and the data built from that same tree."""
    try:
        if (size := path.stat().st_size) > MAX_SPEC_BYTES:
            raise SpecError.one(str(path), f"{size:,} bytes is too large for a spec (at most "
                                f"{MAX_SPEC_BYTES:,}); specs are short YAML files")
        loader = yaml.SafeLoader(path.read_text(encoding="utf-8"))
        try:
            node = loader.get_single_node()
            if node is not None and (values := _expanded(node, {})) > MAX_SPEC_VALUES:
                raise SpecError.one(str(path), f"its aliases expand to {values:,} values, more than a spec holds "
                                    f"(at most {MAX_SPEC_VALUES:,}); write the values out or share them with extends")
            return node, loader.construct_document(node) if node is not None else None
        finally:
            loader.dispose()
    except UnicodeDecodeError as e:
        raise SpecError.one(str(path), f"not UTF-8 text (byte {e.start}); a spec is a YAML text file") from None
    except OSError as e:
        raise SpecError.one(str(path), f"cannot read: {e.strerror}") from None
    except RecursionError:
        raise SpecError.one(str(path), "malformed YAML: nested too deeply to be a spec") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        what = getattr(e, "problem", None) or str(e).splitlines()[0]
        column = f", column {mark.column + 1}" if mark else ""
        raise SpecError.one(str(path), f"malformed YAML: {what}{column}", line=mark.line + 1 if mark else None)
    except (ValueError, TypeError, OverflowError) as e:  # PyYAML's constructors: a 5000-digit int, 2020-13-45
        raise SpecError.one(str(path), f"malformed YAML: a value cannot be read ({str(e)[:120]})") from None


def _expanded(node: yaml.Node, sizes: dict) -> int:
    """How many values ``node`` stands for with every alias expanded, counted over the node
    graph once per node: a small file of nested aliases ("billion laughs") stands for billions,
    which pydantic would walk and its error messages print."""
    if id(node) not in sizes:
        sizes[id(node)] = 1  # an alias of an enclosing node (a recursive structure) counts once
        if isinstance(node, yaml.SequenceNode):
            children = node.value
        elif isinstance(node, yaml.MappingNode):
            children = [part for pair in node.value for part in pair]
        else:
            children = []
        sizes[id(node)] = 1 + sum(_expanded(child, sizes) for child in children)
    return sizes[id(node)]


def _short(path: Path) -> str:
    """A path fit for one line of an error message."""
    text = str(path)
    return text if len(text) <= 200 else f"{text[:80]}...{text[-40:]} ({len(text):,} characters)"


def _merge(base: Any, over: Any) -> Any:
    """Mappings merge key by key (null deletes); anything else in ``over`` replaces ``base``."""
    if not (isinstance(base, dict) and isinstance(over, dict)):
        return over
    merged = dict(base)
    for key, value in over.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = _merge(base.get(key), value)
    return merged


def _record_lines(node: yaml.Node, path: tuple, file: str, origins: Origins, seen_nodes: set) -> None:
    """Map each key path to (file, line); reject duplicate keys, which YAML would drop silently.

    Each node is visited once: aliases share nodes, and following them again would let a small
    file of nested aliases ("billion laughs") take exponential time.
    """
    origins[path] = (file, node.start_mark.line + 1)
    if id(node) in seen_nodes:
        return
    seen_nodes.add(id(node))
    if isinstance(node, yaml.MappingNode):
        seen: dict[Any, int] = {}
        for key_node, value_node in node.value:
            key = key_node.value
            line = key_node.start_mark.line + 1
            if not (isinstance(key, str) and key.isascii() and key.isidentifier()):
                shown = key if isinstance(key, str) else "a " + type(key_node).__name__.replace("Node", "").lower()
                raise SpecError.one(file, f"key {_show(shown)} is not a field name (ASCII letters, digits and "
                                    "_, not starting with a digit)", _dotted(path), line)
            if key in seen:
                raise SpecError.one(file, f"duplicate key {key!r} (first set on line {seen[key]}); keep one",
                                    _dotted(path + (key,)), line)
            seen[key] = line
            _record_lines(value_node, path + (key,), file, origins, seen_nodes)
            origins[path + (key,)] = (file, line)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _record_lines(item, path + (index,), file, origins, seen_nodes)


def _problem(err: dict, origins: Origins, file: str) -> Problem:
    """One pydantic error as a Problem naming the file, line, field path and fix."""
    loc = _user_loc(err["loc"])
    ctx = err.get("ctx") or {}
    if "field" in ctx:
        loc += tuple(int(p) if p.isdecimal() and p.isascii() else p for p in ctx["field"].split("."))
    message = err["msg"]
    value = err.get("input")
    if err["type"] == "union_tag_invalid":  # a layer kind, or a head kind (tfspec.spec.heads)
        known = re.findall(r"'([^']*)'", ctx.get("expected_tags", "")) or list(SUBLAYERS)
        what = "head kind" if loc[:1] == ("head",) else "layer kind"
        message = f"unknown {what} {_show(ctx['tag'])}{did_you_mean(ctx['tag'], known)}; known kinds: {', '.join(known)}"
    elif err["type"] == "literal_error":
        choices = re.findall(r"'([^']*)'", ctx.get("expected", ""))
        message = f"{message} (got {_show(value)}){did_you_mean(value, choices)}"
    elif err["type"] == "missing":
        message = "missing required field"
    elif not isinstance(value, (dict, list)) and err["type"] not in ("unknown_field", "spec_field"):
        message = f"{message} (got {_show(value)})"
    for depth in range(len(loc), -1, -1):
        if loc[:depth] in origins:
            file, line = origins[loc[:depth]]
            break
    else:
        line = None
    lowered = message[:1].lower() + message[1:] if message[1:2].islower() else message  # not an acronym's (RMSNorm)
    return Problem(file, line, _dotted(loc), lowered)


def _show(value: Any) -> str:
    """repr of a value, shortened: an error line must stay one readable line (and Python refuses
    to print ints of over 4,300 digits)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"an integer of {value.bit_length() * 0.30103:,.0f} digits"
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:60]}... ({len(text):,} characters)"


def _user_loc(loc: tuple) -> tuple:
    """Drop pydantic's union-branch tags (layer kind names, 'function-before') from a location."""
    return tuple(part for part in loc if not (isinstance(part, str) and (part in SUBLAYERS or
                                                                          part.startswith("function-"))))


def _dotted(loc: tuple) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out
