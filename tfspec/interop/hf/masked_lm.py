"""What the masked-LM encoder families share (DeBERTa-v2, ModernBERT): transformers' *Model (the
last hidden states) and *ForMaskedLM (a prediction head, dense + activation + norm, before an
output tied to the token embedding), told apart in a spec by ``head_transform``.
"""

from __future__ import annotations

from typing import ClassVar

from tfspec.interop.hf.family import Family, Rule, Source, norm_rules


class MaskedLM(Family):
    """Base of an encoder family published as its *Model and its *ForMaskedLM: which class a
    spec exports as, the outputs each class gives, the head's tensors both ways and the special
    ids only tokenizers and training read. A family states its names; the rest is here."""

    family = "encoder-only"
    required = {"tie_word_embeddings": (True,)}
    """The masked-LM head's output is the token embedding (beyond this, a family's own)."""
    masked_lm: ClassVar[str]
    """The architecture export writes for a spec with the masked-LM head."""
    head_names: ClassVar[tuple[str, str, str]]
    """The masked-LM head's dense layer, its norm and the output's bias, as the checkpoint names
    them; a *Model checkpoint holding the head (tensors under the first part of these names) has
    it left out."""
    tied_output: ClassVar[str]
    """The tensors (``fnmatch``) of the head's output matrix, left out: it is the token embedding."""
    special_tokens: ClassVar[dict[str, tuple[str, int]]]
    """Spec vocabulary id -> its token and where the family's published vocabulary puts it."""

    def reads_head(self, source: Source) -> bool:
        """Whether ``source``'s class holds the masked-LM head: its base model sits under a prefix."""
        return self.architectures[source.architecture] != ""

    def special_ids(self, source: Source, size: int, ids: dict[str, int]) -> dict[str, int]:
        """``ids`` (those the configuration gives: pad, which masks keys, ...) and each of
        ``special_tokens``: from the vocabulary, else its published place where that fits ``size``
        and no id of ``ids`` holds it, else the first id none of these holds."""
        held = set(ids.values())
        spare = (i for i in range(size) if i not in held | {place for _, place in self.special_tokens.values()})
        found = {key: source.vocabulary.get(token, place if place < size and place not in held else next(spare))
                 for key, (token, place) in self.special_tokens.items()}
        return ids | found

    def head_rules(self, spec) -> list[Rule]:
        """The masked-LM head (``head_transform``): dense, norm, then the output's bias (its
        matrix is the token embedding)."""
        dense, norm, bias = self.head_names
        rules = [*dense_rules("head.dense.weight", "head.dense.bias", dense, spec.has_bias("head")),
                 *norms(spec, "head.norm", norm)] if spec.head_transform else []
        return rules + ([Rule("output.bias", (bias,))] if spec.output_bias else [])

    def dropped(self, architecture: str) -> dict[str, str]:
        if architecture == self.export_architecture:
            heads = (name.split(".")[0] + ".*" for name in (*self.head_names, self.tied_output))
            return dict.fromkeys(heads, f"the masked-LM head, not part of {architecture}")
        return {self.tied_output: "the output projection, tied to the token embedding"}

    def architecture_for(self, spec) -> str:
        return self.masked_lm if spec.head_transform else self.export_architecture

    def outputs(self, architecture: str) -> dict[str, str]:
        return {"logits": "logits"} if architecture == self.masked_lm else {"memory": "last_hidden_state"}


def dense_rules(weight: str, bias: str, theirs: str, biased: bool = True) -> list[Rule]:
    """A linear layer's matrix and, where ``biased``, its bias."""
    return [Rule(weight, (f"{theirs}.weight",))] + ([Rule(bias, (f"{theirs}.bias",))] if biased else [])


def norms(spec, ours: str, theirs: str) -> list[Rule]:
    """A LayerNorm's gain, and its shift where the spec's norms have one."""
    return norm_rules(ours, theirs) if spec.uses_norm_bias else [Rule(f"{ours}.weight", (f"{theirs}.weight",))]
