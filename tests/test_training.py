"""Training: the schedule and loss against the paper, exact resume, DDP = accumulation, averaging."""

from __future__ import annotations

import json
import math
import os
import socket

import numpy as np
import pytest
import torch

from tfspec import load_spec
from tfspec.backends.torch.training import Pairs, TrainConfig, train
from tfspec.backends.torch.training import checkpoint
from tfspec.backends.torch.training.schedule import rate, smoothed_loss
from tfspec.errors import TfspecError
from tfspec.spec import Spec


def copy_task(n: int = 96, seed: int = 0) -> Pairs:
    """Source: random words; target: the same words reversed. Learnable in a few steps."""
    rng = np.random.default_rng(seed)
    src, tgt = [], []
    for _ in range(n):
        words = rng.integers(4, 60, rng.integers(3, 9))
        src.append(np.append(words, 2).astype(np.int32))
        tgt.append(np.concatenate([[1], words[::-1], [2]]).astype(np.int32))
    return Pairs(src, tgt)


def small_spec(dropout: float = 0.1) -> Spec:
    data = load_spec("tiny").model_dump() | {"vocab": {"size": 64, "shared": True}, "d_model": 32, "d_ff": 64,
                                            "dropout": dropout, "attention_dropout": dropout}
    data["encoder"] = data["decoder"] = {"layers": 1}
    data["encoder"] = {"layers": 1, "block": ["self_attention", "ffn"]}
    data["decoder"] = {"layers": 1, "block": ["causal_self_attention", "cross_attention", "ffn"]}
    return Spec.model_validate(data)


CONFIG = TrainConfig(steps=6, batch_tokens=120, warmup=4, lr_scale=2.0, save_every=3, log_every=1, keep=10)


