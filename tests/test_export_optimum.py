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


DECODER_SHAPE = dict(vocab_size=211, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=2, max_position_embeddings=64)
DECODERS = {"llama": lambda: transformers.LlamaConfig(**DECODER_SHAPE),
            "qwen2": lambda: transformers.Qwen2Config(**DECODER_SHAPE),
            "mistral": lambda: transformers.MistralConfig(**DECODER_SHAPE),
            # optimum-onnx 0.1.0's ORTModelForCausalLM sizes phi3's first pasts with num_attention_heads
            # (modeling_decoder.py), so a grouped phi3 (Phi-3-medium) fails in its loader, whoever exported it
            "phi3": lambda: transformers.Phi3Config(**{**DECODER_SHAPE, "num_key_value_heads": 4}, pad_token_id=0,
                                                    bos_token_id=1, eos_token_id=2),
            "gemma": lambda: transformers.GemmaConfig(**DECODER_SHAPE, head_dim=16),
            "gpt_neox": lambda: transformers.GPTNeoXConfig(**{k: v for k, v in DECODER_SHAPE.items()
                                                              if k != "num_key_value_heads"}),
            "falcon": lambda: transformers.FalconConfig(vocab_size=211, hidden_size=64, num_hidden_layers=2,
                                                        num_attention_heads=4, new_decoder_architecture=True,
                                                        num_kv_heads=2, bos_token_id=1, eos_token_id=2),
            "gpt2": lambda: transformers.GPT2Config(vocab_size=211, n_embd=64, n_layer=2, n_head=4, n_positions=64,
                                                    bos_token_id=1, eos_token_id=2)}
"""Small checkpoints of the decoder families issue 53 names."""


def require_transformers_js() -> None:
    """Skip where node or clients/node's transformers.js is missing (fail under TFSPEC_REQUIRE_JS=1, as CI sets)."""
    reason = ("node is not installed" if shutil.which("node") is None else
              None if (CLIENT / "node_modules" / "@huggingface" / "transformers").is_dir() else
              "clients/node/node_modules has no @huggingface/transformers: (cd clients/node && npm ci --ignore-scripts)")
    if reason and os.environ.get("TFSPEC_REQUIRE_JS") == "1":
        pytest.fail(f"TFSPEC_REQUIRE_JS=1 but {reason}")
    if reason:
        pytest.skip(reason)


