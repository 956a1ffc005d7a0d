"""Memory tokens (``memory_tokens`` on a stack; Burtsev et al. 2020, Darcet et al. 2024's registers;
x-transformers' ``num_memory_tokens``, issue 57): m learned vectors before the sequence, through
every layer, dropped before the head.

References: x-transformers 2.31.10's ``TransformerWrapper`` with ``num_memory_tokens`` on the same
weights (``tests/xtransformers_reference.py``): decoder and encoder logits in PyTorch and
onnxruntime, with rotary and with learned absolute positions, and KV-cached decoding against
its full recomputation (x-transformers itself cannot cache with memory tokens); its parameter
count; torch's FLOP counter over x-transformers' forward (the stack at n + m, the head at n);
the cache tensors decoding really holds; autograd's saved tensors op by op.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from tests import xtransformers_reference as ref
from tests.test_masks_as_data import left_padded
from tests.test_train_memory_ops import measured
from tests.test_variants_positions import rotary_hook
from tfspec import build_graph
from tfspec.analysis import train_memory
from tfspec.analysis.flops import analyze_flops
from tfspec.analysis.kvcache import analyze_kv_cache
from tfspec.analysis.params import analyze_params
from tfspec.backends.onnx import OnnxModel, export
from tfspec.backends.torch import TorchDecoder, build_module
from tfspec.backends.torch.model import DecodeState
from tfspec.errors import TfspecError
from tfspec.search import SearchOptions, search
from tfspec.serve.scheduler import continuous
from tfspec.spec import Spec

MEMORY = 3


def copy_memory(xt, copier, family="decoder-only"):
    """x-transformers holds the memory as ``memory_tokens`` (m, dim), drawn from N(0, 1)."""
    copier.set(f"{ref.STACK[family][0]}.memory_tokens.tokens", xt.memory_tokens)


def copy_positions(xt, copier, family="decoder-only"):
    """x-transformers' learned absolute table times its dim^-0.5 scale: tfspec's table."""
    copier.set(f"{ref.STACK[family][0]}.pos.weight", xt.pos_emb.emb.weight * xt.pos_emb.scale)


def case(family: str = "decoder-only", positions: str = "none") -> ref.Case:
    """The harness's model with m memory tokens, positions ``none``, ``rotary`` (x-transformers
    rotates half of each head, in its interleaved layout) or ``learned`` (absolute)."""
    stack, kind = ref.STACK[family]
    spec = {stack: {"layers": ref.DEPTH, "block": [kind, "ffn"], "memory_tokens": MEMORY}}
    options, wrapper, hooks = {}, {"num_memory_tokens": MEMORY}, [copy_memory]
    if positions == "rotary":
        spec["positional"] = {"kind": "rotary", "max_len": ref.MAX_LEN, "fraction": 0.5}
        options["rotary_pos_emb"] = True
        turned = rotary_hook(ref.DIM_HEAD // 2)
        hooks.append(lambda xt, copier, family=family: turned(xt, copier, family))
    elif positions == "learned":
        spec["positional"] = {"kind": "learned", "max_len": ref.MAX_LEN}
        wrapper["use_abs_pos_emb"] = True
        hooks.append(copy_positions)
    return ref.Case(options=options, family=family, spec=spec, hooks=tuple(hooks), wrapper=wrapper)


@pytest.mark.parametrize("positions", ["none", "rotary", "learned"])
def test_matches_x_transformers_in_pytorch_and_cached_decoding(positions):
    ref.check_torch(case(positions=positions))
    ref.check_cached(case(positions=positions))
    ref.check_torch(case("encoder-only", positions))


def test_matches_x_transformers_in_onnx(tmp_path):
    """The export's parity checks (full sequences with ragged padding, steps after pasts of 0, 1,
    3 and 6 tokens, greedy decoding) pass, and onnxruntime's logits are x-transformers'."""
    ref.check_onnx(case(positions="rotary"), tmp_path / "decoder")
    ref.check_onnx(case(positions="learned"), tmp_path / "learned")
    ref.check_onnx(case("encoder-only", "rotary"), tmp_path / "encoder")
    step_graph = OnnxModel(tmp_path / "decoder", device="cpu").decoder()
    ragged_prompts_decode_as_alone(step_graph)
    assert step_graph.takes_masks and not continuous(step_graph)  # serve batches it statically: no splicing


def ragged_prompts_decode_as_alone(step_graph) -> None:
    """Left-padded prompts of different lengths, greedy and beam search over the step graph
    (``attention_mask``, ``position_offset``), give the tokens of each prompt decoded alone and
    of PyTorch's search over the same batch."""
    _, tf = ref.pair(case(positions="rotary"))
    rng = np.random.default_rng(0)
    prompts = [np.r_[step_graph.bos, rng.integers(4, ref.VOCAB, n)] for n in (2, 5, 3)]
    prefix, mask = left_padded(prompts, step_graph.pad)
    for beam in (1, 3):
        options = SearchOptions(beam=beam, max_extra=6, max_length=12)
        ours = search(step_graph, None, options, prefix=prefix, prefix_mask=mask)
        assert ours == search(TorchDecoder(tf), None, options, prefix=prefix, prefix_mask=mask)
        assert ours == [search(step_graph, None, options, prefix=p[None])[0] for p in prompts]


