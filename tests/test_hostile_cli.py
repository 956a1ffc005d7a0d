"""Command lines and files that no run should take: refused by the parser or in one line.

Values out of range stop at argparse (which names the flag and exits 2) instead of reaching
onnxruntime or numpy; files a user hands over (model directories, manifests, tokenizers,
input lines) are checked before they are used.
"""

from __future__ import annotations

import errno
import json
import shutil

import pytest

from tfspec.cli import main

pytest.importorskip("onnxruntime")


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    out = tmp_path_factory.mktemp("hostile") / "tiny"
    assert main(["export", "tiny", "-o", str(out), "--no-check"]) == 0
    return out


def parser_refuses(capsys, *args) -> str:
    with pytest.raises(SystemExit) as info:
        main([str(a) for a in args])
    assert info.value.code == 2
    return capsys.readouterr().err


@pytest.mark.parametrize("args,needle", [
    (["translate", "m", "--beam", "0"], "--beam: must be between 1"),
    (["translate", "m", "--beam", "-2"], "--beam: must be between 1"),
    (["translate", "m", "--threads", "0"], "--threads"),
    (["translate", "m", "--alpha", "nan"], "--alpha: must be a finite number"),
    (["translate", "m", "--batch", "x"], "expected a whole number"),
    (["report", "base", "--n", "0"], "--n"),
    (["compile", "base", "--length", f"{10**40}"], "--length"),
    (["train", "tiny", "--out", "r", "--lr-scale", "0"], "--lr-scale"),
    (["train", "tiny", "--out", "r", "--max-minutes", "inf"], "--max-minutes"),
    (["train", "tiny", "--out", "r", "--seed", "-1"], "--seed"),
    (["evaluate", "r", "--beam", "0"], "--beam"),
])
def test_out_of_range_values_stop_at_the_parser(capsys, args, needle):
    assert needle in parser_refuses(capsys, *args)


def test_output_paths_must_be_directories_or_new(capsys, tmp_path):
    existing = tmp_path / "file.txt"
    existing.write_text("keep me")
    assert "is not a directory" in parser_refuses(capsys, "export", "tiny", "-o", existing)
    assert "is not a directory" in parser_refuses(capsys, "train", "tiny", "--out", existing)
    assert "is a directory" in parser_refuses(capsys, "graph", "tiny", "-o", tmp_path)
    assert "does not exist" in parser_refuses(capsys, "plot", "-o", tmp_path / "no" / "such" / "plot.png")
    assert existing.read_text() == "keep me"


def test_overlong_input_line(cli, exported, tmp_path):
    lines = tmp_path / "in.txt"
    lines.write_text("5 6 7\n" + "5 " * 60_000 + "\n")
    code, out, err = cli("translate", exported, lines, "--beam", "1")
    assert code == 2 and "line 2" in err and "characters" in err and out == ""


def test_tampered_manifest_spec(cli, exported, tmp_path):
    copy = tmp_path / "m"
    shutil.copytree(exported, copy)
    manifest = json.loads((copy / "tfspec.json").read_text())
    manifest["spec"]["d_model"] = -1
    (copy / "tfspec.json").write_text(json.dumps(manifest))
    code, _, err = cli("translate", copy)
    assert code == 2 and "tfspec.json" in err and "d_model" in err and "Traceback" not in err


def test_a_valid_but_edited_manifest_spec_is_refused(cli, exported, tmp_path):
    """A longer position table in the manifest than in the graphs let a long line reach
    onnxruntime (a broadcast error, a traceback): the graphs carry the spec they were built from."""
    copy = tmp_path / "m"
    shutil.copytree(exported, copy)
    manifest = json.loads((copy / "tfspec.json").read_text())
    manifest["spec"]["positional"]["max_len"] = 100_000
    (copy / "tfspec.json").write_text(json.dumps(manifest))
    (tmp_path / "in.txt").write_text(" ".join(["7"] * 400) + "\n")
    code, _, err = cli("translate", copy, tmp_path / "in.txt", "--beam", "1")
    assert code == 2 and "not the one this graph was exported from" in err and len(err.splitlines()) == 1, err


def test_corrupt_tokenizer(cli, exported, tmp_path):
    copy = tmp_path / "m"
    shutil.copytree(exported, copy)
    (copy / "tokenizer.model").write_bytes(b"\x00not a model")
    code, _, err = cli("translate", copy)
    assert code == 2 and "tokenizer.model" in err and "not a sentencepiece model" in err


def test_file_system_errors_are_one_line(monkeypatch, capsys):
    """What the file system says about a path (full, denied, too long) is input, not a bug."""

    def full(ref):
        raise OSError(errno.ENOSPC, "No space left on device", "out/model.onnx")

    monkeypatch.setattr("tfspec.cli.models.load_spec", full)
    assert main(["validate", "base"]) == 2
    assert capsys.readouterr().err == "error: out/model.onnx: No space left on device\n"


DEEP = "[" * 200_000 + "]" * 200_000
"""JSON that Python's parser gives up on with RecursionError (not a JSONDecodeError)."""
LONG = '{"format": ' + "9" * 5000 + "}"
"""JSON whose number Python refuses to convert (a plain ValueError)."""


@pytest.mark.parametrize("content,needle", [(DEEP, "nested too deeply"), (LONG, "more than 4,300 digits"),
                                            (None, "not a regular file")])
def test_json_files_that_python_cannot_take_are_one_line(cli, exported, tmp_path, content, needle):
    """Each JSON file tfspec reads goes through one reader: deep nesting, numbers of thousands
    of digits and FIFOs (which hung) are one error line for an export manifest, a Hugging Face
    config and a corpus manifest alike."""
    import os

    model = tmp_path / "model"
    shutil.copytree(exported, model)
    config, corpus = tmp_path / "hf", tmp_path / "corpus"
    config.mkdir(), corpus.mkdir()
    for path in (model / "tfspec.json", config / "config.json", corpus / "manifest.json"):
        path.unlink(missing_ok=True)
        os.mkfifo(path) if content is None else path.write_text(content)
    for args, where in ((["translate", model, tmp_path / "in.txt"], "tfspec.json"),
                        (["import", config, "-o", tmp_path / "out"], "config.json"),
                        (["data", "stats", corpus], "manifest.json")):
        code, _, err = cli(*args)
        assert code == 2 and where in err and needle in err and len(err.strip().splitlines()) == 1, err


def test_export_never_writes_over_files_it_did_not_write(cli, tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "model.onnx").write_text("mine")
    code, _, err = cli("export", "tiny", "-o", mine, "--no-check")
    assert code == 2 and "not empty and not an earlier export" in err and (mine / "model.onnx").read_text() == "mine"
    again = tmp_path / "again"
    assert cli("export", "tiny", "-o", again, "--no-check")[0] == 0
    assert cli("export", "tiny", "-o", again, "--no-check")[0] == 0  # an earlier export is replaced


def test_an_export_that_fails_its_checks_midway_leaves_nothing(cli, tmp_path, monkeypatch):
    """Graphs are checked (and quantised) before they are published: a crash or an interrupt
    in the parity check used to leave a complete-looking directory that translate accepted."""
    import importlib

    parity = importlib.import_module("tfspec.backends.parity.onnx")  # export imports check_parity when it runs

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(parity, "check_parity", interrupted)
    code, _, _ = cli("export", "tiny", "-o", tmp_path / "out")
    assert code == 130 and [p.name for p in (tmp_path / "out").iterdir()] == []
