"""A new kind is one new file per place it lives (issue 40, docs/extending.md): each test writes
a throwaway module into the packages under a temporary name, runs tfspec in a fresh process
that finds it by scanning (``tfspec.registry.discover``), and removes it. Nothing else of the
tree changes, so passing shows that no list needs the new name. References: transformers'
GPT-2 for the family; for the layer kind and the score modifier, onnxruntime beside PyTorch,
and the same spec without the new part, to show that it is computed."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]

LAYER = '''
from typing import ClassVar, Literal
from tfspec.layers.base import Sublayer, register

@register
class Gain(Sublayer):
    """A learned gain per feature: y = x * g (position-wise)."""
    kind: Literal["{name}"] = "{name}"
    stem: ClassVar[str] = "gain"
    component: ClassVar[str] = "ffn"

    @property
    def mixes_positions(self) -> bool:
        return False

    def flops(self, s, dense=False):
        return {{"gain": s.n * s.d}}

    def lower(self, b, name, x):
        return b.op(name, "{name}", [x], params={{"gain": ((b.spec.d_model,), "normal:1.0")}}, layer=self)
'''
OP = '''
from tfspec.ir.ops import LayerOp, keeps_inputs, register

@register
class Gain(LayerOp):
    """The gain's IR op: FLOPs and position mixing are its layer kind's; its backward keeps the input."""
    name = "{name}"
    saved = staticmethod(keeps_inputs)
'''
TORCH = '''
from tfspec.backends.torch.registry import OpModule, lowering

@lowering("{name}")
class Gain(OpModule):
    def forward(self, ctx, x):
        return x * self.gain
'''
ONNX = '''
from tfspec.backends.onnx.lower import lowering

@lowering("{name}")
def gain(e, node, x):
    return e.b.op("Mul", x, e.b.param(node.params["gain"]))
'''
FAMILY = '''
from tfspec.interop.hf.family import register
from tfspec.interop.hf.gpt2 import GPT2

@register
class Throwaway(GPT2):
    """GPT-2 under another model_type: what a family module subclassing its parent states."""
    model_type = "{name}"
'''

MODIFIER = '''
from typing import Annotated
from pydantic import Field
from tfspec.modifiers import ScoreModifier, register

@register
class Clamp(ScoreModifier):
    """Scores clamped to [-c, c]."""
    field = "{name}"
    annotation = Annotated[float, Field(gt=0)] | None
    description = "Scores clamped to [-c, c]; None: no clamp."
'''
MODIFIER_TORCH = '''
from tfspec.backends.torch.modifiers import score_modifier

@score_modifier("{name}")
def clamp(c):
    return lambda scores: scores.clamp(-c, c)
'''
MODIFIER_ONNX = '''
from tfspec.backends.onnx.lower.modifiers import score_modifier

@score_modifier("{name}")
def clamp(c):
    return lambda b, scores: b.op("Max", b.op("Min", scores, b.const(float(c))), b.const(-float(c)))
'''

POSITION = '''
from pydantic import Field
from tfspec.positions import PositionKind, register
from tfspec.spec.base import field_error

@register
class Slope(PositionKind):
    """A learned slope per head times the distance |i - j|, clipped at reach, off the logits."""
    name, order, summary = "{name}", 100, "a learned slope per head times the clipped distance"
    in_attention = True
    fields = {{"reach": (int, Field(8, ge=1, description="Distances from reach on share one bias."))}}

    @classmethod
    def check(cls, positional):
        if positional.reach > positional.max_len:
            raise field_error("reach", f"reach ({{positional.reach}}) must be at most max_len ({{positional.max_len}})")

    @classmethod
    def attention_params(cls, b, name, layer):
        return {{"distance_slopes": ((layer.heads,), "ones")}}

    @classmethod
    def attention_flops(cls, s, positions):
        return {{"distance_slopes": s.n * s.n * s.h}}
'''
POSITION_TORCH = '''
import torch
from tfspec.backends.torch.scores import score_term

@score_term("{name}")
class Slope:
    def __init__(self, node):
        self.reach = node.attrs["positions"]["reach"]

    def __call__(self, ctx, module, q, k):
        lq, lk = q.shape[2], k.shape[2]
        queries = torch.arange(lk - lq, lk, device=q.device)[:, None]
        distance = (torch.arange(lk, device=q.device)[None, :] - queries).abs().clamp(max=self.reach)
        return (-module.distance_slopes[:, None, None] * distance)[None]
'''
POSITION_ONNX = '''
import numpy as np
from tfspec.backends.onnx.lower.scores import score_term

@score_term("{name}")
def slope(e, node, q, k):
    b = e.b
    rows, cols = e.grid(node.shape[1], node.attrs["kv_seq"], q, k)
    reach = b.const(np.int64(node.attrs["positions"]["reach"]))
    distance = b.op("Cast", b.op("Min", b.op("Abs", b.op("Sub", cols, rows)), reach), to=b.elem_type)
    slopes = b.op("Reshape", b.param(node.params["distance_slopes"]), b.ints(1, -1, 1, 1))
    return b.op("Neg", b.op("Mul", slopes, distance))
'''


@contextmanager
def modules(files: dict[str, str]):
    """Write each ``path -> source`` into the tree for the duration, then remove it."""
    paths = [ROOT / path for path in files]
    try:
        for path, source in zip(paths, files.values()):
            path.write_text(source, encoding="utf-8")
        yield
    finally:
        for path in paths:
            path.unlink(missing_ok=True)


def run(script: str, *args: str) -> str:
    done = subprocess.run([sys.executable, "-c", script, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


LAYER_RUN = '''
import sys, numpy as np, torch
from tfspec.backends.onnx import OnnxModel, export
from tfspec.backends.torch import build_module
from tfspec.spec import Spec
name, out = sys.argv[1], sys.argv[2]
spec = Spec.model_validate({"name": "m", "family": "decoder-only", "vocab": 50, "d_model": 16, "heads": 2,
                            "d_ff": 32, "dropout": 0.0, "positional": {"kind": "rotary", "max_len": 32},
                            "decoder": {"layers": 2, "block": ["causal_self_attention", {"kind": name}, "ffn"]}})
torch.manual_seed(0)
model = build_module(spec).eval()
tokens = torch.randint(4, 50, (2, 7))
gains = [p for n, p in model.named_parameters() if n.endswith(".gain")]
with torch.no_grad():
    ours = model(tokens).numpy()
    export(model, out, parity=False)
    for gain in gains:
        gain.mul_(2.0)
    doubled = model(tokens).numpy()
onnx = OnnxModel(out, device="cpu").logits(tgt=tokens.numpy())
np.savez(out + "/logits.npz", torch=ours, onnx=onnx, doubled=doubled, gains=len(gains),
         takes_masks=model.graph.masks_padding("decoder"))
'''


def test_a_layer_kind_is_four_new_files(tmp_path):
    """The kind, the IR op it lowers to, and the op's lowering in each backend."""
    name = f"gain_{uuid.uuid4().hex[:8]}"
    with modules({f"tfspec/layers/zz_{name}.py": LAYER.format(name=name),
                  f"tfspec/ir/ops/zz_{name}.py": OP.format(name=name),
                  f"backends/torch/zz_{name}.py": TORCH.format(name=name),
                  f"backends/onnx/lower/zz_{name}.py": ONNX.format(name=name)}):
        run(LAYER_RUN, name, str(tmp_path / "onnx"))
    found = np.load(tmp_path / "onnx" / "logits.npz")
    assert found["gains"] == 2  # one per layer, each a parameter of the new kind
    assert np.abs(found["doubled"] - found["torch"]).max() > 1e-2  # the layer is computed, not skipped
    np.testing.assert_allclose(found["onnx"], found["torch"], atol=1e-4, rtol=0)
    assert found["takes_masks"]  # it said it keeps positions apart, and batching asked it


