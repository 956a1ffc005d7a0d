"""Interrupted and damaged runs lose nothing: resume falls back past a corrupt checkpoint,
interrupted writes are cleaned up, metrics keep one line per step, a full disk keeps the last
checkpoint. Each run is compared with an uninterrupted one, loss for loss."""

from __future__ import annotations

import errno
import json

import pytest
import torch

from test_training import CONFIG, copy_task, losses, small_spec
from tfspec.backends.torch.training import TrainConfig, train
from tfspec.backends.torch.training import checkpoint
from tfspec.errors import TfspecError

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def whole(tmp_path_factory):
    """The uninterrupted run every damaged one must reproduce."""
    run = tmp_path_factory.mktemp("whole")
    train(small_spec(), copy_task(), run, CONFIG, CPU, progress=False)
    return losses(run)


def first_half(run) -> None:
    train(small_spec(), copy_task(), run, TrainConfig(**{**CONFIG.__dict__, "steps": 5}), CPU, progress=False)


def resume(run) -> list[str]:
    said = []
    train(small_spec(), copy_task(), run, CONFIG, CPU, resume=True, progress=False, log=said.append)
    return said


def test_resume_falls_back_past_a_corrupt_checkpoint(tmp_path, whole):
    first_half(tmp_path)  # checkpoints at steps 3 and 5
    newest = checkpoint.checkpoints(tmp_path)[-1]
    blob = newest / "model.safetensors"
    blob.write_bytes(blob.read_bytes()[: len(blob.read_bytes()) // 2])  # truncated, as by a dying disk
    said = resume(tmp_path)
    assert any("skipping checkpoint step-0000005" in s and "checksum" in s for s in said), said
    assert any("step-0000003 (step 3)" in s for s in said), said
    assert losses(tmp_path) == whole


def test_no_intact_checkpoint_is_refused(tmp_path):
    first_half(tmp_path)
    for path in checkpoint.checkpoints(tmp_path):
        (path / "trainer.json").write_text("{")
    with pytest.raises(TfspecError, match="no intact checkpoint"):
        resume(tmp_path)


@pytest.mark.parametrize("forged", [{"step": "5"}, {"step": -1}, {"step": True}, {"epoch": None},
                                    {"seconds": float("nan")}, {"files": ["model.safetensors"]},
                                    {"position": [1, "x"]}, {"epoch": 2.5}, {"position": 1.5}, {"position": [1, 2]},
                                    {"files": {}}, {"tokens": -3}])
def test_a_forged_trainer_state_is_skipped_by_name(tmp_path, whole, forged):
    """trainer.json is not under its own checksums: a state no loop can count with is a
    damaged checkpoint (skipped, saying which field), never a crash mid-resume."""
    first_half(tmp_path)
    meta = checkpoint.checkpoints(tmp_path)[-1] / "trainer.json"
    meta.write_text(json.dumps(json.loads(meta.read_text()) | forged))
    said = resume(tmp_path)
    assert any(f"corrupt ({next(iter(forged))}: not what a checkpoint holds)" in s for s in said), said
    assert losses(tmp_path) == whole


def test_stale_tmp_directories_are_removed(tmp_path, whole):
    first_half(tmp_path)
    stale = tmp_path / "checkpoints" / "step-0000006.tmp"
    stale.mkdir()
    (stale / "model.safetensors").write_bytes(b"half written")
    said = resume(tmp_path)
    assert not stale.exists() and any("step-0000006.tmp" in s for s in said)
    assert losses(tmp_path) == whole


def test_metrics_hold_each_step_once(tmp_path, whole):
    first_half(tmp_path)
    metrics = tmp_path / "metrics.jsonl"
    lines = metrics.read_text().splitlines()
    # A killed run's leftovers: a step logged twice, steps after the checkpoint, a line cut short.
    metrics.write_text("\n".join(lines[:3] + lines[2:] + ['{"step": 9, "loss": 1.0}', '{"step": 6, "lo']) + "\n")
    resume(tmp_path)
    steps = [json.loads(line)["step"] for line in metrics.read_text().splitlines()]
    assert steps == list(range(1, CONFIG.steps + 1))
    assert losses(tmp_path) == whole


def test_full_disk_keeps_the_previous_checkpoint(tmp_path, monkeypatch, whole):
    real = checkpoint.save_file
    calls = []

    def disk_full_on_second_save(tensors, filename, metadata=None):
        calls.append(filename)
        if "step-0000006" in filename:
            raise OSError(errno.ENOSPC, "No space left on device", filename)
        return real(tensors, filename, metadata=metadata)

    monkeypatch.setattr(checkpoint, "save_file", disk_full_on_second_save)
    with pytest.raises(TfspecError, match="No space left on device.*newest intact checkpoint is step-0000003"):
        train(small_spec(), copy_task(), tmp_path, CONFIG, CPU, progress=False)
    assert [p.name for p in checkpoint.checkpoints(tmp_path)] == ["step-0000003"]
    assert not list((tmp_path / "checkpoints").glob("*.tmp"))
    checkpoint.read_meta(checkpoint.checkpoints(tmp_path)[-1])  # intact: checksums hold
    monkeypatch.setattr(checkpoint, "save_file", real)
    resume(tmp_path)
    assert losses(tmp_path) == whole


def test_a_diverging_run_stops_before_its_weights_turn_to_nan(tmp_path):
    """An absurd learning rate drives the weights to infinity and the loss to NaN: the run stops
    with one error, and every checkpoint it left holds finite weights."""
    from safetensors.torch import load_file

    config = TrainConfig(**{**CONFIG.__dict__, "steps": 200, "lr_scale": 1e7, "save_every": 1})
    diverged = r"training diverged: (the loss is nan|its weights are no longer finite)"
    with pytest.raises(TfspecError, match=diverged) as caught:
        train(small_spec(), copy_task(), tmp_path, config, CPU, progress=False)
    saved = checkpoint.checkpoints(tmp_path)
    assert saved and f"{saved[-1].name}, holds finite weights" in str(caught.value)
    for path in saved:
        assert all(torch.isfinite(t).all() for t in load_file(path / "model.safetensors").values()), path


def test_a_linked_checkpoint_is_never_resumed_from_nor_its_target_removed(tmp_path, whole):
    """A step-*.tmp linking to another run's checkpoint was reported removed (rmtree refuses
    links, silently) and then resumed from; a checkpoint that is a link is not this run's."""
    other = tmp_path / "other"
    first_half(other)
    run = tmp_path / "run"
    first_half(run)
    target = checkpoint.checkpoints(other)[-1]
    (run / "checkpoints" / "step-0000099.tmp").symlink_to(target, target_is_directory=True)
    (run / "checkpoints" / "step-0000098").symlink_to(target, target_is_directory=True)
    said = resume(run)
    assert not any("step-00000" + "99" in s or "step-0000098" in s for s in said if "resumed" in s), said
    assert (target / "trainer.json").is_file() and not (run / "checkpoints" / "step-0000099.tmp").exists()
    assert losses(run) == whole