def run_js(script: str, *args: str):
    """``script`` run by node in clients/node (where transformers.js is installed) with ``args``:
    the JSON its last line prints."""
    done = subprocess.run(["node", "--input-type=module", "-e", script, *map(str, args)], cwd=CLIENT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


@pytest.fixture(scope="module", params=list(DECODERS))
def exported(request, tmp_path_factory):
    """A random checkpoint of the family as `save_pretrained` writes it, and its optimum-layout export."""
    torch.manual_seed(0)
    config = DECODERS[request.param]()
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
    assert code == 2 and "--format optimum needs the config.json of a transformers family" in err, err
    assert err.startswith("error:") and len(err.splitlines()) == 1, err
    code, _, err = cli("export", "zoo/gpt2", "--format", "optimum", "--fused", "-o", tmp_path / "out")
    assert code == 2 and "--fused applies to --format onnx" in err, err


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
    require_transformers_js()
    checkpoint, out = exported
    prompts = [[5, 6, 7, 8, 9], [10, 11, 12, 13, 14]]
    answer = run_js(GENERATE_JS, str(out), json.dumps(prompts))
    reference = transformers.AutoModelForCausalLM.from_pretrained(checkpoint).eval()
    with torch.no_grad():
        theirs = reference.generate(torch.tensor(prompts), attention_mask=torch.ones(2, 5, dtype=torch.long),
                                    max_new_tokens=8, do_sample=False, pad_token_id=0).tolist()
    assert answer == theirs


ENCODER_CHECK = """\
import json, sys
import numpy as np, torch
import optimum.onnxruntime as classes
import transformers
export, checkpoint, ort_class, hf_class = sys.argv[1:5]
ours = getattr(classes, ort_class).from_pretrained(export)
ref = getattr(transformers, hf_class).from_pretrained(checkpoint).eval()
ids = torch.tensor(np.random.default_rng(0).integers(4, ref.config.vocab_size, (2, 7)))
mask = torch.ones_like(ids)
mask[1, 4:] = 0
with torch.no_grad():
    a, b = ours(input_ids=ids, attention_mask=mask), ref(input_ids=ids, attention_mask=mask)
diffs = {}
for name in ("logits", "start_logits", "end_logits", "last_hidden_state"):
    if getattr(b, name, None) is not None and name in a:
        x, y = a[name], getattr(b, name)
        keep = mask.bool() if x.dim() >= 2 and x.shape[1] == ids.shape[1] else torch.ones(len(ids), dtype=torch.bool)
        diffs[name] = float((x - y)[keep].abs().max())
print(json.dumps({"class": type(ours).__name__, "diffs": diffs}))
"""
ENCODERS = [("bert", "BertForSequenceClassification", "ORTModelForSequenceClassification"),
            ("bert", "BertForTokenClassification", "ORTModelForTokenClassification"),
            ("bert", "BertForQuestionAnswering", "ORTModelForQuestionAnswering"),
            ("bert", "BertForMaskedLM", "ORTModelForMaskedLM"),
            ("bert", "BertModel", "ORTModelForFeatureExtraction"),
            ("roberta", "RobertaForSequenceClassification", "ORTModelForSequenceClassification"),
            ("distilbert", "DistilBertForSequenceClassification", "ORTModelForSequenceClassification"),
            ("mpnet", "MPNetModel", "ORTModelForFeatureExtraction"),  # sentence-transformers' encoders
            ("xlm", "XLMForSequenceClassification", "ORTModelForSequenceClassification"),
            ("modernbert", "ModernBertForSequenceClassification", "ORTModelForSequenceClassification"),
            ("deberta-v2", "DebertaV2ForSequenceClassification", "ORTModelForSequenceClassification"),
            ("deberta-v2", "DebertaV2ForTokenClassification", "ORTModelForTokenClassification")]


@pytest.fixture(scope="module", params=ENCODERS, ids=lambda p: p[1])
def encoder(request, tmp_path_factory):
    """A random encoder checkpoint of one task class and its optimum-layout export."""
    family, architecture, ort_class = request.param
    torch.manual_seed(0)
    config = {"bert": transformers.BertConfig(vocab_size=211, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                              intermediate_size=96, max_position_embeddings=64, num_labels=2),
              "roberta": transformers.RobertaConfig(vocab_size=211, hidden_size=64, num_hidden_layers=2,
                                                    num_attention_heads=4, intermediate_size=96,
                                                    max_position_embeddings=70, num_labels=3),
              "distilbert": transformers.DistilBertConfig(vocab_size=211, dim=64, n_layers=2, n_heads=4, hidden_dim=96,
                                                          max_position_embeddings=64, num_labels=3),
              "mpnet": transformers.MPNetConfig(vocab_size=211, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                                intermediate_size=96, max_position_embeddings=70),
              "xlm": transformers.XLMConfig(vocab_size=211, emb_dim=64, n_layers=2, n_heads=4, max_position_embeddings=64,
                                            num_labels=3, pad_token_id=2),
              "modernbert": transformers.ModernBertConfig(vocab_size=211, hidden_size=64, num_hidden_layers=3,
                                                          num_attention_heads=4, intermediate_size=96,
                                                          max_position_embeddings=64, global_attn_every_n_layers=2,
                                                          local_attention=8, num_labels=3, pad_token_id=0,
                                                          bos_token_id=1, eos_token_id=2, cls_token_id=1,
                                                          sep_token_id=2),
              "deberta-v2": transformers.DebertaV2Config(vocab_size=211, hidden_size=64, num_hidden_layers=2,
                                                         num_attention_heads=4, intermediate_size=96,
                                                         max_position_embeddings=64, relative_attention=True,
                                                         position_buckets=16, pos_att_type=["p2c", "c2p"], share_att_key=True,
                                                         position_biased_input=False, num_labels=3)}[family]
    checkpoint = tmp_path_factory.mktemp(architecture)
    getattr(transformers, architecture)(config).save_pretrained(checkpoint)
    from tfspec.cli import main

    out = tmp_path_factory.mktemp(f"{architecture}-optimum") / "export"
    assert main(["export", str(checkpoint), "--format", "optimum", "-o", str(out)]) == 0
    return checkpoint, out, architecture, ort_class


@pytest.mark.skipif(not OPTIMUM.is_file(), reason=f"no optimum-onnx environment at {OPTIMUM} (README: References)")
def test_optimum_opens_encoder_exports_of_every_task_and_matches_transformers(encoder):
    checkpoint, out, architecture, ort_class = encoder
    done = subprocess.run([str(OPTIMUM), "-c", ENCODER_CHECK, str(out), str(checkpoint), ort_class, architecture],
                          capture_output=True, text=True, timeout=600, cwd=out.parent)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["class"] == ort_class and result["diffs"] and max(result["diffs"].values()) < 1e-4, result


SEQ2SEQ_CHECK = """\
import json, sys
import numpy as np, torch
from optimum.onnxruntime import ORTModelForSeq2SeqLM
from transformers import AutoModelForSeq2SeqLM
export, checkpoint, ids, keep = sys.argv[1:5]
ours = ORTModelForSeq2SeqLM.from_pretrained(export)
ref = AutoModelForSeq2SeqLM.from_pretrained(checkpoint).eval()
ids, mask = torch.tensor(json.loads(ids)), torch.tensor(json.loads(keep))
target = torch.cat([torch.full((len(ids), 1), ref.config.decoder_start_token_id), ids[:, :3]], 1)
with torch.no_grad():
    diff = float((ours(input_ids=ids, attention_mask=mask, decoder_input_ids=target).logits
                  - ref(input_ids=ids, attention_mask=mask, decoder_input_ids=target).logits).abs().max())
    searches = {beams: [m.generate(ids, attention_mask=mask, max_new_tokens=8, num_beams=beams, do_sample=False).tolist()
                        for m in (ours, ref)] for beams in (1, 3)}
print(json.dumps({"diff": diff, "class": type(ours).__name__, "searches": searches}))
"""
SEQ2SEQ_IDS = [[5, 6, 7, 8, 9, 10, 11], [12, 13, 14, 15, 1, 1, 1]]
SEQ2SEQ_KEEP = [[1] * 7, [1, 1, 1, 1, 0, 0, 0]]


@pytest.fixture(scope="module", params=["marian", "t5", "bart"])
def seq2seq(request, tmp_path_factory):
    """A random seq2seq checkpoint (weights perturbed off their init) and its optimum-layout export."""
    torch.manual_seed(0)
    shape = dict(d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
                 encoder_ffn_dim=96, decoder_ffn_dim=96, max_position_embeddings=64)
    model = {"marian": lambda: transformers.MarianMTModel(transformers.MarianConfig(
                 vocab_size=211, pad_token_id=210, decoder_start_token_id=210, eos_token_id=0, **shape)),
             "t5": lambda: transformers.T5ForConditionalGeneration(transformers.T5Config(
                 vocab_size=211, d_model=64, d_kv=16, d_ff=96, num_layers=2, num_heads=4, decoder_start_token_id=0,
                 pad_token_id=0, eos_token_id=1)),
             "bart": lambda: transformers.BartForConditionalGeneration(transformers.BartConfig(vocab_size=211, **shape))
             }[request.param]()
    with torch.no_grad():  # random init leaves near-uniform logits, where searches tie
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    checkpoint = tmp_path_factory.mktemp(request.param)
    model.save_pretrained(checkpoint)
    from tfspec.cli import main

    out = tmp_path_factory.mktemp(f"{request.param}-optimum") / "export"
    assert main(["export", str(checkpoint), "--format", "optimum", "-o", str(out)]) == 0
    return checkpoint, out


def test_seq2seq_layout_is_optimums_merged_decoder(seq2seq):
    checkpoint, out = seq2seq
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*")) == [
        "config.json", "generation_config.json", "onnx", "onnx/decoder_model_merged.onnx", "onnx/encoder_model.onnx"]
    assert json.loads((out / "generation_config.json").read_text()) == json.loads(
        (checkpoint / "generation_config.json").read_text())  # the checkpoint's own, handed on
    decoder = onnx.load(str(out / "onnx" / "decoder_model_merged.onnx"))
    inputs = [i.name for i in decoder.graph.input]
    assert inputs[:3] == ["input_ids", "encoder_attention_mask", "encoder_hidden_states"]
    assert "use_cache_branch" in inputs and inputs.index("past_key_values.0.decoder.key") < inputs.index(
        "past_key_values.0.encoder.key") < inputs.index("past_key_values.1.decoder.key")
    assert {o.name for o in decoder.graph.output} >= {"logits", "present.1.decoder.value", "present.1.encoder.key"}


