"""Checkpoint loading across both formats, as a property: weights that do not fit the spec (a
tensor resized, missing, extra, or of a non-floating type) are refused before anything is loaded,
with the same lines whether they come as one safetensors file or as a sharded DCP directory; weights
that fit (any floating type) load, in both, to the values written."""

from __future__ import annotations

import pickle
import tempfile
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors.torch import save_file

from test_training import small_spec
from tfspec.backends.torch import build_module
from tfspec.backends.torch.checkpoint import load_weights, weights_of
from tfspec.backends.torch.training import sharded
from tfspec.errors import TfspecError

SPEC = small_spec()
WEIGHTS = weights_of(build_module(SPEC))
NAMES = sorted(WEIGHTS)
EDITS = st.one_of(
    st.tuples(st.just("resized"), st.sampled_from(NAMES), st.integers(1, 3)),
    st.tuples(st.just("missing"), st.sampled_from(NAMES)),
    st.tuples(st.just("extra"), st.integers(1, 4)),  # a layer the one-layer spec does not have
    st.tuples(st.just("retyped"), st.sampled_from(NAMES), st.sampled_from([torch.int64, torch.int32, torch.bool])),
    st.tuples(st.just("cast"), st.sampled_from(NAMES), st.sampled_from([torch.float16, torch.bfloat16, torch.float64])),
)


def edited(edits) -> tuple[dict[str, torch.Tensor], list[str]]:
    """The weights with ``edits`` applied, and the lines a refusal must hold (the spec's side from
    the spec's own parameters; none for a cast, which fits)."""
    tensors, lines = {name: t.clone() for name, t in WEIGHTS.items()}, []
    for kind, what, *how in edits:
        if kind == "extra":
            tensors[name := f"encoder.layers.{what}.ffn.w_1"] = torch.ones(4, 4)
            lines.append(f"unexpected {name} [4, 4]")
            continue
        shape = list(WEIGHTS[what].shape)
        if kind == "resized":
            tensors[what] = torch.zeros(*shape[:-1], shape[-1] + how[0])
            lines.append(f"{what}: file has {shape[:-1] + [shape[-1] + how[0]]}, spec needs {shape}")
        elif kind == "missing":
            del tensors[what]
            lines.append(f"missing {what} {shape}")
        else:
            tensors[what] = tensors[what].to(how[0])
            if kind == "retyped":
                lines.append(f"{what}: file has {str(how[0]).removeprefix('torch.')} values, spec needs float32")
    return tensors, lines


def save_sharded(tensors: dict[str, torch.Tensor], path: Path) -> None:
    """``tensors`` as a DCP checkpoint's model, its metadata at the pickle protocol tfspec reads."""
    written = dcp.save({"model": tensors}, checkpoint_id=path, no_dist=True)
    written.storage_meta = None
    (path / sharded.METADATA).write_bytes(pickle.dumps(written, protocol=2))


def answer(load, path: Path):
    """What loading ``path`` into a fresh model does: (the refusal's lines, path left out, or
    None; the model's weights after)."""
    model = build_module(SPEC)
    try:
        load(model, path)
        said = None
    except TfspecError as e:
        said = str(e).replace(str(path), "CHECKPOINT").splitlines()
    return said, weights_of(model)


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(EDITS, min_size=1, max_size=4, unique_by=lambda e: e[1]), st.integers(0, 2**31 - 1))
def test_a_checkpoint_either_fits_in_both_formats_or_is_refused_alike(edits, seed):
    torch.manual_seed(seed)  # the fresh models' weights: a refused load must leave them as they were
    tensors, lines = edited(edits)
    with tempfile.TemporaryDirectory() as tmp:
        save_file(tensors, f"{tmp}/model.safetensors")
        save_sharded(tensors, Path(tmp) / "dcp")
        torch.manual_seed(seed)
        single, single_after = answer(load_weights, Path(tmp) / "model.safetensors")
        torch.manual_seed(seed)
        dcp_said, dcp_after = answer(lambda model, path: sharded.load_model(path, model), Path(tmp) / "dcp")
    assert single == dcp_said
    torch.manual_seed(seed)
    untouched = weights_of(build_module(SPEC))
    if not lines:  # only floating casts: both load what was written, as float32
        assert single is None
        for name, value in tensors.items():
            torch.testing.assert_close(single_after[name], value.float(), rtol=0, atol=0)
            torch.testing.assert_close(dcp_after[name], value.float(), rtol=0, atol=0)
        return
    counts = {kind: sum(e[0] == kind for e in edits) for kind in ("resized", "missing", "extra")}
    assert single[0].startswith(f"CHECKPOINT: weights do not match spec {SPEC.name}: {counts['resized']} shapes "
                                "differ"), single[0]
    assert f"{counts['missing']} missing, {counts['extra']} unexpected" in single[0]
    assert sorted(single[1:]) == sorted(lines)
    for after in (single_after, dcp_after):  # refused before anything was loaded
        assert all(torch.equal(after[name], untouched[name]) for name in untouched)