FAMILY_RUN = '''
import sys, numpy as np, torch
from tfspec.backends.torch import build_module
from tfspec.backends.torch.checkpoint import load_weights
from tfspec.interop.hf import import_checkpoint
from tfspec.spec import load_spec
directory, out, tokens = sys.argv[1], sys.argv[2], np.load(sys.argv[3])
import_checkpoint(directory, out, progress=False)
model = build_module(load_spec(out)).eval()
load_weights(model, out + "/model.safetensors")
tokens = torch.from_numpy(tokens)
with torch.no_grad():  # every token real, the pad id included
    logits = model.run({"tgt": tokens, "tgt_mask": torch.ones_like(tokens, dtype=bool)})["logits"]
np.save(out + "/logits.npy", logits.numpy())
'''


def test_a_family_is_one_new_file(tmp_path):
    """A GPT-2 checkpoint whose config.json names a model_type only the new module knows."""
    from tests.hf_checkpoints import reference, save_checkpoint

    save_checkpoint("gpt2", tmp_path / "hf")
    name = f"throwaway_{uuid.uuid4().hex[:8]}"
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    (tmp_path / "hf" / "config.json").write_text(json.dumps(config | {"model_type": name}))
    tokens = torch.randint(0, 100, (2, 9), generator=torch.Generator().manual_seed(0))
    np.save(tmp_path / "tokens.npy", tokens.numpy())
    with modules({f"tfspec/interop/hf/zz_{name}.py": FAMILY.format(name=name)}):
        run(FAMILY_RUN, str(tmp_path / "hf"), str(tmp_path / "ours"), str(tmp_path / "tokens.npy"))
    config["model_type"] = "gpt2"  # transformers loads it as what it is
    (tmp_path / "hf" / "config.json").write_text(json.dumps(config))
    with torch.no_grad():
        want = reference(tmp_path / "hf", "gpt2")(input_ids=tokens).logits.numpy()
    np.testing.assert_allclose(np.load(tmp_path / "ours" / "logits.npy"), want, atol=1e-4, rtol=0)


