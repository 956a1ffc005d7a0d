"""One position limit (issue 40): the longest sequence, its last token included, is the spec's
``Positional.limit`` on every path. The Python search (PyTorch and the ONNX step graph),
generate.onnx and the JavaScript client, which reads ``position_limit`` from tfspec.json, stop
a long generation at the same token; each path used to count it its own way (generate.onnx
allowed one token more than the Python search)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import torch

from tfspec.backends.onnx import OnnxModel, export
from tfspec.backends.torch import TorchDecoder, build_module
from tfspec.errors import TfspecError
from tfspec.search import SearchOptions, search
from tfspec.spec import Spec
from tests.test_masks_as_data import BASE

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 12
PROMPT = [17, 23, 42, 8]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    directory = tmp_path_factory.mktemp("limit")
    torch.manual_seed(0)
    model = build_module(Spec.model_validate(BASE | {"positional": {"kind": "rotary", "max_len": LIMIT}})).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.3)
    export(model, directory, parity=False, generate=True)
    return model, directory


def generate_onnx(directory: Path, feeds: dict) -> list[int]:
    session = ort.InferenceSession(str(directory / "generate.onnx"), providers=["CPUExecutionProvider"])
    names = {i.name for i in session.get_inputs()}
    feeds = {k: np.asarray(v, np.float32 if k == "length_penalty" else np.int64)
             for k, v in feeds.items() if k in names}
    sequences, _, lengths = session.run(None, feeds)
    return sequences[0, :lengths[0]].tolist()


def test_the_python_search_and_generate_onnx_stop_at_the_limit(exported):
    model, directory = exported
    bos = model.graph.spec.vocab.bos_id
    options = SearchOptions(beam=1, max_extra=100, max_length=100, min_length=100)  # never an early end
    prefix = np.array([[bos, *PROMPT]])
    ours = search(TorchDecoder(model), None, options, prefix=prefix)[0]
    assert len(ours) == LIMIT - len(PROMPT) - 1  # bos, the prompt and the new tokens fill the positions
    assert search(OnnxModel(directory, device="cpu").decoder(), None, options, prefix=prefix)[0] == ours
    assert generate_onnx(directory, {"input_ids": [PROMPT], "attention_mask": [[1] * len(PROMPT)],
                                     "max_length": 100, "num_beams": 1,
                                     "length_penalty": 1.0, "min_length": 100, "max_extra": 100}) == ours
    assert json.loads((directory / "tfspec.json").read_text())["position_limit"] == LIMIT


def test_a_prompt_that_fills_the_positions_is_refused(exported):
    model, _ = exported
    with pytest.raises(TfspecError, match=f"fills the model's {LIMIT} positions"):
        search(TorchDecoder(model), None, SearchOptions(beam=1), prefix=np.arange(1, LIMIT + 1)[None])


NODE = """
import { readFileSync } from "node:fs";
import { Translator } from "%s";
const manifest = JSON.parse(readFileSync(process.argv[2], "utf8"));
class Tensor { constructor(type, data, dims) { Object.assign(this, { type, data, dims }); } }
const fed = {};
const session = {
  inputNames: JSON.parse(process.argv[3]),
  run: async (feeds) => {
    for (const [k, t] of Object.entries(feeds)) fed[k] = Array.from(t.data, Number);
    return { sequences: { dims: [1, 0], data: new BigInt64Array(0) }, sequences_lengths: { data: [0n] } };
  },
};
const translator = new Translator({ manifest, session, Tensor });
await translator.generate([JSON.parse(process.argv[4])], { beam: 1, alpha: 1.0, maxExtra: 100 });
console.log(JSON.stringify({ limit: translator.limit, fed }));
"""


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_the_javascript_client_feeds_what_the_python_search_gives(exported, tmp_path):
    """The client's feeds (recorded by a stand-in session), run through generate.onnx by
    onnxruntime here, give the Python search's tokens with the client's options."""
    model, directory = exported
    script = tmp_path / "feeds.mjs"
    script.write_text(NODE % (ROOT / "clients" / "lib" / "translator.mjs").as_uri())
    session = ort.InferenceSession(str(directory / "generate.onnx"), providers=["CPUExecutionProvider"])
    names = json.dumps([i.name for i in session.get_inputs()])
    done = subprocess.run(["node", str(script), str(directory / "tfspec.json"), names, json.dumps(PROMPT)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found["limit"] == LIMIT
    feeds = {k: v if k in ("input_ids", "attention_mask") else v[0] for k, v in found["fed"].items()}
    feeds["input_ids"] = [feeds["input_ids"]]
    if "attention_mask" in feeds:
        feeds["attention_mask"] = [feeds["attention_mask"]]
    options = SearchOptions(beam=1, max_extra=100, max_length=feeds["max_length"], min_length=0)
    bos = model.graph.spec.vocab.bos_id
    assert generate_onnx(directory, feeds) == search(TorchDecoder(model), None, options,
                                                     prefix=np.array([[bos, *PROMPT]]))[0]
