"""Training beyond one device (issue 41): FSDP2 shards give the single-process losses, activation
checkpointing changes no loss and lowers the measured peak, and `report --train` predicts it.

References: a single process accumulating the same global batch (what K ranks must compute);
the peak resident memory of real training steps, measured in fresh processes by
tools/bench/check_train_memory.py (not by the estimate's code).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from tfspec.backends.torch import build_module
from tfspec.backends.torch.training import TrainConfig, train
from tfspec.backends.torch.training.sharding import shard_units
from tfspec.spec import Spec, load_spec

from test_training import CONFIG, _free_port, copy_task, losses, small_spec

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools" / "bench"))
STEPS = TrainConfig(**{**CONFIG.__dict__, "steps": 20, "save_every": 20, "log_every": 1})


def moe_spec() -> Spec:
    data = small_spec(dropout=0.0).model_dump()
    data["decoder"] = {"layers": 2, "block": ["causal_self_attention", "cross_attention",
                                              {"kind": "moe", "experts": 4, "top_k": 2, "d_ff": 32}]}
    return Spec.model_validate(data)


SPECS = {"dense": lambda: small_spec(dropout=0.0), "moe": moe_spec}


def _worker(rank, world, port, run, config, spec_name):
    os.environ.update(WORLD_SIZE=str(world), RANK=str(rank), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    torch.set_num_threads(1)
    try:
        train(SPECS[spec_name](), copy_task(), run, config, torch.device("cpu"), progress=False)
    finally:
        torch.distributed.destroy_process_group()


def _fsdp_matches_one_process(tmp_path, spec_name, **options):
    """2 gloo ranks under FSDP x 1 batch each = 1 process accumulating 2 batches, for 20 steps."""
    import torch.multiprocessing as mp

    sharded = TrainConfig(**{**STEPS.__dict__, "shard": "fsdp", **options})
    single = TrainConfig(**{**STEPS.__dict__, "accum": 2 * sharded.accum})
    train(SPECS[spec_name](), copy_task(), tmp_path / "one", single, torch.device("cpu"), progress=False)
    mp.spawn(_worker, args=(2, _free_port(), tmp_path / "two", sharded, spec_name), nprocs=2)
    assert len(losses(tmp_path / "two")) == 20
    np.testing.assert_allclose(losses(tmp_path / "two"), losses(tmp_path / "one"), rtol=1e-5)


@pytest.mark.slow
def test_fsdp_on_two_ranks_gives_the_single_process_losses(tmp_path):
    _fsdp_matches_one_process(tmp_path, "dense")


@pytest.mark.slow
def test_fsdp_with_a_mixture_of_experts_accumulation_and_checkpointing(tmp_path):
    _fsdp_matches_one_process(tmp_path, "moe", accum=2, checkpoint_activations=True)


def test_checkpointing_activations_changes_no_loss(tmp_path):
    spec = moe_spec()  # the experts' load-balancing loss leaves each layer through the run context
    plain = TrainConfig(**{**CONFIG.__dict__, "save_every": 6})
    train(spec, copy_task(), tmp_path / "plain", plain, torch.device("cpu"), progress=False)
    again = TrainConfig(**{**plain.__dict__, "checkpoint_activations": True})
    train(spec, copy_task(), tmp_path / "ckpt", again, torch.device("cpu"), progress=False)
    np.testing.assert_allclose(losses(tmp_path / "ckpt"), losses(tmp_path / "plain"), rtol=1e-6)


def test_layers_that_share_weights_are_one_unit():
    """The Universal Transformer applies one layer's weights at every depth: its encoder's
    layers can only be gathered together (the spec says ``shared``)."""
    spec = load_spec(ROOT / "specs/zoo/universal.yaml")
    model = build_module(spec, device="meta")
    units = shard_units(model)
    shared = [s for s in ("encoder", "decoder") if getattr(spec, s) is not None and getattr(spec, s).shared]
    assert shared and len(units) == sum(1 for s in ("encoder", "decoder") if getattr(spec, s) is not None)
    small = build_module(load_spec("small"), device="meta")
    assert [len(u) for u in shard_units(small)] == [1] * 6  # 3 + 3 layers, none shared


@pytest.mark.slow
def test_checkpointing_lowers_the_measured_peak_and_report_predicts_it():
    """Measured peaks of 3 Adam steps of `small` (own processes, resident-set high-water mark)
    fall with checkpointing, and `report --train`'s estimate is within 10% of each."""
    from check_train_memory import SPECS as SIZES, estimated, measure

    _, rows, length = SIZES["small"]
    peaks = {ckpt: measure("small", rows, length, "ddp", 1, ckpt) for ckpt in (False, True)}
    assert peaks[True] < 0.9 * peaks[False]
    for ckpt, peak in peaks.items():
        assert estimated("small", rows, length, "ddp", 1, ckpt) == pytest.approx(peak, rel=0.1)


