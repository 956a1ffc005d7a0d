"""ELECTRA (``model_type: electra``): transformers' ElectraModel and ElectraForMaskedLM as tfspec
specs (google/electra-base-discriminator and electra-large-discriminator as ElectraModel).

BERT's encoder, embeddings and tensor names (``bert.py``) under ``electra.``, without a
pooler. ElectraForMaskedLM (a generator) has BERT's masked-LM head under other names
(``generator_predictions``: dense, exact GELU whatever ``hidden_act`` says, LayerNorm;
``generator_lm_head``: the output tied to the token embedding, with a bias).

ELECTRA sizes its embeddings by ``embedding_size`` and, where that differs from
``hidden_size`` (electra-small, every published generator, ElectraConfig's defaults 128 and
256), projects them up (``embeddings_project``: ``embed_projection``, the sum of the
embeddings normed and projected) and the generator head's dense layer back down to the
embeddings' width. ElectraModel's checkpoints hold no way back down: its spec's token
projection reads the hidden states through the input projection's transpose (``out: tied``),
and only the hidden states are compared.

An ELECTRA generator computes what BertForMaskedLM computes (with equal sizes) or what
AlbertForMaskedLM computes with no layers shared (with narrower embeddings), so ``export
--format hf`` writes such a spec as BERT or ALBERT; an encoder without pooler or head is
written as ElectraModel.
"""

from __future__ import annotations

from dataclasses import replace

from tfspec.errors import TfspecError
from tfspec.interop.hf.bert import Bert, _dense
from tfspec.interop.hf.family import Family, Rule, Source, _show, norm_rules, number, register
from tfspec.interop.hf.task_heads import Pooled

DEFAULTS = {"embedding_size": 128, "hidden_size": 256, "num_attention_heads": 4, "intermediate_size": 1024}
"""ElectraConfig's values where they differ from BertConfig's (electra-small-discriminator's)."""


@register
class Electra(Bert):
    model_type = "electra"
    title = "ELECTRA"
    architectures = {"ElectraModel": "", "ElectraForMaskedLM": "electra."}
    export_architecture = "ElectraModel"
    masked_lm = "ElectraForMaskedLM"
    heads = ("generator_predictions.", "generator_lm_head.", "discriminator_predictions.")
    mapped = Bert.mapped + ("embedding_size",)
    task_heads = Pooled(classifier="classifier.out_proj", dense="classifier.dense", activation="gelu",
                        base_pooler=False)

    def spec_data(self, source: Source) -> dict:
        source = replace(source, config=DEFAULTS | source.config)
        c, where = source.config, source.where
        size, hidden = number(c, "embedding_size", where), number(c, "hidden_size", where)
        data = super().spec_data(source) | {"pooler": False}
        if size != hidden:
            data["embed_projection"] = {"width": size, "out": None if data["head_transform"] else "tied"}
        if data["head_transform"] and data["activation"] != "gelu":
            raise TfspecError(f"{where}: hidden_act: {_show(c['hidden_act'])} is not supported with "
                              f"{source.architecture}: its generator head applies exact GELU whatever hidden_act "
                              "says, and tfspec's head uses the layers' activation")
        return data

    def rules(self, spec, architecture: str) -> list[Rule]:
        rules = super().rules(spec, architecture)
        if spec.embed_projection is None:
            return rules
        return rules + _dense("encoder.project_in.weight", "encoder.project_in.bias", "embeddings_project")

    def _head_rules(self) -> list[Rule]:
        return [*_dense("head.dense.weight", "head.dense.bias", "generator_predictions.dense"),
                *norm_rules("head.norm", "generator_predictions.LayerNorm"),
                Rule("output.bias", ("generator_lm_head.bias",))]

    def dropped(self, architecture: str) -> dict[str, str]:
        dropped = {"embeddings.position_ids": "a buffer of position indices, not a weight",
                   "embeddings.token_type_ids": "a buffer of zeros (the default token types), not a weight",
                   "discriminator_predictions.*": "the discriminator's head (ElectraForPreTraining), not imported"}
        if architecture == self.export_architecture:
            return dropped | {"generator_*": f"the generator's head, not part of {architecture}"}
        return dropped | {"generator_lm_head.weight": "the output projection, tied to the token embedding"}

    def structure(self, spec) -> str | None:
        if reason := Family.structure(self, spec):
            return reason
        if spec.pooler or spec.head_transform:
            return (f"{self.title} has no pooler, and its generator computes what BERT's (or, with narrower "
                    "embeddings, ALBERT's) masked-LM model does: export writes it as BERT or ALBERT")
        if spec.segments < 1:
            return f"{self.title} always adds segment (token type) embeddings: set segments: 1 or more"
        return None

    def outputs(self, architecture: str) -> dict[str, str]:
        return {"memory": "last_hidden_state"} if architecture == self.export_architecture else {"logits": "logits"}

    def config(self, spec) -> dict:
        return super().config(spec) | {"embedding_size": spec.embed_width}