@pytest.mark.skipif(not OPTIMUM.is_file(), reason=f"no optimum-onnx environment at {OPTIMUM} (README: References)")
def test_optimum_seq2seq_model_searches_as_transformers(seq2seq):
    checkpoint, out = seq2seq
    done = subprocess.run([str(OPTIMUM), "-c", SEQ2SEQ_CHECK, str(out), str(checkpoint), json.dumps(SEQ2SEQ_IDS),
                           json.dumps(SEQ2SEQ_KEEP)], capture_output=True, text=True, timeout=600, cwd=out.parent)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["class"] == "ORTModelForSeq2SeqLM" and result["diff"] < 1e-4, result
    for beams, (ours, theirs) in result["searches"].items():
        assert ours == theirs, (beams, result)


SEQ2SEQ_JS = """\
import { AutoModelForSeq2SeqLM, Tensor, env } from '@huggingface/transformers';
import path from 'node:path';
const [dir, ids, keep] = process.argv.slice(1);
env.allowRemoteModels = false;
env.localModelPath = path.dirname(dir) + '/';
const model = await AutoModelForSeq2SeqLM.from_pretrained(path.basename(dir), { dtype: 'fp32', device: 'cpu' });
const rows = JSON.parse(ids), mask = JSON.parse(keep), dims = [rows.length, rows[0].length];
const out = await model.generate({ input_ids: new Tensor('int64', BigInt64Array.from(rows.flat().map(BigInt)), dims),
  attention_mask: new Tensor('int64', BigInt64Array.from(mask.flat().map(BigInt)), dims), max_new_tokens: 8,
  do_sample: false });
console.log(JSON.stringify(out.tolist().map(row => row.map(Number))));
"""


