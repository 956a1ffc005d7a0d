"""Kinds say what they can do and callers ask them (issue 40): an op that mixes positions
across padding, or a position kind whose encoding follows the call's length, keeps prompts of
different lengths out of one batch (the reference for each refusal is the model itself: a
prompt's logits in a left-padded batch against the prompt alone); a score modifier names the
ops that apply it, so an attention kind lowering elsewhere refuses it."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from pydantic import ValidationError

from tfspec.backends.torch import TorchDecoder, build_module
from tfspec.errors import TfspecError
from tfspec.layers.attention import SCORE_MODIFIERS, CausalSelfAttention
from tfspec.layers.latent_attention import LatentAttention
from tfspec.search import SearchOptions, search
from tfspec.spec import Spec
from tests.test_latent_attention import mla_spec
from tests.test_masks_as_data import BASE, left_padded

PROMPTS = (5, 14)
MOE = {"kind": "moe", "experts": 4, "top_k": 1, "d_ff": 32}
LONGROPE = {"type": "longrope", "original_max_position_embeddings": 8, "short_factor": [1.0] * 4,
            "long_factor": [4.0] * 4}
MIXING = {
    "moe-capacity": {"decoder": {"layers": 2, "block": ["causal_self_attention", MOE | {"capacity": 2}]}},
    "longrope": {"positional": {"kind": "rotary", "max_len": 96, "scaling": LONGROPE}},
    "dynamic-ntk": {"positional": {"kind": "rotary", "max_len": 96, "scaling": {
        "type": "dynamic", "factor": 4.0, "original_max_position_embeddings": 8}}},
}
WISE = {"moe": {"decoder": {"layers": 2, "block": ["causal_self_attention", MOE]}},
        "yarn": {"positional": {"kind": "rotary", "max_len": 96, "scaling": {
            "type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8}}}}


def decoder_of(changes: dict) -> TorchDecoder:
    torch.manual_seed(0)
    model = build_module(Spec.model_validate(BASE | changes)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.3)
    return TorchDecoder(model)


def padding_drift(decoder: TorchDecoder) -> float:
    """The largest change padding makes to the shorter prompt's logits in a left-padded batch."""
    rng = np.random.default_rng(0)
    prompts = [rng.integers(4, 100, n) for n in PROMPTS]
    tokens, mask = left_padded(prompts, decoder.pad)
    with torch.no_grad():
        batch = decoder.model.run({"tgt": torch.from_numpy(tokens), "tgt_mask": torch.from_numpy(mask)})["logits"]
        alone = decoder.model(torch.from_numpy(prompts[0])[None])[0]
    return float((batch[0, -PROMPTS[0]:] - alone).abs().max())


@pytest.mark.parametrize("name", sorted(MIXING))
def test_kinds_that_mix_positions_refuse_ragged_batches(name):
    """MoE with capacity counts padding towards an expert's capacity; dynamic NTK and LongRoPE
    pick frequencies from the padded batch's length: the masks cannot hide either."""
    decoder = decoder_of(MIXING[name])
    assert padding_drift(decoder) > 1e-3  # why they are refused
    assert not decoder.model.graph.masks_padding("decoder") and not decoder.takes_masks
    tokens, mask = left_padded([np.arange(4, 4 + n) for n in PROMPTS], decoder.pad)
    with pytest.raises(TfspecError, match="decodes prompts of one length"):
        search(decoder, None, SearchOptions(max_extra=2, max_length=2), prefix=tokens, prefix_mask=mask)


@pytest.mark.parametrize("name", sorted(WISE))
def test_kinds_that_keep_positions_apart_batch_ragged(name):
    decoder = decoder_of(WISE[name])
    assert decoder.takes_masks
    assert padding_drift(decoder) < 1e-4


class TemperedLatent(LatentAttention):
    """Latent attention with a logit field it was never told about, as a new modifier adds one."""

    temperature: float | None = None


class TemperedCausal(CausalSelfAttention):
    temperature: float | None = None


def test_latent_attention_refuses_softcap_which_it_does_not_apply():
    with pytest.raises(ValidationError, match="latent_attention lowers to the IR op 'latent_attention', which "
                                              "does not apply softcap"):
        mla_spec(softcap=30.0)


def test_a_new_modifier_is_refused_where_its_op_does_not_apply_it(monkeypatch):
    """Latent attention asks each modifier, so one it has never heard of is refused, not ignored."""
    monkeypatch.setitem(SCORE_MODIFIERS, "temperature", frozenset({"attention"}))
    assert TemperedCausal(temperature=2.0).temperature == 2.0
    latent = {"kv_lora_rank": 8, "qk_nope_head_dim": 8, "qk_rope_head_dim": 4, "v_head_dim": 8}
    assert TemperedLatent(**latent).temperature is None
    with pytest.raises(ValidationError, match="does not apply temperature"):
        TemperedLatent(temperature=2.0, **latent)


def test_the_export_and_the_server_keep_length_dependent_positions_out_of_ragged_batches(tmp_path):
    """The step graph of a LongRoPE model takes no attention_mask, so the server's continuous
    batching (``scheduler.continuous``) and its ragged batches refuse it; a fixed scaling keeps both."""
    from tfspec.backends.onnx import OnnxModel, export
    from tfspec.serve.scheduler import continuous

    for name, ragged in (("longrope", False), ("yarn", True)):
        export(decoder_of((MIXING | WISE)[name]).model, tmp_path / name, parity=False)
        decoder = OnnxModel(tmp_path / name, device="cpu").decoder()
        assert decoder.takes_masks is ragged and continuous(decoder) is ragged
