"""Issue 51's training-checkpoint defects, each as it was found: a spec that does not fit a sharded
checkpoint (a traceback, or a silent load that dropped trained weights), a regular file named
``step-N.tmp``, a checkpoint directory without trainer.json skipped unsaid, a full disk under a
sharded save. Both checkpoint formats answer each the same way."""

from __future__ import annotations

import errno
import json
import os
import shutil
import socket

import pytest
import torch

from tests.conftest import SPECS
from test_training import CONFIG, copy_task, losses, small_spec
from tfspec.backends.torch import build_module
from tfspec.backends.torch.training import TrainConfig, checkpoint, train
from tfspec.errors import TfspecError
from tfspec.untrusted import file_sha256

CPU = torch.device("cpu")
TINY = ["--batch-tokens", "512", "--threads", "1", "--quiet"]
FORMATS = {"single-file": [], "sharded": ["--sharded-checkpoints"]}


@pytest.fixture(scope="module")
def tiny_runs(tmp_path_factory) -> dict:
    """`tfspec train tiny --steps 2` in each format (the issue's reproduction, shortened)."""
    from tfspec.cli import main

    runs = {}
    for name, flags in FORMATS.items():
        runs[name] = tmp_path_factory.mktemp(name) / "run"
        assert main(["train", "tiny", "--out", str(runs[name]), "--steps", "2", "--save-every", "2", *flags,
                     *TINY]) == 0
    return runs


MISFITS = {  # a spec beside tiny (2 + 2 layers, d_model 64, vocab 1000) and a line the refusal must hold
    "small": ("small", "encoder.embed.weight: file has [1000, 64], spec needs [8000, 256]"),
    "one more layer": ("encoder: {layers: 3}", "missing encoder.layers.2.ffn.w_1 [256, 64]"),
    "one layer fewer": ("encoder: {layers: 1}", "unexpected encoder.layers.1.ffn.w_1 [256, 64]"),
}


@pytest.mark.parametrize("misfit", MISFITS)
@pytest.mark.parametrize("command", ["train --resume", "export --weights"])
def test_a_spec_that_does_not_fit_a_checkpoint_is_one_answer_in_both_formats(cli, tiny_runs, write_spec, tmp_path,
                                                                             misfit, command):
    """A sharded checkpoint answered a bigger spec with DCP's CheckpointException (exit 1), one
    more layer with `RuntimeError: Missing key`, and one layer fewer by loading and dropping
    the trained layer; the single-file format refused each. Now both give the same lines."""
    change, line = MISFITS[misfit]
    spec = change if change == "small" else write_spec(f"extends: {SPECS / 'tiny.yaml'}\n{change}\n")
    answers = {}
    for name, flags in FORMATS.items():
        run = shutil.copytree(tiny_runs[name], tmp_path / name)
        step = checkpoint.checkpoints(run)[-1]
        if command == "export --weights":
            code, _, err = cli("export", spec, "--weights", step, "-o", tmp_path / f"{name}.onnx")
            assert not (tmp_path / f"{name}.onnx").exists()
        else:
            code, _, err = cli("train", spec, "--out", run, "--resume", "--steps", 4, *flags, *TINY)
            assert "skipping" not in err  # the spec is wrong for every checkpoint of the run, not one damaged
        assert code == 2 and "Traceback" not in err and f"error: {line}\n" in err, err
        refusal = err[err.index("error:"):]
        where = step / "model.safetensors" if name == "single-file" else step
        assert refusal.startswith(f"error: {where}: weights do not match spec "), refusal
        answers[name] = refusal.replace(str(where), "CHECKPOINT")
    assert answers["single-file"] == answers["sharded"]


def trained(run, sharded: bool, steps: int, resume: bool = False) -> list[str]:
    """``small_spec`` on the copy task up to ``steps`` (checkpoints every 3); what the run said."""
    said = []
    config = TrainConfig(**{**CONFIG.__dict__, "steps": steps, "sharded": sharded})
    train(small_spec(), copy_task(), run, config, CPU, resume=resume, progress=False, log=said.append)
    return said


@pytest.fixture(scope="module", params=[False, True], ids=["single-file", "sharded"])
def whole(request, tmp_path_factory) -> tuple[bool, list[float]]:
    """An uninterrupted run of 6 steps in each format: the losses a resumed one must repeat."""
    run = tmp_path_factory.mktemp("whole")
    trained(run, request.param, 6)
    return request.param, losses(run)


