"""Position kinds: how positions enter a model (§3.5 and its successors), one module per kind,
found by scanning this package (``tfspec.registry.discover``). A kind declares everything the
core knows of it: its name and place in the ``kind`` enum, the spec fields it owns and its
checks, its capabilities (added to the embeddings or inside attention, reads cache indices,
depends on the call's length), the parameters it adds to attention and their FLOPs.
``tfspec.spec.positions.Positional`` takes its ``kind`` values and fields from this registry
when it is defined, and callers ask the kind (``Positional.definition``), so a new kind is this
package's one module plus its backends' (``backends/{torch,onnx}/positions`` or ``scores``)."""

from __future__ import annotations

from typing import Any, ClassVar

from tfspec.registry import discover, registrar

KINDS: dict[str, type[PositionKind]] = {}
"""Each registered kind by its name."""


class PositionKind:
    """What a position kind declares; the defaults are the safe answers (a kind reads cache
    columns and depends on the call's length unless it says otherwise, adds no parameters)."""

    name: ClassVar[str]
    """The value of ``positional.kind`` that selects it."""
    order: ClassVar[int]
    """Its place among the ``kind`` values (the schema's enum, the messages naming kinds)."""
    summary: ClassVar[str]
    """What it computes, for the ``kind`` field's description."""
    fields: ClassVar[dict[str, tuple[Any, Any]]] = {}
    """The spec fields it owns: name -> (annotation, ``Field(default, description=...)``). Set
    under another kind that neither owns nor ``reads`` it, a field is refused."""
    reads: ClassVar[tuple[str, ...]] = ()
    """Fields another kind owns that this one reads too (relative_bias reads buckets)."""
    embedded: ClassVar[bool] = False
    """Added to the embeddings from a table of max_len rows, which bounds the input."""
    in_attention: ClassVar[bool] = False
    """Enters through self-attention (a layer may then set its own)."""
    per_stack: ClassVar[bool] = False
    """One table per stack, held by its first attention."""
    layers_share: ClassVar[bool] = False
    """With ``per_stack``: a layer may set it as its own positions (beside the spec's positional,
    MPNet's relative bias over learned positions), the stack's layers that do sharing one table,
    so they must set it alike (``Spec._check_stack``); otherwise only the spec's positional may."""
    bounded: ClassVar[bool] = True
    """max_len bounds the sequences every path runs (``Positional.limit``)."""
    adds_to_scores: ClassVar[bool] = True
    """Inside attention, adds a term to the logits or to the output (Shaw et al.'s a_K and a_V,
    T5's bias, ALiBi, DeBERTa), so attention is spelled out and keeps its L x L weights; a kind
    that only turns or scales queries and keys (rotary, temperature) says False and keeps the
    fused kernels (``tfspec.layers.attention.fused_kernel``)."""
    over_patches: ClassVar[bool] = False
    """Reads the 2-D patch grid of an image encoder (BEiT's relative bias): only a spec with
    ``patches`` takes it, and ``patches`` take no other kind in attention."""
    reads_cache_indices: ClassVar[bool] = True
    """Computed from cache columns (the distance j - i between key and query columns) rather
    than each row's position ids: a cache holding padding inside its rows (onnxruntime-genai's)
    would shift it, so genai export refuses such a kind."""

    @classmethod
    def depends_on_length(cls, positional) -> bool:
        """Whether a position's encoding depends on the length a call reaches, so a row's output
        depends on the rows batched with it (refused for ragged batching)."""
        return True

    @classmethod
    def check(cls, positional) -> None:
        """Raise ``field_error`` where the kind's fields disagree (beyond their types)."""

    @classmethod
    def layer_problem(cls, layer) -> str | None:
        """Why the resolved attention ``layer`` (sizes filled in) cannot take these positions."""
        return None

    @classmethod
    def attention_params(cls, b, name: str, layer) -> dict:
        """IR parameters the kind adds to the attention node ``name`` of the resolved ``layer``."""
        return {}

    @classmethod
    def attention_flops(cls, s, positions: dict) -> dict:
        """Matrix FLOPs the kind adds to an attention op over symbols ``s``, by term, from its
        node's dumped ``positions``."""
        return {}

    @classmethod
    def saved_tables(cls, positions: dict, d_k: int, length: int) -> int:
        """Bytes of the tables a training step's backward keeps for the kind, computed once per
        call and shared by the layers (``report --train``); none unless it says."""
        return 0

    @classmethod
    def saved_by_layer(cls, graph, node, queries: int, keys: int) -> int:
        """Bytes a training step's backward keeps for the kind in the attention ``node`` itself,
        beside the shared tables (a layer's own position MLP); none unless it says."""
        return 0

    @classmethod
    def saved_per_row(cls, node, queries: int, keys: int) -> int:
        """Bytes the backward keeps for the kind in the attention ``node`` per batch row of a call
        (forgetting attention's gates, computed from each row's input); none unless it says."""
        return 0

    @classmethod
    def cached_per_key(cls, node) -> int:
        """Values the kind adds to each cached key of the attention ``node``: state a decoding
        step reads for every earlier key (forgetting attention's log gate per head); none unless
        it says."""
        return 0

    @classmethod
    def embedding_params(cls, positional, width: int) -> dict:
        """IR parameters of the ``positional`` op of an ``embedded`` kind (a learned table)."""
        return {}


def register(kind: type[PositionKind]) -> type[PositionKind]:
    """Class decorator: record ``kind`` under its name, refusing a second one for it."""
    return registrar(KINDS, "position kinds")(kind.name)(kind)


def ordered() -> list[type[PositionKind]]:
    """Every kind of the package, in their declared order (ties: by name)."""
    discover(__name__)
    return sorted(KINDS.values(), key=lambda k: (k.order, k.name))


def owners() -> dict[str, tuple[str, ...]]:
    """Each kind-specific field with the kind that owns it, then those that read it (in kind
    order): a message refusing the field names them so, and suggests the owner."""
    registered = ordered()
    return {field: (kind.name, *(other.name for other in registered if field in other.reads))
            for kind in registered for field in kind.fields}
