"""The emitted base-shaped encoder-decoder against torch.nn.Transformer with the same weights."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from tfspec import load_spec
from tfspec.backends.torch import build_module

PAD = 0


def paper_sinusoids(length: int, d: int) -> torch.Tensor:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...), straight from §3.5."""
    pe = torch.zeros(length, d, dtype=torch.float64)
    for pos in range(length):
        for i in range(0, d, 2):
            pe[pos, i] = math.sin(pos / 10000 ** (i / d))
            pe[pos, i + 1] = math.cos(pos / 10000 ** (i / d))
    return pe.float()


@torch.no_grad()
def copy_weights(model, ref, layers: int, final_norm: bool) -> None:
    for i in range(layers):
        ours, theirs = model.get_submodule(f"encoder.layers.{i}"), ref.encoder.layers[i]
        _copy_self_attn(ours.self_attn, theirs.self_attn)
        _copy_ffn(ours.ffn, theirs)
        _copy_norm(ours.self_attn_norm, theirs.norm1)
        _copy_norm(ours.ffn_norm, theirs.norm2)
        ours, theirs = model.get_submodule(f"decoder.layers.{i}"), ref.decoder.layers[i]
        _copy_self_attn(ours.self_attn, theirs.self_attn)
        theirs.multihead_attn.in_proj_weight.copy_(torch.cat([ours.cross_attn.w_q, ours.cross_attn.w_kv]))
        theirs.multihead_attn.in_proj_bias.copy_(torch.cat([ours.cross_attn.b_q, ours.cross_attn.b_kv]))
        theirs.multihead_attn.out_proj.weight.copy_(ours.cross_attn.w_o)
        theirs.multihead_attn.out_proj.bias.copy_(ours.cross_attn.b_o)
        _copy_ffn(ours.ffn, theirs)
        for n, name in enumerate(["self_attn_norm", "cross_attn_norm", "ffn_norm"], start=1):
            _copy_norm(getattr(ours, name), getattr(theirs, f"norm{n}"))
    if final_norm:
        _copy_norm(model.encoder.norm, ref.encoder.norm)
        _copy_norm(model.decoder.norm, ref.decoder.norm)
    else:  # the paper's post-norm stacks end without one; nn.Transformer always adds it
        ref.encoder.norm = torch.nn.Identity()
        ref.decoder.norm = torch.nn.Identity()


def _copy_self_attn(ours, theirs):
    theirs.in_proj_weight.copy_(ours.w_qkv)
    theirs.in_proj_bias.copy_(ours.b_qkv)
    theirs.out_proj.weight.copy_(ours.w_o)
    theirs.out_proj.bias.copy_(ours.b_o)


def _copy_ffn(ours, theirs):
    theirs.linear1.weight.copy_(ours.w_1)
    theirs.linear1.bias.copy_(ours.b_1)
    theirs.linear2.weight.copy_(ours.w_2)
    theirs.linear2.bias.copy_(ours.b_2)


def _copy_norm(ours, theirs):
    theirs.weight.copy_(ours.weight)
    theirs.bias.copy_(ours.bias)


@pytest.mark.parametrize("final_norm", [False, True])
def test_base_shape_matches_nn_transformer(write_spec, final_norm):
    path = write_spec(f"""
        extends: base
        vocab: {{size: 1000}}
        dropout: 0.0
        final_norm: {str(final_norm).lower()}
    """)
    spec = load_spec(path)
    assert (spec.d_model, spec.heads, spec.d_ff, spec.encoder.num_layers, spec.norm) == (512, 8, 2048, 6, "post")
    torch.manual_seed(0)
    model = build_module(spec).eval()
    ref = torch.nn.Transformer(d_model=512, nhead=8, num_encoder_layers=6, num_decoder_layers=6,
                               dim_feedforward=2048, dropout=0.0, batch_first=True).eval()
    copy_weights(model, ref, 6, final_norm)

    src = torch.randint(4, 1000, (3, 11))
    tgt = torch.randint(4, 1000, (3, 9))
    src[1, 7:] = PAD
    src[2, 4:] = PAD
    tgt[0, 6:] = PAD
    tgt[2, 3:] = PAD
    with torch.no_grad():
        ours = model(src, tgt)
        emb = model.get_parameter("encoder.embed.weight")
        pe = paper_sinusoids(11, 512)
        theirs = ref(F.embedding(src, emb) * math.sqrt(512) + pe[:11], F.embedding(tgt, emb) * math.sqrt(512) + pe[:9],
                     tgt_mask=torch.nn.Transformer.generate_square_subsequent_mask(9, dtype=torch.bool),
                     src_key_padding_mask=src == PAD, tgt_key_padding_mask=tgt == PAD,
                     memory_key_padding_mask=src == PAD, tgt_is_causal=True)
        theirs = F.linear(theirs, emb)  # the pre-softmax projection shares the embedding (§3.4)
    real = tgt != PAD
    diff = (ours[real] - theirs[real]).abs().max().item()
    print(f"max |tfspec - nn.Transformer| = {diff:.2e}")
    assert diff <= 1e-5


def test_pre_norm_encoder_matches_norm_first_layers(write_spec):
    """Pre-norm with the final norm equals nn.TransformerEncoder(norm_first=True) + LayerNorm, with
    a norm epsilon (0.1) far from the default, so that one ignored would show."""
    path = write_spec("""
        family: encoder-only
        vocab: 500
        d_model: 64
        heads: 4
        d_ff: 128
        dropout: 0.0
        norm: pre
        norm_eps: 0.1
        encoder: {layers: 3, block: [self_attention, ffn]}
    """)
    torch.manual_seed(0)
    model = build_module(load_spec(path)).eval()
    layer = torch.nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True, norm_first=True,
                                             layer_norm_eps=0.1)
    ref = torch.nn.TransformerEncoder(layer, 3, norm=torch.nn.LayerNorm(64, eps=0.1), enable_nested_tensor=False).eval()
    with torch.no_grad():
        for i in range(3):
            ours, theirs = model.get_submodule(f"encoder.layers.{i}"), ref.layers[i]
            _copy_self_attn(ours.self_attn, theirs.self_attn)
            _copy_ffn(ours.ffn, theirs)
            _copy_norm(ours.self_attn_norm, theirs.norm1)
            _copy_norm(ours.ffn_norm, theirs.norm2)
        _copy_norm(model.encoder.norm, ref.norm)
        tokens = torch.randint(4, 500, (2, 13))
        tokens[1, 9:] = PAD
        emb = model.get_parameter("encoder.embed.weight")
        theirs = F.linear(ref(F.embedding(tokens, emb) * 8.0 + paper_sinusoids(13, 64),
                              src_key_padding_mask=tokens == PAD), emb)
        ours = model(tokens)
    real = tokens != PAD
    assert (ours[real] - theirs[real]).abs().max().item() <= 1e-5