def test_report_train_cli():
    out = subprocess.run([sys.executable, "-m", "tfspec", "report", "specs/zoo/llama-2-7b.yaml", "--train",
                          "--ranks", "8", "--length", "4096"], capture_output=True, text=True, cwd=ROOT, check=True)
    rows = {tuple(line.split()[:2]): line.split() for line in out.stdout.splitlines() if line.startswith(("ddp", "fsdp"))}
    # 6.7e9 weights x 16 bytes (weights, gradients, Adam) + DDP's buckets never fit one 80 GB device; sharded
    # over 8 with checkpointing they do.
    assert rows[("ddp", "no")][-4:] == ["no"] * 4 and rows[("fsdp", "yes")][-4] == "fits"
    bad = subprocess.run([sys.executable, "-m", "tfspec", "report", "small", "--train", "--ranks", "0"],
                         capture_output=True, text=True, cwd=ROOT)
    assert bad.returncode == 2 and bad.stderr.strip().splitlines()[-1].startswith("tfspec report: error")


@pytest.mark.slow
def test_cli_fsdp_under_torchrun_matches_one_process_on_small(tmp_path):
    """`torchrun --nproc_per_node=2 -m tfspec train small --shard fsdp` = one process with --accum 2."""
    common = ["small", "--steps", "20", "--batch-tokens", "512", "--warmup", "10", "--log-every", "1",
              "--save-every", "20", "--quiet", "--threads", "1"]
    subprocess.run([sys.executable, "-m", "tfspec", "train", *common, "--accum", "2", "--out", str(tmp_path / "one")],
                   cwd=ROOT, check=True, capture_output=True)
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
                    f"--master_port={_free_port()}", "-m", "tfspec", "train", *common, "--shard", "fsdp",
                    "--out", str(tmp_path / "two")], cwd=ROOT, check=True, capture_output=True)
    np.testing.assert_allclose(losses(tmp_path / "two"), losses(tmp_path / "one"), rtol=1e-5)


@pytest.mark.slow
def test_cli_fsdp_with_compile_compiles_every_layer_and_keeps_the_eager_losses(tmp_path):
    """`--compile` under FSDP: every layer block stays compiled (Dynamo keeps one cache for all
    blocks' forward; past its default 8 entries it ran the rest eagerly and said so), and the
    losses are eager's within compiled float32's rounding (without dropout, whose masks compiled
    code draws from another generator)."""
    spec = tmp_path / "tiny.yaml"
    spec.write_text(f"name: tiny\nextends: {ROOT / 'specs' / 'tiny.yaml'}\ndropout: 0.0\n")
    common = [str(spec), "--steps", "6", "--log-every", "1", "--save-every", "6", "--quiet", "--threads", "1",
              "--shard", "fsdp"]
    runs = {}
    for name, extra in (("eager", []), ("compiled", ["--compile"])):
        done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
                               f"--master_port={_free_port()}", "-m", "tfspec", "train", *common, *extra,
                               "--out", str(tmp_path / name)], cwd=ROOT, check=True, capture_output=True, text=True)
        runs[name] = losses(tmp_path / name)
        assert "recompile_limit" not in done.stderr, done.stderr[-2000:]
    np.testing.assert_allclose(runs["compiled"], runs["eager"], rtol=1e-4)


@pytest.mark.slow
def test_an_fsdp_run_resumes_with_the_same_losses(tmp_path):
    """Gathered whole on rank 0, a checkpoint written under FSDP resumes under FSDP (moments
    sharded again) with the losses of the uninterrupted run."""
    import torch.multiprocessing as mp

    config = TrainConfig(**{**CONFIG.__dict__, "shard": "fsdp"})
    mp.spawn(_worker, args=(2, _free_port(), tmp_path / "whole", config, "dense"), nprocs=2)
    half = TrainConfig(**{**config.__dict__, "steps": 3})
    mp.spawn(_worker, args=(2, _free_port(), tmp_path / "half", half, "dense"), nprocs=2)
    mp.spawn(_resume_worker, args=(2, _free_port(), tmp_path / "half", config), nprocs=2)
    np.testing.assert_allclose(losses(tmp_path / "half"), losses(tmp_path / "whole"), rtol=1e-5)


def _resume_worker(rank, world, port, run, config):
    os.environ.update(WORLD_SIZE=str(world), RANK=str(rank), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    torch.set_num_threads(1)
    try:
        train(SPECS["dense"](), copy_task(), run, config, torch.device("cpu"), resume=True, progress=False,
              log=lambda m: None)
    finally:
        torch.distributed.destroy_process_group()