MODIFIER_RUN = '''
import json, sys, numpy as np, torch
from pydantic import ValidationError
from tfspec.backends.onnx import OnnxModel, export
from tfspec.backends.torch import build_module
from tfspec.spec import Spec
name, out = sys.argv[1], sys.argv[2]

def spec(attention):
    return Spec.model_validate({"name": "m", "family": "decoder-only", "vocab": 50, "d_model": 16, "heads": 2,
                                "d_ff": 32, "dropout": 0.0, "positional": {"kind": "rotary", "max_len": 32},
                                "decoder": {"layers": 2, "block": [attention, "ffn"]}})

tokens = torch.randint(4, 50, (2, 7))
logits = {}
for key, attention in (("clamped", {"kind": "causal_self_attention", name: 0.05}),
                       ("plain", {"kind": "causal_self_attention"})):
    torch.manual_seed(0)
    model = build_module(spec(attention)).eval()
    with torch.no_grad():
        logits[key] = model(tokens).numpy()
    if key == "clamped":
        export(model, out, parity=False)
try:  # the field's own bounds, as its module declares them
    spec({"kind": "causal_self_attention", name: -1.0})
    refused = ""
except ValidationError as error:
    refused = str(error)
listed = name in json.dumps(Spec.model_json_schema())
onnx = OnnxModel(out, device="cpu").logits(tgt=tokens.numpy())
np.savez(out + "/logits.npz", onnx=onnx, listed=listed, refused=refused, **logits)
'''


