"""How a checkpoint stores an IR parameter: one small class per layout, each holding the stored
tensors' shapes and the conversion both ways (import: checkpoint tensors -> IR, export: IR ->
checkpoint tensors).

A ``Rule`` (``family.py``) pairs an IR parameter with the checkpoint tensors it is made of and
their layout. A layout knows no tensor names: it gives the shapes of the ``count`` stored
tensors (in the rule's order) of an IR tensor, turns the stored tensors into the IR one and back,
and says how a stored tensor that several rules write joins their parts (``join``). A family whose
checkpoints store a tensor in a way of their own subclasses one of these in its module (Cohere's
interleaved rotary rows, DeepSeek's rotary pairs, Llama 4's experts, Qwen3-Next's gated queries).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

Shape = tuple[int, ...]


@dataclass(frozen=True)
class Layout:
    """The base of the layouts: one stored tensor of the IR tensor's shape unless a layout says
    otherwise, and the two conversions each layout gives."""

    def hf_shapes(self, shape: Shape, count: int) -> list[Shape]:
        """The shapes of the ``count`` stored tensors of an IR tensor of ``shape``."""
        return [tuple(shape)]

    def to_ir(self, parts: list[np.ndarray]) -> np.ndarray:
        """The IR tensor of the stored ``parts`` (import)."""
        raise NotImplementedError

    def to_hf(self, value: np.ndarray, count: int) -> list[np.ndarray]:
        """The ``count`` stored tensors of the IR tensor ``value`` (export)."""
        raise NotImplementedError

    def join(self, earlier: np.ndarray, value: np.ndarray) -> np.ndarray:
        """A stored tensor this rule writes after another did (``earlier``): both rules write the
        same values unless the layout holds several IR tensors in one (``Split``, ``Interleave``),
        so the last is kept."""
        return value


@dataclass(frozen=True)
class Copy(Layout):
    """The stored tensor is the IR one."""

    def to_ir(self, parts: list[np.ndarray]) -> np.ndarray:
        return parts[0]

    def to_hf(self, value: np.ndarray, count: int) -> list[np.ndarray]:
        return [value]


@dataclass(frozen=True)
class Transpose(Layout):
    """Stored with the last two axes swapped: (in, out), as GPT-2's Conv1D; a stack of experts'
    matrices stored (in, out) (gpt-oss's down_proj)."""

    def hf_shapes(self, shape: Shape, count: int) -> list[Shape]:
        return [(*shape[:-2], shape[-1], shape[-2])]

    def to_ir(self, parts: list[np.ndarray]) -> np.ndarray:
        return np.swapaxes(parts[0], -1, -2)

    def to_hf(self, value: np.ndarray, count: int) -> list[np.ndarray]:
        return [np.swapaxes(value, -1, -2)]


@dataclass(frozen=True)
class Row(Layout):
    """The IR vector stored as a one-row matrix (Marian's and BART's final_logits_bias)."""

    def hf_shapes(self, shape: Shape, count: int) -> list[Shape]:
        return [(1, *shape)]

    def to_ir(self, parts: list[np.ndarray]) -> np.ndarray:
        return parts[0][0]

    def to_hf(self, value: np.ndarray, count: int) -> list[np.ndarray]:
        return [value[None]]


@dataclass(frozen=True)
class PlusOne(Layout):
    """The IR vector is the stored one plus 1: Gemma's RMSNorm multiplies by 1 + w, tfspec's by
    its gain."""

    def to_ir(self, parts: list[np.ndarray]) -> np.ndarray:
        return parts[0] + 1

    def to_hf(self, value: np.ndarray, count: int) -> list[np.ndarray]:
        return [value - 1]


@dataclass(frozen=True)
class Concat(Layout):
    """The IR matrix is the stored tensors stacked along rows (BERT's query, key and value into
    ``w_qkv``)."""

    rows: tuple[int, ...] = ()
    """The rows of each stored tensor when they differ (grouped-query attention's q, k, v)."""

    def _rows(self, shape: Shape, count: int) -> tuple[int, ...]:
        return self.rows or (shape[0] // count,) * count

    def hf_shapes(self, shape: Shape, count: int) -> list[Shape]:
        return [(rows, *shape[1:]) for rows in self._rows(shape, count)]

    def to_ir(self, parts: list[np.ndarray]) -> np.ndarray:
        return np.concatenate(parts)

    def to_hf(self, value: np.ndarray, count: int) -> list[np.ndarray]:
        return np.split(value, np.cumsum(self._rows(value.shape, count))[:-1])


@dataclass(frozen=True)
class Split(Layout):
    """The IR tensor is block ``part`` of one stored tensor whose blocks along ``axis`` are
    ``rows`` (Phi-3's gate_up_proj holds W1 then W3); export joins the blocks in the order of
    their rules."""

    rows: tuple[int, ...]
    part: int
    axis: int = 0
    """The stored tensor's axis its blocks follow one another along."""

    def hf_shapes(self, shape: Shape, count: int) -> list[Shape]:
        whole = list(shape)
        whole[self.axis] = sum(self.rows)
        return [tuple(whole)]

    def to_ir(self, parts: list[np.ndarray]) -> np.ndarray:
        return np.split(parts[0], np.cumsum(self.rows)[:-1], axis=self.axis)[self.part]

    def to_hf(self, value: np.ndarray, count: int) -> list[np.ndarray]:
        return [value]  # its block alone: ``join`` puts the blocks together

    def join(self, earlier: np.ndarray, value: np.ndarray) -> np.ndarray:
        return np.concatenate([earlier, value], axis=self.axis)


@dataclass(frozen=True)
class Stack(Layout):
    """The IR tensor is the stored ones, one per expert, stacked along a new first axis (a
    mixture of experts' (E, f, d) ``w_1`` from Mixtral's ``experts.{j}.w1``: transformers 5 fuses
    the experts when it loads them and saves them apart again)."""

    def hf_shapes(self, shape: Shape, count: int) -> list[Shape]:
        return [tuple(shape[1:])] * count

    def to_ir(self, parts: list[np.ndarray]) -> np.ndarray:
        return np.stack(parts)

    def to_hf(self, value: np.ndarray, count: int) -> list[np.ndarray]:
        return list(value)


@dataclass(frozen=True)
class Interleave(Layout):
    """The IR tensor is block ``part`` of two whose columns alternate along the stored tensor's
    last axis, a 3-D one's matrices stored (in, out) (gpt-oss's gate_up_proj (E, d, 2f), gate
    then linear branch column by column, and its bias); export interleaves the two rules'
    tensors back in the rules' order."""

    part: int

    def hf_shapes(self, shape: Shape, count: int) -> list[Shape]:
        stored = (*shape[:-2], shape[-1], shape[-2]) if len(shape) == 3 else tuple(shape)
        return [(*stored[:-1], 2 * stored[-1])]

    def to_ir(self, parts: list[np.ndarray]) -> np.ndarray:
        block = parts[0][..., self.part::2]
        return np.swapaxes(block, -1, -2) if block.ndim == 3 else block

    def to_hf(self, value: np.ndarray, count: int) -> list[np.ndarray]:
        return [np.swapaxes(value, -1, -2) if value.ndim == 3 else value]

    def join(self, earlier: np.ndarray, value: np.ndarray) -> np.ndarray:
        return np.stack([earlier, value], -1).reshape(*value.shape[:-1], 2 * value.shape[-1])


@dataclass(frozen=True)
class PerHead(Layout):
    """The IR's ``w_qkv``/``b_qkv`` (all queries, then all keys, then all values) stored head by
    head, each head's query, key and value rows together ((h, 3, d) rows: BLOOM's and
    GPT-NeoX's query_key_value)."""

    heads: int

    def to_ir(self, parts: list[np.ndarray]) -> np.ndarray:
        return _regroup(parts[0], self.heads, 3)  # (h, 3, d) rows -> (3, h, d)

    def to_hf(self, value: np.ndarray, count: int) -> list[np.ndarray]:
        return [_regroup(value, 3, self.heads)]


@dataclass(frozen=True)
class PerGroup(Layout):
    """``PerHead`` stored group by group of key/value heads: each of the ``kv_heads`` groups'
    ``heads / kv_heads`` query heads, then its key and its value ((g, h/g + 2, d) rows:
    Falcon-40B's query_key_value; PerHead is g = h)."""

    heads: int
    kv_heads: int

    def to_ir(self, parts: list[np.ndarray]) -> np.ndarray:
        return _ungroup(parts[0], self.heads, self.kv_heads)

    def to_hf(self, value: np.ndarray, count: int) -> list[np.ndarray]:
        return [_group(value, self.heads, self.kv_heads)]


def _regroup(value: np.ndarray, outer: int, inner: int) -> np.ndarray:
    """``value`` whose rows are (outer, inner, d) blocks, its rows reordered to (inner, outer, d)."""
    return value.reshape(outer, inner, -1, *value.shape[1:]).swapaxes(0, 1).reshape(value.shape)


def _ungroup(value: np.ndarray, h: int, g: int) -> np.ndarray:
    """Rows in (g, h/g + 2, d) blocks (each group's queries, key, value) -> queries, keys, values."""
    x = value.reshape(g, h // g + 2, -1, *value.shape[1:])
    return np.concatenate([x[:, :-2].reshape(h, *x.shape[2:]), x[:, -2], x[:, -1]]).reshape(value.shape)


def _group(value: np.ndarray, h: int, g: int) -> np.ndarray:
    """``_ungroup`` undone: queries, keys, values -> rows in (g, h/g + 2, d) blocks."""
    x = value.reshape(h + 2 * g, -1, *value.shape[1:])
    q, k, v = x[:h].reshape(g, h // g, *x.shape[1:]), x[h:h + g, None], x[h + g:, None]
    return np.concatenate([q, k, v], axis=1).reshape(value.shape)