def losses(run) -> list[float]:
    return [json.loads(line)["loss"] for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_rate_is_equation_3():
    d, warmup = 512, 4000
    assert rate(warmup, d, warmup) == pytest.approx(d ** -0.5 * warmup ** -0.5)
    assert rate(100, d, warmup) == pytest.approx(d ** -0.5 * 100 * warmup ** -1.5)  # linear warm-up
    assert rate(16000, d, warmup) == pytest.approx(d ** -0.5 / math.sqrt(16000))  # inverse square root
    assert max(range(1, 20000, 7), key=lambda s: rate(s, d, warmup)) in range(3990, 4010)


def test_label_smoothing_matches_torch():
    logits, target = torch.randn(2, 5, 11), torch.randint(1, 11, (2, 5))
    target[1, 3:] = 0
    ours, _ = smoothed_loss(logits, target, pad=0, smoothing=0.1)
    ref = torch.nn.functional.cross_entropy(logits.flatten(0, 1), target.flatten(), ignore_index=0,
                                            label_smoothing=0.1, reduction="sum")
    assert ours.item() == pytest.approx(ref.item(), rel=1e-5)


def test_loss_goes_down_and_resume_reproduces_the_same_losses(tmp_path):
    pairs, spec = copy_task(), small_spec()
    whole = tmp_path / "whole"
    train(spec, pairs, whole, CONFIG, torch.device("cpu"), progress=False)
    full = losses(whole)
    assert full[-1] < full[0]

    half = tmp_path / "half"
    train(spec, pairs, half, TrainConfig(**{**CONFIG.__dict__, "steps": 3}), torch.device("cpu"), progress=False)
    with pytest.raises(TfspecError, match="--resume"):
        train(spec, pairs, half, CONFIG, torch.device("cpu"), progress=False)
    train(spec, pairs, half, CONFIG, torch.device("cpu"), resume=True, progress=False, log=lambda m: None)
    assert losses(half) == full  # bit for bit: weights, Adam moments, RNG and data position restored


def test_an_accumulated_step_has_the_gradient_of_all_its_tokens(tmp_path, monkeypatch):
    """Three accumulated batches of unequal token counts make one step whose gradient is that of
    the label-smoothed loss (§5.4) summed over every target token of the three and divided by
    their count: computed here pair by pair, without batches or padding, from the same weights."""
    from tfspec.backends.torch import build_module
    from tfspec.backends.torch.training import trainer
    from tfspec.backends.torch.training.batches import make_batches

    pairs, spec = copy_task(16), small_spec(dropout=0.0)
    config = TrainConfig(steps=1, batch_tokens=60, accum=3, warmup=4, save_every=1, log_every=1)
    assert [sum(len(pairs.tgt[i]) - 1 for i in b) for b in make_batches(pairs, 60)] == [36, 47, 27]  # all of them
    stepped = []

    class Recording(torch.optim.Adam):
        def step(self, closure=None):
            stepped.append([p.grad.clone() for group in self.param_groups for p in group["params"]])
            return super().step(closure)

    monkeypatch.setattr(trainer, "adam", lambda params, fused=False: Recording(params, lr=0.0))
    train(spec, pairs, tmp_path, config, torch.device("cpu"), progress=False)
    torch.manual_seed(config.seed)  # the trainer's initial weights
    model = build_module(spec)
    total = sum(len(t) - 1 for t in pairs.tgt)
    for src, tgt in zip(pairs.src, pairs.tgt):
        src, tgt = (torch.from_numpy(x.astype(np.int64))[None] for x in (src, tgt))
        logits = model(src, tgt[:, :-1])[0]
        loss = torch.nn.functional.cross_entropy(logits, tgt[0, 1:], label_smoothing=spec.label_smoothing,
                                                 reduction="sum")
        (loss / total).backward()
    assert len(stepped) == 1 and spec.label_smoothing > 0
    for got, p in zip(stepped[0], model.parameters(), strict=True):
        torch.testing.assert_close(got, p.grad, rtol=1e-4, atol=1e-7)


def test_averaging_and_corrupt_checkpoints(tmp_path):
    pairs, spec = copy_task(), small_spec()
    train(spec, pairs, tmp_path, CONFIG, torch.device("cpu"), progress=False)
    found = checkpoint.checkpoints(tmp_path)
    assert [p.name for p in found] == ["step-0000003", "step-0000006"]
    from safetensors.torch import load_file

    from tfspec.backends.torch import build_module

    checkpoint.average(found, build_module(spec), tmp_path / "avg.safetensors")
    a, b = (load_file(str(p / "model.safetensors")) for p in found)
    avg = load_file(str(tmp_path / "avg.safetensors"))
    name = "decoder.layers.0.ffn.w_1"
    torch.testing.assert_close(avg[name], (a[name] + b[name]) / 2)
    blob = found[-1] / "optimizer.safetensors"
    blob.write_bytes(blob.read_bytes()[:-10] + b"0123456789")
    with pytest.raises(TfspecError, match="checksum mismatch"):
        checkpoint.read_meta(found[-1])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ddp_worker(rank, world, port, run, config):
    os.environ.update(WORLD_SIZE=str(world), RANK=str(rank), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    torch.set_num_threads(1)
    try:
        train(small_spec(dropout=0.0), copy_task(), run, config, torch.device("cpu"), progress=False)
    finally:
        torch.distributed.destroy_process_group()


def test_two_processes_match_one_process_accumulating(tmp_path):
    """gloo DDP over 2 processes x 1 batch = 1 process x 2 accumulated batches (same global batch)."""
    import torch.multiprocessing as mp

    single = TrainConfig(**{**CONFIG.__dict__, "accum": 2})
    train(small_spec(dropout=0.0), copy_task(), tmp_path / "one", single, torch.device("cpu"), progress=False)
    mp.spawn(_ddp_worker, args=(2, _free_port(), tmp_path / "two", CONFIG), nprocs=2)
    np.testing.assert_allclose(losses(tmp_path / "two"), losses(tmp_path / "one"), rtol=1e-5)