def test_a_score_modifier_is_three_new_files(tmp_path):
    """A clamp of the scores: a field of every attention kind, listed by the schema, computed
    alike by both backends, and changing the logits against the same spec without it."""
    name = f"clamp_{uuid.uuid4().hex[:8]}"
    with modules({f"tfspec/modifiers/zz_{name}.py": MODIFIER.format(name=name),
                  f"backends/torch/modifiers/zz_{name}.py": MODIFIER_TORCH.format(name=name),
                  f"backends/onnx/lower/modifiers/zz_{name}.py": MODIFIER_ONNX.format(name=name)}):
        run(MODIFIER_RUN, name, str(tmp_path / "onnx"))
    found = np.load(tmp_path / "onnx" / "logits.npz")
    assert found["listed"]  # tfspec schema shows the field
    assert "greater than 0" in str(found["refused"])  # and validates it
    assert np.abs(found["clamped"] - found["plain"]).max() > 1e-3  # the clamp is applied, not skipped
    np.testing.assert_allclose(found["onnx"], found["clamped"], atol=1e-4, rtol=0)


POSITION_RUN = '''
import sys, numpy as np, torch
from pydantic import ValidationError
from tfspec import build_graph
from tfspec.analysis.flops import op_flops
from tfspec.backends.onnx import OnnxModel, export
from tfspec.backends.torch import build_module
from tfspec.spec import Spec
name, out = sys.argv[1], sys.argv[2]

def spec(positional):
    return Spec.model_validate({"name": "m", "family": "decoder-only", "vocab": 50, "d_model": 16, "heads": 2,
                                "d_ff": 32, "dropout": 0.0, "positional": positional,
                                "decoder": {"layers": 2, "block": ["causal_self_attention", "ffn"]}})

def refusal(positional):
    try:
        spec(positional)
    except ValidationError as error:
        return str(error)
    return ""

s = spec({"kind": name, "max_len": 32, "reach": 3})
attention = next(node for node in build_graph(s).nodes() if node.op == "attention")
torch.manual_seed(0)
model = build_module(s).eval()
tokens = torch.randint(4, 50, (2, 7))
slopes = [p for n, p in model.named_parameters() if n.endswith(".distance_slopes")]
with torch.no_grad():
    ours = model(tokens).numpy()
    export(model, out, parity=False)
    for p in slopes:
        p.zero_()
    flat = model(tokens).numpy()
onnx = OnnxModel(out, device="cpu").logits(tgt=tokens.numpy())
np.savez(out + "/logits.npz", torch=ours, onnx=onnx, flat=flat, slopes=len(slopes),
         flops="distance_slopes" in op_flops(attention), cache=s.positional.reads_cache_indices,
         foreign=refusal({"kind": "rotary", "reach": 3}), far=refusal({"kind": name, "max_len": 32, "reach": 40}))
'''


def test_a_position_kind_is_three_new_files(tmp_path):
    """A learned slope per head times the clipped distance (a learned ALiBi): a ``kind`` value
    with a field and a check of its own, a parameter of attention, a FLOP term, a score term in
    both backends alike, changing the logits; capabilities left at their safe defaults."""
    name = f"slope_{uuid.uuid4().hex[:8]}"
    with modules({f"tfspec/positions/zz_{name}.py": POSITION.format(name=name),
                  f"backends/torch/scores/zz_{name}.py": POSITION_TORCH.format(name=name),
                  f"backends/onnx/lower/scores/zz_{name}.py": POSITION_ONNX.format(name=name)}):
        run(POSITION_RUN, name, str(tmp_path / "onnx"))
    found = np.load(tmp_path / "onnx" / "logits.npz")
    assert found["slopes"] == 2 and found["flops"]  # one table per layer, its cost counted
    assert found["cache"]  # it said nothing, so genai export assumes the safe answer
    assert f"reach shapes {name} positions, but kind is rotary" in str(found["foreign"])
    assert "reach (40) must be at most max_len (32)" in str(found["far"])
    assert np.abs(found["flat"] - found["torch"]).max() > 1e-3  # the bias is computed, not skipped
    np.testing.assert_allclose(found["onnx"], found["torch"], atol=1e-4, rtol=0)
