"""One training loop, tasks plugged in (issue 54, item 1): the task of a spec comes from the spec
(its family, image, frames and head) or ``--task``, never from the data directory; a directory
the task does not read is one ``error:`` line, naming the task that would read it; the loop
(backward pass and optimizer step) is written once."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from tests.conftest import REPO, SHIPPED
from tfspec.backends.torch.training.tasks import task_for, tasks
from tfspec.errors import TfspecError
from tfspec.spec import load_spec, spec_from_data

CLASSIFIER = {"name": "clf", "family": "encoder-only", "vocab": {"size": 64}, "d_model": 16, "heads": 2, "d_ff": 32,
              "positional": {"kind": "learned", "max_len": 32}, "encoder": {"layers": 1, "block": ["self_attention",
                                                                                                  "ffn"]},
              "head": {"kind": "sequence_classification", "classes": 2}}


def expected(spec) -> str | None:
    """The task a spec's own fields call for, written from the spec's documentation (heads.py,
    schema.py) rather than from the tasks' ``fits``: None where no task trains it."""
    head = spec.head.kind if spec.head is not None else None
    if spec.frames is not None:
        return "ctc" if head == "ctc" else None
    if head in ("sequence_classification", "token_classification"):
        return "classification"
    if head is not None:
        return None
    if spec.image is not None:
        return "images" if spec.family == "decoder-only" else None
    return {"encoder-decoder": "translation", "decoder-only": "language-model", "encoder-only": "masked-lm"}[spec.family]


@pytest.mark.parametrize("name", SHIPPED + ["examples/ctc-digits.yaml", "examples/llama-lm.yaml"])
def test_each_shipped_spec_gets_the_task_its_fields_call_for(name):
    spec = load_spec(str(REPO / name) if name.startswith("examples/") else name)
    want = expected(spec)
    fitting = [n for n, t in tasks().items() if t.fits(spec)]
    assert fitting == ([want] if want else []), fitting  # never two: --task is needed only where tasks overlap
    if want:
        assert task_for(spec).name == want


def test_a_classification_head_is_the_classification_task():
    spec = spec_from_data(CLASSIFIER, "clf")
    assert expected(spec) == task_for(spec).name == "classification"


@pytest.mark.parametrize("task", sorted(tasks()))
def test_every_task_says_what_it_trains_and_reads(task):
    """The words the refusals quote: each registered task fills them in."""
    cls = tasks()[task]
    assert cls.name == task and cls.trains and cls.reads and cls.command in ("train", "finetune")


def test_task_names_a_task_that_fits_or_is_refused():
    spec = load_spec("tiny")
    assert task_for(spec, "translation").name == "translation"
    with pytest.raises(TfspecError, match=r"--task images trains a decoder-only spec with an image; tiny is not "
                                          r"one \(it fits translation\)"):
        task_for(spec, "images")
    with pytest.raises(TfspecError, match="--task nope: no such task; the tasks are classification, ctc, images"):
        task_for(spec, "nope")


def one_error(cli, *args) -> str:
    code, _, err = cli(*args)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


@pytest.fixture(scope="module")
def image_dir(tmp_path_factory) -> Path:
    pytest.importorskip("sklearn")
    from tfspec.data.images import prepare_images

    out = tmp_path_factory.mktemp("digits")
    prepare_images("digits", out)
    return out


def test_a_text_spec_on_an_image_directory_is_told_which_task_reads_it(cli, image_dir, tmp_path):
    """Before, the image manifest alone sent tiny to the image trainer, which refused it as not an
    image spec; now tiny is the translation task's and the directory is named as the images task's."""
    error = one_error(cli, "train", "tiny", "--data", image_dir, "--out", tmp_path / "run", "--quiet")
    assert f"{image_dir} holds images (`tfspec data images`), for the images task (a decoder-only spec with an " \
           "image)" in error
    assert "tiny is trained by the translation task, which reads a parallel corpus" in error
    assert not (tmp_path / "run" / "run.json").exists()


def test_an_image_spec_on_a_text_corpus_or_without_data_is_refused(cli, tmp_path):
    error = one_error(cli, "train", "zoo/image-digits", "--out", tmp_path / "run", "--quiet")
    assert error == "error: no --data; image-digits is trained by the images task, which reads images (`tfspec " \
                    "data images`)"
    from tfspec.data import sample_dir

    error = one_error(cli, "train", "zoo/image-digits", "--data", sample_dir(), "--out", tmp_path / "run")
    assert "holds a parallel corpus" in error and "for the translation task" in error
    assert "image-digits is trained by the images task" in error


def test_a_classifier_spec_is_sent_to_finetune(cli, write_spec, tmp_path):
    import yaml

    spec = write_spec(yaml.safe_dump(CLASSIFIER))
    error = one_error(cli, "train", spec, "--out", tmp_path / "run")
    assert error == "error: clf is trained by the classification task: `tfspec finetune` runs it"
    error = one_error(cli, "train", "tiny", "--task", "masked-lm", "--out", tmp_path / "run")
    assert "--task masked-lm trains an encoder-only spec without a head or frames" in error


def test_a_one_process_task_refuses_torchrun(monkeypatch, tmp_path):
    """CTC draws one batch a step: under torchrun every rank would train on the same lines. It
    says so before joining a process group (none is started here: the refusal comes first)."""
    from tfspec.backends.torch.training.ctc import LinesConfig, train_lines

    monkeypatch.setenv("WORLD_SIZE", "2")
    spec = load_spec(str(REPO / "examples" / "ctc-digits.yaml"))
    with pytest.raises(TfspecError, match="the ctc task trains in one process"):
        train_lines(spec, [], tmp_path, LinesConfig(steps=1), "ctc", progress=False)
    assert not torch.distributed.is_initialized()


def test_the_loop_is_written_once():
    """Only the trainer runs a backward pass or steps an optimizer: every task plugs into it."""
    found = {}
    for path in sorted((REPO / "backends" / "torch").rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        if re.search(r"\.backward\(|optimizer\.step\(|\.zero_grad\(", text):
            found[str(path.relative_to(REPO))] = True
    assert list(found) == ["backends/torch/training/trainer.py"]


def test_train_help_prints_percentages_once(capsys):
    """argparse %-formats option help but not a description: '%%' there was printed as '%%'."""
    from tfspec.cli import main

    with pytest.raises(SystemExit):
        main(["train", "--help"])
    out = capsys.readouterr().out
    assert "15%: 80% [MASK]" in out and "%%" not in out