def test_transformers_js_translates_as_transformers(seq2seq):
    require_transformers_js()
    checkpoint, out = seq2seq
    answer = run_js(SEQ2SEQ_JS, str(out), json.dumps(SEQ2SEQ_IDS), json.dumps(SEQ2SEQ_KEEP))
    reference = transformers.AutoModelForSeq2SeqLM.from_pretrained(checkpoint).eval()
    with torch.no_grad():
        theirs = reference.generate(torch.tensor(SEQ2SEQ_IDS), attention_mask=torch.tensor(SEQ2SEQ_KEEP),
                                    max_new_tokens=8, do_sample=False).tolist()
    assert answer == theirs


CLASSIFY_JS = """\
import { AutoModelForSequenceClassification, AutoModelForTokenClassification, Tensor, env } from '@huggingface/transformers';
import path from 'node:path';
const [dir, kind, ids, keep] = process.argv.slice(1);
env.allowRemoteModels = false;
env.localModelPath = path.dirname(dir) + '/';
const Class = kind === 'token' ? AutoModelForTokenClassification : AutoModelForSequenceClassification;
const model = await Class.from_pretrained(path.basename(dir), { dtype: 'fp32', device: 'cpu' });
const rows = JSON.parse(ids), mask = JSON.parse(keep), dims = [rows.length, rows[0].length];
const { logits } = await model({ input_ids: new Tensor('int64', BigInt64Array.from(rows.flat().map(BigInt)), dims),
                                  attention_mask: new Tensor('int64', BigInt64Array.from(mask.flat().map(BigInt)), dims),
                                  token_type_ids: new Tensor('int64', new BigInt64Array(dims[0] * dims[1]), dims) });
console.log(JSON.stringify(logits.tolist()));
"""


