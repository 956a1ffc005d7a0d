"""Memory tokens: m learned vectors before a text stack's sequence, read by every layer and dropped
before the head (``memory_tokens`` on a stack).

Burtsev et al. 2020 ("Memory Transformer", §2, MemTransformer) prepend m [mem] tokens to the
input: they pass through every layer like the tokens, every position may attend to them, and
their outputs are not read as predictions. Darcet et al. 2024 ("Vision Transformers Need
Registers") call the same tokens registers; an image encoder has them as ``patches.registers``
and both lower to learned tokens put into the sequence once the absolute positions are added
(``tfspec/ir/ops/memory_tokens.py``). x-transformers' ``num_memory_tokens`` is this option.

Where they sit, as x-transformers places them:

- absolute positions (``sinusoidal``, ``learned``) are added to the tokens before the memory is
  prepended: memory tokens have none, and the tokens keep positions 0..n-1;
- rotary positions count inside the stack's sequence: x-transformers gives the memory 0..m-1 and
  token i position m + i; tfspec gives the memory -m..-1 and token i position i, the same
  distance i - j between every query and key (so the same q·k), while a decoding step's
  positions stay the token count;
- in a causal stack the memory comes first: every token sees all of it, a memory token the
  memory before it; padding never hides it (it is never padded).

Decoding caches the memory's keys and values with the tokens': they are computed once, at the
first call (the prompt), and every later step attends to them. The paper's memory in the
decoder of an encoder-decoder (its MemTransformer writes memory into the encoder) and position
kinds that add terms by key distance are not offered (refused by ``problem``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tfspec.spec.patches import MAX_REGISTERS

if TYPE_CHECKING:
    from tfspec.ir.build import LayerBuilder
    from tfspec.spec.schema import Spec

MAX_MEMORY_TOKENS = MAX_REGISTERS
"""The same bound as an image encoder's registers (the Memory Transformer uses 5 to 20)."""


def problem(spec: Spec, stack: str) -> tuple[str, str] | None:
    """(field, message) when ``stack`` of ``spec`` cannot carry its memory tokens."""
    m, field = getattr(spec, stack).memory_tokens, f"{stack}.memory_tokens"
    if spec.family == "encoder-decoder":
        return field, (f"memory_tokens ({m}) are offered on the stack of a decoder-only or encoder-only model "
                       "(x-transformers' TransformerWrapper); an encoder-decoder's are not: drop memory_tokens")
    for part in ("patches", "frames", "spectrogram", "waveform", "image"):
        if getattr(spec, part) is not None:
            fix = "use patches.registers" if part == "patches" else "drop memory_tokens"
            return field, f"memory_tokens ({m}) join token ids, and this stack reads {part}: {fix}"
    if getattr(spec, stack).shared:
        return field, (f"memory_tokens ({m}): a shared (universal) stack adds a position signal at every step, "
                       "which memory tokens have none of: drop shared or memory_tokens")
    for path, layer in getattr(spec, stack).entries():
        if message := _layer_problem(layer.resolved(spec), m):
            return f"{stack}.{path}", message
    return None


def _layer_problem(layer, m: int) -> str | None:
    """Why a sub-layer cannot read a sequence that starts with m memory tokens, or None."""
    name = f"memory_tokens ({m})"
    if layer.token_shift:
        return f"{name}: token_shift would mix the last memory token into the first token; drop token_shift"
    positions = getattr(layer, "positions", None)
    if positions is None or not hasattr(layer, "band"):  # not attention: it must read each position alone
        return None if not layer.mixes_positions else (
            f"{name}: {layer.kind} mixes positions along the sequence, which memory tokens would join; use "
            "attention and position-wise layers")
    if layer.band() is not None or layer.needs_memory:
        return f"{name}: {layer.kind} does not see every key; memory tokens need full or causal self-attention"
    kind = positions.definition
    if kind.in_attention and (kind.adds_to_scores or positions.depends_on_length):
        return (f"{name}: {positions.kind} positions add terms by key position or follow the call's length, "
                "which memory tokens have none of: use rotary (unscaled) or embedded positions")
    return None


def lower_in(b: LayerBuilder, x: str, count: int) -> str:
    """(B, L, d) -> (B, m + L, d): the m learned vectors before the sequence (x-transformers draws
    them from N(0, 1)); the backends widen the stack's padding and positions with them."""
    return b.op(f"{b.stack}.memory_tokens", "memory_tokens", [x], component="embedding",
                attrs={"at": 0, "count": count}, params={"tokens": ((count, b.spec.d_model), "normal:1.0")})


def lower_out(b: LayerBuilder, x: str, count: int) -> str:
    """(B, m + L, d) -> (B, L, d): the memory's outputs dropped before the head (and the pooler)."""
    return b.op(f"{b.stack}.drop_memory", "drop_tokens", [x], attrs={"count": count}, component="embedding")
