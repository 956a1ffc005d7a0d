"""``tfspec data digit-lines``, ``tfspec train`` on them and ``tfspec transcribe``, end to end on
a tiny model, and the files transcribe must refuse in one line."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest
import torch
import yaml

from test_ctc import collapse, levenshtein
from tfspec.cli import main
from tfspec.data.digits import read_digit_lines

pytest.importorskip("onnxruntime")
pytest.importorskip("sklearn")
PIL = pytest.importorskip("PIL.Image")

SPEC = {"name": "ctc-test", "family": "encoder-only", "frames": {"features": 8}, "vocab": 11,
        "head": {"kind": "ctc", "alphabet": "0123456789", "blank": 10}, "d_model": 16, "heads": 2, "d_ff": 32,
        "norm": "pre", "positional": {"kind": "sinusoidal", "max_len": 200},
        "encoder": {"layers": 1, "block": ["self_attention", "ffn"]}}
"""The blank last, not at torch's default id 0: a decoder that forgets the spec's blank drops '0's."""


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny digit-lines set, a model trained on it for a few steps, its export and sample PNGs."""
    root = tmp_path_factory.mktemp("ctc")
    assert main(["data", "digit-lines", str(root / "data"), "--train", "24", "--dev", "5", "--test", "6"]) == 0
    (root / "spec.yaml").write_text(yaml.safe_dump(SPEC))
    assert main(["train", str(root / "spec.yaml"), "--data", str(root / "data"), "--out", str(root / "run"),
                 "--steps", "3", "--quiet", "--threads", "1"]) == 0
    return root


def test_data_holds_out_a_block_and_reads_back(trained):
    manifest = json.loads((trained / "data" / "manifest.json").read_text())
    assert manifest["splits"]["test"]["lines"] == 6 and manifest["splits"]["dev"]["lines"] == 5
    assert manifest["held_out"] == ("samples [0, 1437) draw train lines, samples [1437, 1617) draw dev lines, "
                                    "samples [1617, 1797) draw test lines")  # load_digits' 1,797 in 80/10/10 blocks
    for line in read_digit_lines(trained / "data", "train"):
        positions = line.frame_positions
        drawn = [p for i, p in enumerate(positions) if p >= 0 and (i == 0 or p != positions[i - 1])]
        assert drawn == list(range(len(line.text))) and line.frames.shape[1] == 8


BLANK = SPEC["head"]["blank"]


def spelled(ids) -> str:
    """Label ids as text: the alphabet in id order, the blank's id left out."""
    symbols = list(SPEC["head"]["alphabet"])
    symbols.insert(BLANK, None)
    return "".join(symbols[k] for k in ids)


def best_path(log_probs) -> str:
    """Best path decoding by hand: the likeliest class of each frame, repeats merged and blanks
    dropped (Graves et al. 2006 §3.1)."""
    return spelled(collapse(tuple(np.asarray(log_probs).argmax(-1)), BLANK))


def cer(hypotheses, references) -> float:
    """Character error rate: edits (the recursive Levenshtein definition) over reference characters."""
    return sum(map(levenshtein, hypotheses, references)) / sum(map(len, references))