def _fifo(path):
    os.mkfifo(path)


def _socket(path):
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(path))
    sock.close()


STALE = {"a regular file": lambda p: p.write_text("x"), "a fifo": _fifo, "a socket": _socket,
         "a dangling link": lambda p: p.symlink_to(p.parent / "nowhere"),
         "a link to a directory": lambda p: p.symlink_to(p.parent.parent / "elsewhere", target_is_directory=True)}


@pytest.mark.parametrize("kind", STALE)
def test_a_stale_tmp_of_any_file_type_does_not_stop_the_next_save(tmp_path, whole, kind):
    """`checkpoints/step-N.tmp` as a regular file made the resumed run's first save fail (a
    traceback in the sharded format, 'File exists' in the other): it is removed like a stale
    directory, and a link's target is left alone."""
    sharded, reference = whole
    trained(tmp_path, sharded, 3)
    (tmp_path / "elsewhere").mkdir()
    STALE[kind](tmp_path / "checkpoints" / "step-0000006.tmp")
    said = trained(tmp_path, sharded, 6, resume=True)
    assert any("removed step-0000006.tmp" in s for s in said), said
    assert losses(tmp_path) == reference and (tmp_path / "elsewhere").is_dir()
    assert [p.name for p in checkpoint.checkpoints(tmp_path)] == ["step-0000003", "step-0000006"]


def test_a_checkpoint_without_trainer_json_is_skipped_by_name(tmp_path, whole):
    """Resume went one checkpoint back without a word when the newest lacked trainer.json
    (checksum failures were named): now it says which, and why."""
    sharded, reference = whole
    trained(tmp_path, sharded, 5)  # checkpoints at steps 3 and 5
    (tmp_path / "checkpoints" / "step-0000005" / "trainer.json").unlink()
    said = trained(tmp_path, sharded, 6, resume=True)
    skipped = [s for s in said if s.startswith("warning: skipping checkpoint step-0000005")]
    assert skipped and "no trainer.json" in skipped[0], said
    assert losses(tmp_path) == reference


def test_a_run_whose_only_checkpoint_lacks_trainer_json_is_not_resumed_from_scratch(tmp_path, whole):
    sharded, _ = whole
    trained(tmp_path, sharded, 3)
    (tmp_path / "checkpoints" / "step-0000003" / "trainer.json").unlink()
    with pytest.raises(TfspecError, match="no intact checkpoint to resume from .*step-0000003: not a checkpoint"):
        trained(tmp_path, sharded, 6, resume=True)


def test_a_full_disk_under_a_sharded_save_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    """DCP wraps the writer's OSError in CheckpointException, a BaseException that `except
    Exception` let through as a traceback; it is the same one line as in the single-file format."""
    from torch.distributed.checkpoint import filesystem

    real = filesystem._write_item

    def full(transforms, stream, *args, **kwargs):
        if "step-0000006" in str(getattr(stream, "name", "")):
            raise OSError(errno.ENOSPC, "No space left on device", stream.name)
        return real(transforms, stream, *args, **kwargs)

    monkeypatch.setattr(filesystem, "_write_item", full)
    with pytest.raises(TfspecError, match="No space left on device.*newest intact checkpoint is step-0000003"):
        trained(tmp_path, True, 6)
    assert [p.name for p in checkpoint.checkpoints(tmp_path)] == ["step-0000003"]
    assert not list((tmp_path / "checkpoints").glob("*.tmp"))


def test_a_shard_damaged_behind_its_checksum_is_one_error_line(tmp_path):
    """Someone rewrote trainer.json after truncating a shard: DCP's read fails inside its
    CheckpointException, which `except Exception` let through; now it is one line naming the
    checkpoint."""
    trained(tmp_path, True, 3)
    path = checkpoint.checkpoints(tmp_path)[-1]
    shard = path / "__0_0.distcp"
    shard.write_bytes(shard.read_bytes()[:1000])
    meta = json.loads((path / "trainer.json").read_text())
    (path / "trainer.json").write_text(json.dumps(meta | {"files": meta["files"] | {shard.name: file_sha256(shard)}}))
    with pytest.raises(TfspecError, match=f"^{path}: cannot load this sharded checkpoint into the model") as caught:
        checkpoint.load_checkpoint_weights(build_module(small_spec()), path)
    assert "\n" not in str(caught.value)