@pytest.mark.parametrize("architecture", ["BertForSequenceClassification", "BertForTokenClassification"])
def test_transformers_js_classifies_as_transformers_does(architecture, tmp_path):
    require_transformers_js()
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=211, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=96, max_position_embeddings=64, num_labels=3)
    reference = getattr(transformers, architecture)(config).eval()
    reference.save_pretrained(tmp_path / "bert")
    from tfspec.cli import main

    assert main(["export", str(tmp_path / "bert"), "--format", "optimum", "-o", str(tmp_path / "out")]) == 0
    ids = [[5, 6, 7, 8, 9, 10], [11, 12, 13, 14, 1, 1]]
    keep = [[1] * 6, [1, 1, 1, 1, 0, 0]]
    kind = "token" if "Token" in architecture else "sequence"
    answer = run_js(CLASSIFY_JS, str(tmp_path / "out"), kind, json.dumps(ids), json.dumps(keep))
    with torch.no_grad():
        theirs = reference(input_ids=torch.tensor(ids), attention_mask=torch.tensor(keep)).logits
    ours = torch.tensor(answer)
    real = torch.tensor(keep, dtype=torch.bool) if kind == "token" else torch.ones(2, dtype=torch.bool)
    assert float((ours - theirs)[real].abs().max()) < 1e-4


PIPELINE_JS = """\
import { pipeline, env } from '@huggingface/transformers';
import path from 'node:path';
const [dir, prompt] = process.argv.slice(1);
env.allowRemoteModels = false;
env.localModelPath = path.dirname(dir) + '/';
const generate = await pipeline('text-generation', path.basename(dir), { dtype: 'fp32' });
const [out] = await generate(prompt, { max_new_tokens: 6, do_sample: false, return_full_text: false });
console.log(JSON.stringify(out.generated_text));
"""


def test_transformers_js_pipeline_generates_text_from_the_checkpoints_tokenizer(tmp_path):
    """The whole path a web developer takes: a checkpoint with its tokenizer, `--format optimum`,
    then transformers.js's `pipeline("text-generation", dir)` on text: transformers' words."""
    require_transformers_js()
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import WhitespaceSplit

    words = {"<unk>": 0, "<s>": 1, "</s>": 2, **{f"w{i}": i for i in range(3, 211)}}
    backend = Tokenizer(WordLevel(words, unk_token="<unk>"))
    backend.pre_tokenizer = WhitespaceSplit()
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<s>", eos_token="</s>",
                                                     unk_token="<unk>")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=211, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                      bos_token_id=1, eos_token_id=2)
    reference = transformers.LlamaForCausalLM(config).eval()
    reference.save_pretrained(tmp_path / "llama")
    tokenizer.save_pretrained(tmp_path / "llama")
    from tfspec.cli import main

    assert main(["export", str(tmp_path / "llama"), "--format", "optimum", "-o", str(tmp_path / "web")]) == 0
    prompt = "w5 w6 w7"
    answer = run_js(PIPELINE_JS, str(tmp_path / "web"), prompt)
    ids = tokenizer(prompt, return_tensors="pt").input_ids
    with torch.no_grad():
        theirs = reference.generate(ids, max_new_tokens=6, do_sample=False, pad_token_id=0)[0, ids.shape[1]:]
    words = tokenizer.decode(theirs).split()
    assert len(words) == 6 and answer.split() == words


QUANTISED_JS = """\
import { AutoModelForCausalLM, Tensor, env } from '@huggingface/transformers';
import path from 'node:path';
const [dir, dtype, ids] = process.argv.slice(1);
env.allowRemoteModels = false;
env.localModelPath = path.dirname(dir) + '/';
const model = await AutoModelForCausalLM.from_pretrained(path.basename(dir), { dtype, device: 'cpu' });
const rows = JSON.parse(ids), dims = [rows.length, rows[0].length];
const input_ids = new Tensor('int64', BigInt64Array.from(rows.flat().map(BigInt)), dims);
const { logits } = await model({ input_ids, attention_mask: new Tensor('int64', BigInt64Array.from(rows.flat().map(() => 1n)), dims) });
console.log(JSON.stringify(logits.tolist()));
"""