@pytest.fixture(scope="module")
def recounted(trained):
    """{row: {split: CER}} of the run counted outside the scoring code: its newest checkpoints
    and its ONNX export loaded as a user would, each line read alone (no batch, no padding),
    best paths collapsed by hand; prefix beam search is tfspec.ctc's (checked against sums over
    every alignment in test_ctc.py)."""
    from tfspec.backends.onnx import OnnxModel
    from tfspec.backends.torch import build_module
    from tfspec.backends.torch.checkpoint import load_weights
    from tfspec.backends.torch.training import checkpoint
    from tfspec.ctc import prefix_beam_search
    from tfspec.spec import load_spec

    spec = load_spec(trained / "spec.yaml")
    exported = OnnxModel(trained / "run" / "onnx", device="cpu")
    models = {}
    for objective in ("ctc", "framewise"):
        load_weights(model := build_module(spec).eval(), checkpoint.checkpoints(trained / "run" / objective)[-1]
                     / "model.safetensors")
        models[objective] = model
    scores = {}
    for split in ("dev", "test"):
        lines = read_digit_lines(trained / "data", split)
        inputs = [{"frames": line.frames[None], "lengths": np.array([len(line.frames)])} for line in lines]
        with torch.no_grad():
            log_probs = {name: [model.run({k: torch.from_numpy(v) for k, v in x.items()}, ("log_probs",))
                                ["log_probs"][0].numpy() for x in inputs] for name, model in models.items()}
        hypotheses = {"CTC, best path": [best_path(lp) for lp in log_probs["ctc"]],
                      "CTC, prefix beam 8": [spelled(prefix_beam_search(lp, 8, BLANK)) for lp in log_probs["ctc"]],
                      "framewise baseline, collapsed": [best_path(lp) for lp in log_probs["framewise"]],
                      "CTC, ONNX Runtime best path": [best_path(exported.run("model", ["log_probs"], x)[0][0])
                                                      for x in inputs]}
        for label, texts in hypotheses.items():
            scores.setdefault(label, {})[split] = cer(texts, [line.text for line in lines])
    return scores


def test_train_scores_both_objectives_and_exports(trained, recounted):
    """The CERs train reports are those of its models, counted here. Three steps teach nothing
    yet: an untrained model emits digits at most frames, so its hypotheses run longer than the
    references and every model's CER lies above 1 (each extra digit is one more edit)."""
    results = json.loads((trained / "run" / "results.json").read_text())
    assert results["cer"].keys() == recounted.keys()
    for label, by_split in recounted.items():
        assert results["cer"][label] == pytest.approx(by_split, abs=1e-12), label
        assert all(value > 1 for value in by_split.values()), (label, by_split)
    assert (trained / "run" / "onnx" / "tfspec.json").is_file()
    assert results["training"]["ctc"]["steps"] == results["training"]["framewise"]["steps"] == 3


def test_evaluate_rescores_the_run_on_a_split(trained, recounted, capsys):
    """``evaluate`` on a lines run prints the CER of each of its models on the split asked."""
    assert main(["evaluate", str(trained / "run"), "--split", "dev", "--threads", "1"]) == 0
    rows = {line.rsplit(maxsplit=1)[0]: line.rsplit(maxsplit=1)[1] for line in capsys.readouterr().out.splitlines()}
    assert {label: rows[label] for label in recounted} == {
        label: f"{100 * by_split['dev']:.2f}%" for label, by_split in recounted.items()}


def test_an_interrupted_run_resumes_to_the_weights_of_an_uninterrupted_one(trained, tmp_path, monkeypatch, capsys):
    """Ctrl-C (the stop flag raised before step 1 ends) saves step 1 and exits 130; --resume then
    trains both objectives to the same weights as a run never stopped (batches drawn per step,
    the dropout RNG and Adam's moments restored)."""
    from safetensors.numpy import load_file

    from tfspec.backends.torch.training import checkpoint, ctc as lines_training

    argv = ["train", str(trained / "spec.yaml"), "--data", str(trained / "data"), "--steps", "4", "--quiet",
            "--threads", "1"]
    assert main(argv + ["--out", str(tmp_path / "whole")]) == 0

    class Stopped:
        requested = True

    with monkeypatch.context() as patch:
        patch.setattr(lines_training, "stop_requests", lambda: (Stopped, lambda: None))
        assert main(argv + ["--out", str(tmp_path / "cut")]) == 130
    assert "ctc stopped at step 1; checkpoint saved" in capsys.readouterr().err
    assert [p.name for p in checkpoint.checkpoints(tmp_path / "cut" / "ctc")] == ["step-0000001"]
    assert main(argv + ["--out", str(tmp_path / "cut")]) == 2  # not without --resume
    assert main(argv + ["--out", str(tmp_path / "cut"), "--resume"]) == 0
    for objective in ("ctc", "framewise"):
        whole, cut = (load_file(checkpoint.checkpoints(tmp_path / run / objective)[-1] / "model.safetensors")
                      for run in ("whole", "cut"))
        assert whole.keys() == cut.keys() and all(np.array_equal(whole[k], cut[k]) for k in whole), objective