def test_padding_never_hides_the_memory():
    """A left-padded prompt's logits (decoder) and a right-padded row's (encoder) are those of the
    row alone; a left-padded batch decoded with the cache gives each row's own logits."""
    _, tf = ref.pair(case(positions="rotary"))
    ids, other = ref.tokens(1, 7), ref.tokens(1, 9, seed=2)
    padded = torch.cat([torch.zeros(1, 2, dtype=ids.dtype), ids], 1)  # 0 is the pad id
    with torch.no_grad():
        alone = tf(ids)[0]
        torch.testing.assert_close(tf(torch.cat([padded, other]))[0, 2:], alone, atol=1e-5, rtol=0)
        state, batch = DecodeState(), torch.cat([padded, other])
        prompt = tf.run({"tgt": batch[:, :5], "tgt_mask": batch[:, :5] != 0}, state=state)["logits"]
        steps = [tf.run({"tgt": batch[:, t:t + 1]}, state=state)["logits"][:, -1] for t in range(5, 9)]
    torch.testing.assert_close(torch.cat([prompt[0, 2:], torch.stack(steps, 1)[0]]), alone, atol=1e-5, rtol=0)
    _, encoder = ref.pair(case("encoder-only", "rotary"))
    right = torch.cat([ids, torch.zeros(1, 2, dtype=ids.dtype)], 1)
    with torch.no_grad():
        torch.testing.assert_close(encoder(torch.cat([right, other]))[0, :7], encoder(ids)[0], atol=1e-5, rtol=0)


def test_is_not_a_no_op():
    ref.differs(case(positions="rotary"))
    ref.differs(case("encoder-only"))


def test_counts_x_transformers_parameters_and_flops():
    """m d parameters more, as x-transformers counts them; the forward FLOPs torch's counter sees
    x-transformers compute over n tokens (its layers over n + m positions, its head over n)."""
    for family in ("decoder-only", "encoder-only"):
        torch.manual_seed(0)
        xt, graph = ref.xt_model(case(family)), build_graph(ref.spec(case(family)))
        assert analyze_params(graph).total == sum(p.numel() for p in xt.parameters())
        n = 9
        with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
            xt(ref.tokens(1, n))
        assert analyze_flops(graph, n).forward == counter.get_total_flops()


def test_decoding_caches_the_memory_once():
    """After t steps each layer caches m + t keys (the memory's from the first step on), which the
    KV-cache report counts: (m + n) kv_heads (d_k + d_v) values per layer, the per-token growth
    unchanged."""
    _, tf = ref.pair(case())
    state, ids = DecodeState(), ref.tokens(1, 5)
    with torch.no_grad():
        for t in range(ids.shape[1]):
            tf.run({"tgt": ids[:, t:t + 1]}, state=state)
    assert {k.shape[2] for k, _ in state.cache.values()} == {MEMORY + ids.shape[1]}
    held = sum(k.numel() + v.numel() for k, v in state.cache.values())
    report, baseline = (analyze_kv_cache(build_graph(ref.spec(c)), ids.shape[1]) for c in (case(), ref.Case()))
    assert report.at_n == held and report.per_token == baseline.per_token


def test_training_memory_estimate_keeps_what_autograd_keeps():
    """Each op's declared saved tensors, read at n + m inside the stack, are what autograd keeps
    while it runs (bytes), the learned memory itself (a parameter) left out."""
    graph = build_graph(ref.spec(case()))
    torch.manual_seed(0)
    got = measured(build_module(graph).train(), graph)
    sizes = {"B": 2, "S": 128, "T": 128}  # test_train_memory_ops' ROWS x LENGTH
    for node in graph.nodes():
        if node.op in ("attention", "ffn", "layer_norm", "dropout", "projection"):
            saved = sum(train_memory._saved(graph, node, sizes).values())
            assert saved == got.get(node.name, 0), node.name


def test_refusals_name_the_field(cli, write_spec):
    """What memory tokens do not support is refused naming the field; the CLI says so in one line."""
    def refused(**fields):
        with pytest.raises(ValueError, match=fields.pop("match")):
            Spec.model_validate(ref.spec(case()).model_dump(exclude_unset=True) | fields)

    band = {"layers": 1, "block": [{"kind": "restricted_self_attention", "r": 3, "causal": True}, "ffn"],
            "memory_tokens": 2}
    refused(decoder=band, match="restricted_self_attention does not see every key")
    refused(positional={"kind": "alibi", "max_len": 16}, match="alibi positions add terms")
    refused(decoder={"layers": 2, "block": ["causal_self_attention", "ffn"], "shared": True, "memory_tokens": 2},
            match="a shared .universal. stack")
    refused(decoder={"layers": 1, "block": [{"kind": "conv", "kernel": 3, "causal": True}], "memory_tokens": 2},
            match="conv mixes positions")
    refused(decoder={"layers": 1, "block": ["causal_self_attention", "ffn"], "memory_tokens": -1},
            match="greater than or equal to 0")
    path = write_spec("""
        name: seq2seq
        vocab: 64
        d_model: 16
        heads: 2
        d_ff: 32
        encoder: {layers: 1, block: [self_attention, ffn], memory_tokens: 4}
        decoder: {layers: 1, block: [causal_self_attention, cross_attention, ffn]}
    """)
    code, out, err = cli("validate", path)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert err.startswith("error: ") and "encoder.memory_tokens" in err and "an encoder-decoder's are not" in err


def test_step_graphs_that_cannot_tell_the_first_step_are_refused(tmp_path):
    """The static step graph (a preallocated cache given its offset) is refused by name, not
    written wrong (as are the in-place and onnxruntime-genai ones)."""
    _, tf = ref.pair(case())
    with pytest.raises(TfspecError, match="static.onnx cannot carry memory tokens"):
        export(tf, tmp_path, static_cache=True, parity=False)
