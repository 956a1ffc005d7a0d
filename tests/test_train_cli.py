"""`tfspec train`, `average` and `evaluate` end to end on the shipped sample corpus."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import sacrebleu

ARGS = ["--steps", "12", "--batch-tokens", "600", "--warmup", "6", "--lr-scale", "2", "--save-every", "4",
        "--log-every", "1", "--threads", "1", "--quiet"]


def _losses(run):
    return [json.loads(line)["loss"] for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    from tfspec.cli import main

    run = tmp_path_factory.mktemp("train") / "run"
    assert main(["train", "tiny", "--out", str(run), *ARGS]) == 0
    return run


def test_train_writes_a_resumable_run(trained):
    names = sorted(p.name for p in trained.iterdir())
    assert {"checkpoints", "metrics.jsonl", "run.json", "tokenizer.model"} <= set(names)
    losses = _losses(trained)
    assert len(losses) == 12 and losses[-1] < losses[0]


def test_killed_run_resumes_to_the_same_losses(trained, tmp_path):
    """SIGKILL mid-run (no chance to save), then --resume from the last checkpoint."""
    run = tmp_path / "run"
    command = [sys.executable, "-m", "tfspec", "train", "tiny", "--out", str(run), *ARGS]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        if (run / "metrics.jsonl").is_file() and len(_losses(run)) >= 6:
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert len(_losses(run)) < 12, "the run finished before it could be killed"
    subprocess.run(command + ["--resume"], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    assert _losses(run) == _losses(trained)


def test_sigterm_saves_a_checkpoint_first(tmp_path):
    run = tmp_path / "run"
    command = [sys.executable, "-m", "tfspec", "train", "tiny", "--out", str(run), "--steps", "500",
               "--batch-tokens", "600", "--save-every", "1000", "--log-every", "1", "--threads", "1", "--quiet"]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    while proc.poll() is None and not ((run / "metrics.jsonl").is_file() and _losses(run)):
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "checkpoint saved" in err and "Traceback" not in err
    assert list((run / "checkpoints").glob("step-*"))


def held_out_pairs(run, n: int) -> list[tuple[str, str]]:
    """The first n test pairs of the corpus the run trained on (evaluate --limit n scores them)."""
    from tfspec.data import read_split

    return read_split(Path(json.loads((run / "run.json").read_text())["data"]), "test")[:n]


def searched_one_at_a_time(run, sources: list[str], beam: int, max_extra: int) -> list[str]:
    """The library's own beam search (§6.1: GNMT penalty 0.6) on the averaged weights, one
    unpadded source at a time, tokenised and detokenised by sentencepiece itself."""
    import sentencepiece

    from tfspec.backends.torch import TorchDecoder, build_module
    from tfspec.backends.torch.checkpoint import load_weights
    from tfspec.search import SearchOptions, search
    from tfspec.spec import spec_from_data

    spec = spec_from_data(json.loads((run / "run.json").read_text())["spec"], "run")
    load_weights(model := build_module(spec), run / "average.safetensors")
    decoder, sp = TorchDecoder(model), sentencepiece.SentencePieceProcessor(model_file=str(run / "tokenizer.model"))
    options = SearchOptions(beam=beam, alpha=0.6, max_extra=max_extra, max_length=spec.positional.max_len - 1)
    out = []
    for source in sources:
        ids = sp.encode(source)[:spec.positional.max_len - 1] + [spec.vocab.eos_id]
        out.append(sp.decode([t for t in search(decoder, np.array([ids]), options)[0] if t != decoder.eos]))
    return out


def test_average_and_evaluate_on_both_backends(cli, trained):
    """average writes the mean of the last checkpoints (by hand); evaluate's hypotheses are the
    library's search on those weights, and its BLEU and chrF are sacrebleu's on them."""
    from safetensors.numpy import load_file

    code, out, err = cli("average", trained, "--last", "3")
    assert code == 0 and "step-0000004, step-0000008, step-0000012" in out
    chosen = [load_file(trained / "checkpoints" / f"step-{s:07d}" / "model.safetensors") for s in (4, 8, 12)]
    averaged = load_file(trained / "average.safetensors")
    assert averaged.keys() == chosen[0].keys()
    for name, value in averaged.items():
        assert np.allclose(value, sum(c[name].astype(np.float64) for c in chosen) / 3, rtol=1e-6, atol=1e-7), name
    scores = {}
    for backend in ("torch", "onnx"):
        code, out, err = cli("evaluate", trained, "--backend", backend, "--limit", "40", "--beam", "2",
                             "--max-extra", "8", "--threads", "1", "--quiet")
        assert code == 0, err
        assert "BLEU" in out and "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp" in out
        scores[backend] = json.loads((trained / "eval" / f"test.{backend}.json").read_text())
    hyp = {b: (trained / "eval" / f"test.{b}.hyp").read_text() for b in scores}
    assert hyp["torch"] == hyp["onnx"] and hyp["torch"].strip()  # the same search, the same words
    pairs = held_out_pairs(trained, 40)
    hypotheses = hyp["torch"].splitlines()
    assert hypotheses == searched_one_at_a_time(trained, [s for s, _ in pairs], beam=2, max_extra=8)
    references = [[t for _, t in pairs]]
    for result in scores.values():
        assert result["bleu"] == round(sacrebleu.corpus_bleu(hypotheses, references).score, 2)
        assert result["chrf"] == round(sacrebleu.corpus_chrf(hypotheses, references).score, 2)
        assert result["sentences"] == 40 and result["weights"].endswith("average.safetensors")


def test_evaluate_exports_again_after_a_format_change(cli, trained):
    """A run's cached ONNX export written in an older export format is replaced, not refused."""
    exports = [p for p in (trained / "onnx").glob("*/tfspec.json") if "-int8" not in p.parent.name]
    if not exports:  # this test alone: export first
        assert cli("evaluate", trained, "--backend", "onnx", "--limit", "4", "--threads", "1", "--quiet")[0] == 0
        exports = [p for p in (trained / "onnx").glob("*/tfspec.json") if "-int8" not in p.parent.name]
    manifest = json.loads(exports[0].read_text())
    exports[0].write_text(json.dumps(manifest | {"format": manifest["format"] - 1}))
    code, _, err = cli("evaluate", trained, "--backend", "onnx", "--limit", "4", "--threads", "1", "--quiet")
    assert code == 0, err
    assert json.loads(exports[0].read_text())["format"] == manifest["format"]