def test_transcribe_reads_png_and_npy_alike(trained, capsys, tmp_path):
    png = sorted((trained / "data" / "samples").glob("*.png"))[0]
    model = str(trained / "run" / "onnx")
    assert main(["transcribe", model, str(png)]) == 0
    from_png = capsys.readouterr().out.strip()
    frames = np.asarray(PIL.open(png), dtype=np.float32).T / 255
    np.save(tmp_path / "line.npy", frames)
    assert main(["transcribe", model, str(tmp_path / "line.npy"), "--beam", "4"]) == 0
    from_npy = capsys.readouterr().out.strip()
    assert set(from_png + from_npy) <= set("0123456789")
    from tfspec.backends.onnx import OnnxModel
    from tfspec.ctc import prefix_beam_search

    ort_model = OnnxModel(model, device="cpu")
    log_probs = ort_model.run("model", ["log_probs"], {"frames": frames[None], "lengths": np.array([len(frames)])})[0]
    assert from_png == best_path(log_probs[0])
    assert from_npy == spelled(prefix_beam_search(log_probs[0], 4, BLANK))


def hostile(tmp_path, name):
    path = tmp_path / name
    if name == "truncated.npy":
        np.save(path, np.zeros((5, 8), dtype=np.float32))
        path.write_bytes(path.read_bytes()[:-17])
    elif name == "pickled.npy":
        np.save(path, np.array([{"a": 1}, None], dtype=object), allow_pickle=True)
    elif name == "wide.npy":
        np.save(path, np.zeros((5, 9), dtype=np.float32))
    elif name == "nan.npy":
        np.save(path, np.full((5, 8), np.nan, dtype=np.float32))
    elif name == "text.npy":
        path.write_text("not an array")
    elif name == "not-an-image.png":
        path.write_bytes(pickle.dumps([1, 2, 3]))
    elif name == "tall.png":
        PIL.fromarray(np.zeros((9, 20), dtype=np.uint8)).save(path)
    elif name == "long.png":
        PIL.fromarray(np.zeros((8, 201), dtype=np.uint8)).save(path)
    return path


@pytest.mark.parametrize("name,needle", [
    ("truncated.npy", "not a readable .npy array"), ("pickled.npy", "not a readable .npy array"),
    ("wide.npy", "expected a numeric (frames, 8) array"), ("nan.npy", "NaN"), ("text.npy", "not a readable .npy"),
    ("not-an-image.png", "not a readable image"), ("tall.png", "8 pixels high"), ("long.png", "at most 200 wide"),
    ("missing.png", "No such file"),
])
def test_transcribe_refuses_bad_files_in_one_line(trained, tmp_path, capsys, name, needle):
    assert main(["transcribe", str(trained / "run" / "onnx"), str(hostile(tmp_path, name))]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and needle in err[0], err


def test_transcribe_refuses_a_model_that_is_not_ctc(tmp_path, capsys):
    assert main(["export", "tiny", "-o", str(tmp_path / "tiny"), "--no-check"]) == 0
    capsys.readouterr()
    assert main(["transcribe", str(tmp_path / "tiny"), str(tmp_path / "x.npy")]) == 2
    assert "not a CTC model reading frames" in capsys.readouterr().err


def test_train_refuses_a_token_spec_on_digit_lines(trained, tmp_path, capsys):
    assert main(["train", "tiny", "--data", str(trained / "data"), "--out", str(tmp_path / "r")]) == 2
    assert "spec with frames and a ctc head" in capsys.readouterr().err


def test_compile_and_report_take_the_shipped_example(cli):
    code, out, _ = cli("compile", "examples/ctc-digits.yaml", "--length", "9")
    assert code == 0 and "logits (2, 9, 11)" in out
    code, out, _ = cli("report", "examples/ctc-digits.yaml")
    assert code == 0 and "frame_projection" in out
