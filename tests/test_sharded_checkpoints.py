"""Sharded checkpoints (``tfspec train --sharded-checkpoints``, torch.distributed.checkpoint) under
torchrun with gloo: saved at 2 ranks, resumed at 1, 2 and 4 with the losses of an uninterrupted
run, under DDP and FSDP; a kill -9 while saving leaves the previous checkpoint to resume from;
``average`` and ``export`` read them; a damaged or crafted checkpoint is one error line.

Every run takes the same 4 batches per step (ranks x --accum), so the uninterrupted
single-process run with --accum 4 is the reference for all of them (dropout 0: no per-rank RNG)."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from test_training import CONFIG, copy_task, losses, small_spec
from tfspec.backends.torch.training import TrainConfig, checkpoint, train
from tfspec.cli import main
from tfspec.untrusted import file_sha256

ARGS = ["--batch-tokens", "300", "--warmup", "6", "--lr-scale", "2", "--log-every", "1", "--threads", "1", "--quiet"]
SPECS = Path(__file__).resolve().parents[1] / "specs"


def torchrun(ranks: int, *args, script: Path | None = None) -> subprocess.CompletedProcess:
    """``torchrun --standalone --nproc_per_node RANKS -m tfspec ARGS`` (or ``script ARGS``)."""
    target = [str(script)] if script else ["-m", "tfspec"]
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
                           str(ranks), *target, *map(str, args)], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})


def fresh(tmp: Path, whole: Path, name: str) -> Path:
    """A run directory holding the reference run's tokenizer (each rank would otherwise train it)."""
    run = tmp / name
    run.mkdir(parents=True)
    shutil.copy(whole / "tokenizer.model", run)
    return run