@pytest.mark.parametrize("flag, dtype, name", [("--int8", "q8", "model_quantized.onnx"), ("--int4", "q4", "model_q4.onnx")])
def test_transformers_js_opens_the_quantised_graph_its_dtype_names(flag, dtype, name, tmp_path):
    """`--int8`/`--int4` add the graph transformers.js's `dtype: 'q8'`/`'q4'` loads: its logits are
    the checkpoint's within the quantisation's error (relative RMS), and not the float graph's."""
    require_transformers_js()
    torch.manual_seed(0)
    reference = transformers.LlamaForCausalLM(DECODERS["llama"]()).eval()
    reference.save_pretrained(tmp_path / "llama")
    from tfspec.cli import main

    assert main(["export", str(tmp_path / "llama"), "--format", "optimum", flag, "-o", str(tmp_path / "out")]) == 0
    assert sorted(p.name for p in (tmp_path / "out" / "onnx").iterdir()) == sorted(["model.onnx", name])
    ids = [[5, 6, 7, 8, 9, 10]]
    runs = {}
    for form in (dtype, "fp32"):
        runs[form] = torch.tensor(run_js(QUANTISED_JS, tmp_path / "out", form, json.dumps(ids)))
    with torch.no_grad():
        theirs = reference(torch.tensor(ids)).logits
    assert float((runs["fp32"] - theirs).abs().max()) < 1e-4
    error = float((runs[dtype] - theirs).norm() / theirs.norm())
    assert 0 < error < 0.25, error


IMAGE_CHECK = """\
import json, sys
import numpy as np, torch
import optimum.onnxruntime as classes
import transformers
export, checkpoint, ort_class, hf_class = sys.argv[1:5]
ours = getattr(classes, ort_class).from_pretrained(export)
ref = getattr(transformers, hf_class).from_pretrained(checkpoint).eval()
pixels = torch.tensor(np.random.default_rng(0).standard_normal((2, 3, 32, 32)), dtype=torch.float32)
with torch.no_grad():
    a, b = ours(pixel_values=pixels), ref(pixel_values=pixels)
names = [n for n in ("logits", "last_hidden_state", "pooler_output") if getattr(b, n, None) is not None and n in a]
print(json.dumps({"class": type(ours).__name__, "diffs": {n: float((a[n] - getattr(b, n)).abs().max()) for n in names}}))
"""
IMAGES = [("ViTForImageClassification", "ORTModelForImageClassification"),
          ("DeiTForImageClassificationWithTeacher", "ORTModelForImageClassification"),
          ("ViTModel", "ORTModelForFeatureExtraction")]