def test_a_cached_export_without_the_static_graph_is_stale_for_cuda(tmp_path):
    """On CUDA evaluate decodes over the static step graph: an export cached without it is redone."""
    from tfspec.backends.onnx.runtime import FORMAT
    from tfspec.cli.train import _stale

    weights = tmp_path / "model.safetensors"
    weights.write_bytes(b"")
    manifest = tmp_path / "tfspec.json"
    manifest.write_text(json.dumps({"format": FORMAT, "graphs": {"decoder": "decoder.onnx"}}))
    assert not _stale(manifest, weights) and _stale(manifest, weights, static=True)
    manifest.write_text(json.dumps({"format": FORMAT, "graphs": {"decoder_static": "decoder_static.onnx"}}))
    assert not _stale(manifest, weights, static=True)
    manifest.write_text(json.dumps({"format": FORMAT, "graphs": 3}))
    assert _stale(manifest, weights, static=True)


def test_bad_runs_are_refused(cli, trained, tmp_path):
    code, _, err = cli("evaluate", tmp_path)
    assert code == 2 and "not a training run" in err
    code, _, err = cli("train", "tiny", "--out", trained, *ARGS)
    assert code == 2 and "--resume" in err
    code, _, err = cli("train", "tiny", "--out", tmp_path / "x", "--data", tmp_path / "nothing", *ARGS)
    assert code == 2 and "error:" in err and "Traceback" not in err