@pytest.fixture(scope="module")
def spec(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("spec") / "spec.yaml"
    path.write_text(f"name: tiny-nodrop\nextends: {SPECS / 'tiny.yaml'}\ndropout: 0.0\nattention_dropout: 0.0\n")
    return path


@pytest.fixture(scope="module")
def whole(spec, tmp_path_factory) -> Path:
    """Five uninterrupted steps of 4 batches in one process."""
    run = tmp_path_factory.mktemp("whole") / "run"
    assert main(["train", str(spec), "--out", str(run), "--steps", "5", "--accum", "4", "--save-every", "100",
                 *ARGS]) == 0
    return run


@pytest.fixture(scope="module", params=[pytest.param("ddp", marks=pytest.mark.slow), "fsdp"])
def saved_at_two(request, spec, whole, tmp_path_factory) -> tuple[Path, str]:
    """Three steps at 2 ranks (--accum 2), checkpoints at steps 2 and 3, each rank writing its part."""
    run = fresh(tmp_path_factory.mktemp("two"), whole, "run")
    done = torchrun(2, "train", spec, "--out", run, "--steps", 3, "--accum", 2, "--save-every", 2,
                    "--sharded-checkpoints", "--shard", request.param, *ARGS)
    assert done.returncode == 0, done.stderr[-3000:]
    return run, request.param


@pytest.mark.parametrize("ranks", [1, pytest.param(2, marks=pytest.mark.slow), pytest.param(4, marks=pytest.mark.slow)])
def test_a_run_saved_at_two_ranks_resumes_at_any_number(saved_at_two, whole, spec, tmp_path, ranks):
    saved, shard = saved_at_two
    newest = checkpoint.checkpoints(saved)[-1]
    meta = json.loads((newest / "trainer.json").read_text())
    assert meta["format"] == 2 and meta["world"] == 2 and {"__0_0.distcp", "__1_0.distcp"} <= set(meta["files"])
    run = tmp_path / "run"
    shutil.copytree(saved, run)
    args = ["train", spec, "--out", run, "--steps", 5, "--accum", 4 // ranks, "--save-every", 100,
            "--sharded-checkpoints", "--shard", shard, "--resume", *ARGS]
    if ranks == 1:
        assert main([str(a) for a in args]) == 0
    else:
        done = torchrun(ranks, *args)
        assert done.returncode == 0, done.stderr[-3000:]
    assert len(losses(run)) == 5
    np.testing.assert_allclose(losses(run), losses(whole), rtol=0, atol=1e-5)


KILLER = """
import os, signal, sys
from torch.distributed.checkpoint.filesystem import FileSystemWriter
from tfspec.backends.torch.training import checkpoint
from tfspec.cli import main
from tfspec.untrusted import file_sha256

calls = []

def dying(original):
    '''SIGKILL rank 0 on its second call of ``original``: inside the second checkpoint's save.'''
    def call(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2 and os.environ.get("RANK", "0") == "0":
            os.kill(os.getpid(), signal.SIGKILL)
        return original(*args, **kwargs)
    return call

if os.environ["KILL_AT"] == "metadata":  # every rank's tensors written, DCP's .metadata not yet
    FileSystemWriter.finish = dying(FileSystemWriter.finish)
else:  # every file written and checksummed, the directory not yet renamed
    checkpoint.publish = dying(checkpoint.publish)
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize("ranks, at", [(1, "metadata"), pytest.param(2, "metadata", marks=pytest.mark.slow),
                                       pytest.param(2, "rename", marks=pytest.mark.slow)])
def test_kill_9_while_saving_leaves_the_previous_checkpoint(spec, whole, tmp_path, ranks, at, monkeypatch):
    script = tmp_path / "killer.py"
    script.write_text(KILLER)
    monkeypatch.setenv("KILL_AT", at)
    run = fresh(tmp_path, whole, "run")
    args = ["train", spec, "--out", run, "--steps", 5, "--accum", 4 // ranks, "--save-every", 2,
            "--sharded-checkpoints", *ARGS]
    if ranks == 1:
        done = subprocess.run([sys.executable, str(script), *map(str, args)], capture_output=True, timeout=600)
    else:
        done = torchrun(ranks, *args, script=script)
    assert done.returncode != 0
    assert [p.name for p in checkpoint.checkpoints(run)] == ["step-0000002"]
    assert (run / "checkpoints" / "step-0000004.tmp").is_dir()  # the interrupted write
    checkpoint.read_meta(run / "checkpoints" / "step-0000002")
    code = main([str(a) for a in ["train", spec, "--out", run, "--steps", 5, "--accum", 4, "--save-every", 100,
                                  "--sharded-checkpoints", "--resume", *ARGS]])
    assert code == 0 and not (run / "checkpoints" / "step-0000004.tmp").exists()
    np.testing.assert_allclose(losses(run), losses(whole), rtol=0, atol=1e-5)


def _torch_reference(path: Path, out: Path) -> dict[str, torch.Tensor]:
    """A checkpoint's weights as torch's own converter reads them (DCP's pickle reader: a file
    this test wrote, so trusted here)."""
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    dcp_to_torch_save(path, out)
    return torch.load(out, weights_only=False)["model"]


def test_export_and_average_read_a_sharded_checkpoint(cli, saved_at_two, tmp_path):
    """export (the newest checkpoint: ONNX parity with PyTorch on its weights), then average."""
    run = tmp_path / "run"
    shutil.copytree(saved_at_two[0], run)
    first, newest = checkpoint.checkpoints(run)
    code, out, err = cli("export", run, "-o", tmp_path / "onnx")
    assert code == 0 and f"weights: {newest} " in err and "parity: ok" in out, out + err
    code, out, _ = cli("average", run, "--last", 2)
    assert code == 0 and "step-0000002, step-0000003" in out
    from safetensors.torch import load_file

    averaged = load_file(str(run / "average.safetensors"))
    a, b = _torch_reference(first, tmp_path / "a.pt"), _torch_reference(newest, tmp_path / "b.pt")
    assert set(averaged) <= set(a) and len(averaged) > 10
    for name, value in averaged.items():
        torch.testing.assert_close(value, (a[name].double() + b[name].double()).div(2).float())


def test_a_truncated_shard_is_one_error_line(cli, saved_at_two, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(saved_at_two[0], run)
    shard = checkpoint.checkpoints(run)[-1] / "__1_0.distcp"
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    for command in (["average", run, "--last", 1], ["export", run, "-o", tmp_path / "onnx"]):
        code, _, err = cli(*command)  # export says first which weights it reads
        assert code == 2 and err.splitlines()[-1].startswith(f"error: {shard}: checksum mismatch"), err
        assert err.count("error:") == 1 and "Traceback" not in err


class _RunsCode:
    """A pickle that runs a shell command when loaded by ``pickle.load``."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def _forge(metadata: Path, how: str, marker: Path) -> None:
    from torch.distributed.checkpoint.metadata import BytesStorageMetadata

    if how == "code":
        metadata.write_bytes(pickle.dumps(_RunsCode(marker), protocol=2))
        return
    with open(metadata, "rb") as f:
        found = pickle.load(f)  # written by this test's run
    if how == "outside":
        for info in found.storage_data.values():
            info.relative_path = "../../../etc/passwd"
    elif how == "bytes":
        found.state_dict_metadata["model.encoder.embed.weight"] = BytesStorageMetadata()
    metadata.write_bytes(pickle.dumps(found, protocol=4 if how == "protocol 4" else 2))  # 4: DCP's own writer's


@pytest.mark.parametrize("how", ["code", "outside", "bytes", "protocol 4"])
def test_crafted_metadata_is_refused_without_running_it(cli, saved_at_two, tmp_path, how):
    """Checksums guard against damage, not against someone who rewrites trainer.json too: the
    metadata itself never reaches pickle.load, and what it declares is checked."""
    run = tmp_path / "run"
    shutil.copytree(saved_at_two[0], run)
    newest, marker = checkpoint.checkpoints(run)[-1], tmp_path / "ran"
    _forge(newest / ".metadata", how, marker)
    meta = json.loads((newest / "trainer.json").read_text())
    meta["files"][".metadata"] = file_sha256(newest / ".metadata")
    (newest / "trainer.json").write_text(json.dumps(meta))
    code, _, err = cli("average", run, "--last", 1)
    assert code == 2 and err.startswith(f"error: {newest}/.metadata: refused") and err.count("\n") == 1, err
    assert not marker.exists()


def test_a_format_1_run_resumes_into_sharded_checkpoints(tmp_path):
    """Old runs keep resuming: a format-1 checkpoint continued with sharded ones gives the losses
    of an uninterrupted run bit for bit, and averaging reads both formats."""
    cpu, sharded = torch.device("cpu"), TrainConfig(**{**CONFIG.__dict__, "sharded": True})
    train(small_spec(), copy_task(), tmp_path / "whole", CONFIG, cpu, progress=False)
    run = tmp_path / "mixed"
    train(small_spec(), copy_task(), run, TrainConfig(**{**CONFIG.__dict__, "steps": 3}), cpu, progress=False)
    train(small_spec(), copy_task(), run, sharded, cpu, resume=True, progress=False, log=lambda m: None)
    assert losses(run) == losses(tmp_path / "whole")
    found = checkpoint.checkpoints(run)
    assert [json.loads((p / "trainer.json").read_text())["format"] for p in found] == [1, 2]
    from safetensors.torch import load_file

    from tfspec.backends.torch import build_module

    checkpoint.average(found, build_module(small_spec()), tmp_path / "avg.safetensors")
    want = load_file(str(tmp_path / "whole" / "checkpoints" / "step-0000006" / "model.safetensors"))
    old = load_file(str(found[0] / "model.safetensors"))
    got = load_file(str(tmp_path / "avg.safetensors"))
    for name in want:
        torch.testing.assert_close(got[name], (old[name].double() + want[name].double()).div(2).float())


@pytest.mark.slow
def test_a_format_1_checkpoint_resumes_into_fsdp_shards(spec, whole, tmp_path):
    """A single-file checkpoint saved by one process, resumed at 2 FSDP ranks: each keeps its shard."""
    run = fresh(tmp_path, whole, "run")
    assert main([str(a) for a in ["train", spec, "--out", run, "--steps", 3, "--accum", 4, "--save-every", 3,
                                  *ARGS]]) == 0
    done = torchrun(2, "train", spec, "--out", run, "--steps", 5, "--accum", 2, "--save-every", 100,
                    "--shard", "fsdp", "--resume", *ARGS)
    assert done.returncode == 0, done.stderr[-3000:]
    np.testing.assert_allclose(losses(run), losses(whole), rtol=0, atol=1e-5)


def test_ranks_writing_to_disks_of_their_own_are_told_to_share_one(tmp_path, monkeypatch):
    """On node-local disks rank 0 does not see the other nodes' shards: the save stops saying so
    (here rank 1's report of its file is made up; rank 0 writes in one process)."""
    from tfspec.backends.torch import build_module
    from tfspec.backends.torch.training import sharded
    from tfspec.backends.torch.training.schedule import adam
    from tfspec.errors import TfspecError

    def gather(out, mine):
        out[:] = [mine, ({"__1_0.distcp": "0" * 64}, mine[1])]

    monkeypatch.setattr(sharded.dist, "all_gather_object", gather)
    model = build_module(small_spec())
    with pytest.raises(TfspecError, match="rank 0 does not see __1_0.distcp .* one RUN directory that every node"):
        sharded.save(tmp_path / "step.tmp", model, adam(list(model.parameters())), {"step": 1}, rank=0, world=2)


def test_resume_skips_a_damaged_sharded_checkpoint(tmp_path):
    """A truncated shard in the newest checkpoint: --resume says so and continues from the one
    before, to the losses of an uninterrupted run."""
    cpu, config = torch.device("cpu"), TrainConfig(**{**CONFIG.__dict__, "sharded": True})
    train(small_spec(), copy_task(), tmp_path / "whole", config, cpu, progress=False)
    run, said = tmp_path / "run", []
    train(small_spec(), copy_task(), run, TrainConfig(**{**config.__dict__, "steps": 5}), cpu, progress=False)
    shard = checkpoint.checkpoints(run)[-1] / "__0_0.distcp"  # step 5's; step 3's is intact
    shard.write_bytes(shard.read_bytes()[:100])
    train(small_spec(), copy_task(), run, config, cpu, resume=True, progress=False, log=said.append)
    assert any("skipping checkpoint step-0000005" in s and "checksum mismatch" in s for s in said), said
    assert losses(run) == losses(tmp_path / "whole")
