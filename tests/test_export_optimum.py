"""`tfspec export --format optimum` (issue 53): the directory optimum's `ORTModelForCausalLM`
opens with `from_pretrained(dir)` and nothing else, and transformers.js (`@huggingface/transformers`
4.x under Node) from a local path, each checked against transformers on the checkpoint the
export came from: logits of a left-padded batch and greedy tokens. optimum-onnx pins
transformers < 4.58, so it lives in a virtual environment of its own (README: "References");
transformers.js is a development dependency of clients/node. Where either is missing its test
skips (transformers.js's fails under TFSPEC_REQUIRE_JS=1, as CI sets), the layout tests run."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import onnx
import pytest
import torch

transformers = pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[1]
CLIENT = ROOT / "clients" / "node"
OPTIMUM = Path(os.environ.get("TFSPEC_OPTIMUM_PYTHON", ROOT / ".venv-optimum" / "bin" / "python"))
CHECK = """\
import json, sys
import numpy as np, torch
from optimum.onnxruntime import ORTModelForCausalLM
from transformers import AutoModelForCausalLM
export, checkpoint = sys.argv[1:3]
ours = ORTModelForCausalLM.from_pretrained(export)
ref = AutoModelForCausalLM.from_pretrained(checkpoint).eval()
prompt = torch.tensor(np.random.default_rng(0).integers(4, ref.config.vocab_size, (2, 7)))
mask = torch.ones_like(prompt)
mask[1, :3] = 0  # the second prompt left-padded, as generate pads
with torch.no_grad():
    diff = float((ours(input_ids=prompt, attention_mask=mask).logits
                  - ref(input_ids=prompt, attention_mask=mask).logits)[mask.bool()].abs().max())
    greedy = [m.generate(prompt, attention_mask=mask, max_new_tokens=8, do_sample=False, pad_token_id=0).tolist()
              for m in (ours, ref)]
print(json.dumps({"diff": diff, "ours": greedy[0], "theirs": greedy[1], "class": type(ours).__name__}))
"""


@pytest.fixture(scope="module", params=["llama", "qwen2", "gpt2"])
def exported(request, tmp_path_factory):
    """A random checkpoint of the family as `save_pretrained` writes it, and its optimum-layout export."""
    torch.manual_seed(0)
    config = {"llama": transformers.LlamaConfig(vocab_size=211, hidden_size=64, intermediate_size=96,
                                                num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                                max_position_embeddings=64),
              "qwen2": transformers.Qwen2Config(vocab_size=211, hidden_size=64, intermediate_size=96,
                                                num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                                max_position_embeddings=64),
              "gpt2": transformers.GPT2Config(vocab_size=211, n_embd=64, n_layer=2, n_head=4, n_positions=64,
                                              bos_token_id=1, eos_token_id=2)
              }[request.param]
    checkpoint = tmp_path_factory.mktemp(request.param)
    transformers.AutoModelForCausalLM.from_config(config).save_pretrained(checkpoint)
    from tfspec.cli import main

    out = tmp_path_factory.mktemp(f"{request.param}-optimum") / "export"
    assert main(["export", str(checkpoint), "--format", "optimum", "-o", str(out)]) == 0
    return checkpoint, out


def test_the_layout_is_the_hugging_face_one(exported):
    checkpoint, out = exported
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*")) == [
        "config.json", "generation_config.json", "onnx", "onnx/model.onnx"]
    ours, theirs = (json.loads((d / "config.json").read_text()) for d in (out, checkpoint))
    assert {k: ours[k] for k in ("model_type", "architectures", "vocab_size")} == \
        {k: theirs[k] for k in ("model_type", "architectures", "vocab_size")}
    graph = onnx.load(str(out / "onnx" / "model.onnx")).graph
    layers = theirs.get("num_hidden_layers", theirs.get("n_layer"))
    pasts = [f"past_key_values.{i}.{r}" for i in range(layers) for r in ("key", "value")]
    assert sorted(i.name for i in graph.input) == sorted(["input_ids", "attention_mask", "position_ids", *pasts])
    assert sorted(o.name for o in graph.output) == sorted(["logits", *(p.replace("past_key_values", "present")
                                                                       for p in pasts)])


@pytest.mark.skipif(not OPTIMUM.is_file(), reason=f"no optimum-onnx environment at {OPTIMUM} (README: References)")
def test_optimum_opens_the_export_and_matches_transformers(exported):
    checkpoint, out = exported
    done = subprocess.run([str(OPTIMUM), "-c", CHECK, str(out), str(checkpoint)], capture_output=True, text=True,
                          timeout=600, cwd=out.parent)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["class"] == "ORTModelForCausalLM"
    assert result["diff"] < 1e-4 and result["ours"] == result["theirs"]


def test_specs_optimum_cannot_carry_are_refused_by_name(cli, tmp_path):
    code, _, err = cli("export", "tiny", "--format", "optimum", "-o", tmp_path / "out")
    assert code == 2 and "--format optimum" in err and "encoder-decoder" in err and len(err.splitlines()) == 1, err
    code, _, err = cli("export", "zoo/gpt2", "--format", "optimum", "--int8", "-o", tmp_path / "out")
    assert code == 2 and "--int8 applies to --format onnx" in err, err


GENERATE_JS = """\
import { AutoModelForCausalLM, Tensor, env } from '@huggingface/transformers';
import path from 'node:path';
const [dir, ids] = process.argv.slice(1);
env.allowRemoteModels = false;
env.localModelPath = path.dirname(dir) + '/';
const model = await AutoModelForCausalLM.from_pretrained(path.basename(dir), { dtype: 'fp32', device: 'cpu' });
const rows = JSON.parse(ids);
const dims = [rows.length, rows[0].length];
const input_ids = new Tensor('int64', BigInt64Array.from(rows.flat().map(BigInt)), dims);
const attention_mask = new Tensor('int64', BigInt64Array.from(rows.flat().map(() => 1n)), dims);
const out = await model.generate({ input_ids, attention_mask, max_new_tokens: 8, do_sample: false });
console.log(JSON.stringify(out.tolist().map(row => row.map(Number))));
"""


def test_transformers_js_generates_transformers_greedy_tokens(exported):
    reason = ("node is not installed" if shutil.which("node") is None else
              None if (CLIENT / "node_modules" / "@huggingface" / "transformers").is_dir() else
              "clients/node/node_modules has no @huggingface/transformers: (cd clients/node && npm ci --ignore-scripts)")
    if reason:
        if os.environ.get("TFSPEC_REQUIRE_JS") == "1":
            pytest.fail(f"TFSPEC_REQUIRE_JS=1 but {reason}")
        pytest.skip(reason)
    checkpoint, out = exported
    prompts = [[5, 6, 7, 8, 9], [10, 11, 12, 13, 14]]
    done = subprocess.run(["node", "--input-type=module", "-e", GENERATE_JS, str(out), json.dumps(prompts)],
                          cwd=CLIENT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    reference = transformers.AutoModelForCausalLM.from_pretrained(checkpoint).eval()
    with torch.no_grad():
        theirs = reference.generate(torch.tensor(prompts), attention_mask=torch.ones(2, 5, dtype=torch.long),
                                    max_new_tokens=8, do_sample=False, pad_token_id=0).tolist()
    assert json.loads(done.stdout.splitlines()[-1]) == theirs