def image_checkpoint(architecture: str, directory: Path):
    """A random 32 x 32 image model of ``architecture`` (weights perturbed) with its image processor."""
    torch.manual_seed(0)
    config = getattr(transformers, "DeiTConfig" if architecture.startswith("DeiT") else "ViTConfig")(
        image_size=32, patch_size=8, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=96,
        num_labels=3)
    model = getattr(transformers, architecture)(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    model.save_pretrained(directory)
    transformers.ViTImageProcessor(size={"height": 32, "width": 32}).save_pretrained(directory)
    return model


@pytest.mark.skipif(not OPTIMUM.is_file(), reason=f"no optimum-onnx environment at {OPTIMUM} (README: References)")
@pytest.mark.parametrize("architecture, ort_class", IMAGES)
def test_optimum_opens_image_exports_and_matches_transformers(architecture, ort_class, tmp_path):
    image_checkpoint(architecture, tmp_path / "hf")
    from tfspec.cli import main

    assert main(["export", str(tmp_path / "hf"), "--format", "optimum", "-o", str(tmp_path / "out")]) == 0
    assert (tmp_path / "out" / "preprocessor_config.json").read_text() == \
        (tmp_path / "hf" / "preprocessor_config.json").read_text()
    done = subprocess.run([str(OPTIMUM), "-c", IMAGE_CHECK, str(tmp_path / "out"), str(tmp_path / "hf"), ort_class,
                           architecture], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["class"] == ort_class and result["diffs"] and max(result["diffs"].values()) < 1e-4, result


IMAGE_JS = """\
import { pipeline, env } from '@huggingface/transformers';
import path from 'node:path';
const [dir, image] = process.argv.slice(1);
env.allowRemoteModels = false;
env.localModelPath = path.dirname(dir) + '/';
const classify = await pipeline('image-classification', path.basename(dir), { dtype: 'fp32' });
console.log(JSON.stringify(await classify(image, { top_k: 3 })));
"""


def test_transformers_js_classifies_a_real_image_as_transformers_pipeline(tmp_path):
    """scikit-image's cat, at the model's 32 x 32 (so no resampler differs): transformers.js's
    `pipeline('image-classification')` on the export gives transformers' pipeline's labels and scores."""
    require_transformers_js()
    from PIL import Image
    from skimage import data

    image_checkpoint("ViTForImageClassification", tmp_path / "hf")
    Image.fromarray(data.chelsea()).resize((32, 32), Image.BILINEAR).save(tmp_path / "cat.png")
    from tfspec.cli import main

    assert main(["export", str(tmp_path / "hf"), "--format", "optimum", "-o", str(tmp_path / "out")]) == 0
    ours = run_js(IMAGE_JS, tmp_path / "out", tmp_path / "cat.png")
    theirs = transformers.pipeline("image-classification", model=str(tmp_path / "hf"))(str(tmp_path / "cat.png"),
                                                                                        top_k=3)
    assert [o["label"] for o in ours] == [t["label"] for t in theirs]
    assert max(abs(o["score"] - t["score"]) for o, t in zip(ours, theirs)) < 1e-4, (ours, theirs)


ZERO_SHOT_CHECK = """\
import json, sys
import numpy as np, torch
from optimum.onnxruntime import ORTModelForZeroShotImageClassification
import transformers
export, checkpoint, hf_class = sys.argv[1:4]
ours = ORTModelForZeroShotImageClassification.from_pretrained(export)
ref = getattr(transformers, hf_class).from_pretrained(checkpoint).eval()
ids = torch.tensor([[5, 6, 7, 98], [8, 9, 98, 1]])
mask = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]])
pixels = torch.tensor(np.random.default_rng(0).standard_normal((3, 3, 32, 32)), dtype=torch.float32)
with torch.no_grad():
    a, b = ours(input_ids=ids, attention_mask=mask, pixel_values=pixels), \\
        ref(input_ids=ids, attention_mask=mask, pixel_values=pixels)
names = ("logits_per_image", "logits_per_text", "text_embeds", "image_embeds")
print(json.dumps({"class": type(ours).__name__, "diffs": {n: float((a[n] - getattr(b, n)).abs().max()) for n in names}}))
"""


@pytest.mark.skipif(not OPTIMUM.is_file(), reason=f"no optimum-onnx environment at {OPTIMUM} (README: References)")
@pytest.mark.parametrize("family", ["CLIP", "Siglip"])
def test_optimum_zero_shot_classifier_opens_dual_encoder_exports(family, tmp_path):
    """CLIPModel and SiglipModel exported --format optimum: ORTModelForZeroShotImageClassification's
    scores and embeddings for 2 texts (one padded) against 3 images equal transformers'."""
    torch.manual_seed(0)
    text = dict(vocab_size=99, hidden_size=32, intermediate_size=37, num_hidden_layers=2, num_attention_heads=4,
                max_position_embeddings=20, pad_token_id=1)
    vision = dict(image_size=32, patch_size=8, hidden_size=32, intermediate_size=37, num_hidden_layers=2,
                  num_attention_heads=4)
    config = (transformers.CLIPConfig(text_config=text | dict(eos_token_id=98, bos_token_id=97), vision_config=vision,
                                      projection_dim=16) if family == "CLIP" else
              transformers.SiglipConfig(text_config=text | dict(projection_size=32), vision_config=vision))
    model = getattr(transformers, f"{family}Model")(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    model.save_pretrained(tmp_path / "hf")
    from tfspec.cli import main

    assert main(["export", str(tmp_path / "hf"), "--format", "optimum", "-o", str(tmp_path / "out")]) == 0
    done = subprocess.run([str(OPTIMUM), "-c", ZERO_SHOT_CHECK, str(tmp_path / "out"), str(tmp_path / "hf"),
                           f"{family}Model"], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["class"] == "ORTModelForZeroShotImageClassification" and max(result["diffs"].values()) < 1e-4, result