def test_int8_bleu_beside_float32(cli, trained):
    """`evaluate --backend onnx --int8` decodes with both graphs and records the difference."""
    code, out, err = cli("evaluate", trained, "--backend", "onnx", "--int8", "--limit", "40", "--beam", "2",
                         "--max-extra", "8", "--threads", "1", "--quiet")
    assert code == 0, err
    fp32, int8 = (json.loads((trained / "eval" / f"test.{b}.json").read_text()) for b in ("onnx", "onnx-int8"))
    assert f"int8 vs float32 on test: BLEU {int8['bleu']:.2f} vs {fp32['bleu']:.2f}" in out
    references = [[t for _, t in held_out_pairs(trained, 40)]]
    for backend, result in (("onnx", fp32), ("onnx-int8", int8)):  # sacrebleu's scores of what each wrote
        hypotheses = (trained / "eval" / f"test.{backend}.hyp").read_text().splitlines()
        assert result["bleu"] == round(sacrebleu.corpus_bleu(hypotheses, references).score, 2), backend
    assert fp32["weights"] == int8["weights"] and fp32["weights"].endswith(".safetensors")
    recorded = next((trained / "onnx").glob("*-int8/tfspec.json"))
    bleu = json.loads(recorded.read_text())["int8"]["bleu"]
    assert bleu["float32"] == fp32["bleu"] and bleu["int8"] == int8["bleu"] and bleu["sentences"] == 40


@pytest.mark.parametrize("change", [None, {"tokenizer": 5}, {"tokenizer": "/etc/hostname"}, {"data": 5},
                                    {"src": ["en"]}, {"classes": 5}],
                         ids=["a list", "tokenizer number", "tokenizer elsewhere", "data number", "src list",
                              "classes number"])
def test_forged_run_json_is_one_error_line(cli, trained, tmp_path, change):
    """run.json is data: each command that reads it names what is wrong, never a traceback and
    never a tokenizer read from outside the run."""
    meta = json.loads((trained / "run.json").read_text())
    (tmp_path / "run.json").write_text(json.dumps([meta] if change is None else meta | change))
    for command in (["evaluate", tmp_path, "--limit", "2"], ["average", tmp_path, "--last", "1"]):
        code, _, err = cli(*command)
        assert code == 2 and err.startswith(f"error: {tmp_path}/run.json: corrupt") and err.count("\n") == 1, err


def test_export_a_run_with_its_weights_and_tokenizer(cli, trained, tmp_path):
    """`tfspec export RUN`: the run's spec, its chosen weights (the average, else the newest
    checkpoint: PyTorch's logits on them are the export's) and the tokenizer its model reads,
    so `translate` reads and writes text; --format hf is refused in one line."""
    import onnxruntime as ort
    import torch

    from tfspec.backends.torch import build_module
    from tfspec.backends.torch.checkpoint import load_weights
    from tfspec.cli.models import run_spec, run_weights

    code, out, err = cli("export", trained, "-o", tmp_path / "onnx", "--no-check")
    assert code == 0 and f"weights: {run_weights(trained, None)}" in err
    assert "tokenizer: tokenizer.model, tokenizer.json" in out
    model = build_module(run_spec(trained)[0]).eval()
    load_weights(model, run_weights(trained, None))
    src, tgt = np.array([[5, 6, 7, 8, 2]]), np.array([[1, 9, 10]])
    with torch.no_grad():
        want = model(torch.from_numpy(src), torch.from_numpy(tgt)).numpy()
    session = ort.InferenceSession(str(tmp_path / "onnx" / "model.onnx"), providers=["CPUExecutionProvider"])
    got = session.run(["logits"], {"src": src, "tgt": tgt, "attention_mask": np.ones_like(src),
                                   "decoder_attention_mask": np.ones_like(tgt)})[0]
    assert np.abs(got - want).max() < 1e-4
    (tmp_path / "in.txt").write_text("Select the cell.\n", encoding="utf-8")
    code, out, _ = cli("translate", tmp_path / "onnx", tmp_path / "in.txt", "--max-extra", "8")
    assert code == 0 and out.strip() and not out.strip().replace(" ", "").isdigit()
    code, _, err = cli("export", trained, "-o", tmp_path / "hf", "--format", "hf")
    assert code == 2 and err.count("error:") == 1 and "--format hf" in err
