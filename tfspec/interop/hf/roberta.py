"""RoBERTa (``model_type: roberta``) and the models that reuse its classes, XLM-RoBERTa
(``xlm-roberta``) and CamemBERT (``camembert``): their XModel and XForMaskedLM as tfspec specs.

BERT's computation and tensor names (``bert.py``) with three differences. Learned positions
start at row padding_idx + 1 (pad_token_id + 1 = 2 in every published model: fairseq kept the
rows up to padding for padding), so position p reads row p + 2: ``positional.offset`` is
pad_token_id + 1 and ``max_len`` the remaining rows (roberta-base's 514 rows are 512
positions). The masked-LM head is ``lm_head`` and applies exact GELU whatever ``hidden_act``
says. Published checkpoints have one token type (``type_vocab_size: 1``), added to every token.

transformers counts positions over the non-padding tokens of a row
(``create_position_ids_from_input_ids``); tfspec counts from the row's start. Right-padded
batches (tfspec's) give every real token the same position in both; in a left-padded row
transformers would start the real tokens at row 2 where tfspec starts them after the padding.

XLM-RoBERTa and CamemBERT are RoBERTa's classes renamed (transformers' modular files inherit
them unchanged): their classes below state only their names. They compute what RoBERTa
computes, so ``export --format hf`` writes every such spec as RoBERTa.
"""

from __future__ import annotations

from tfspec.errors import TfspecError
from tfspec.interop.hf.bert import Bert, _dense
from tfspec.interop.hf.family import Rule, Source, _show, norm_rules, number, register
from tfspec.interop.hf.task_heads import Pooled

@register
class Roberta(Bert):
    model_type = "roberta"
    title = "RoBERTa"
    architectures = {"RobertaModel": "", "RobertaForMaskedLM": "roberta."}
    export_architecture = "RobertaModel"
    masked_lm = "RobertaForMaskedLM"
    heads = ("lm_head.",)
    mapped = Bert.mapped + ("bos_token_id", "eos_token_id")
    ignored = {key: why for key, why in Bert.ignored.items() if key not in ("bos_token_id", "eos_token_id")}
    vocab_default = 50265
    task_heads = Pooled(classifier="classifier.out_proj", dense="classifier.dense")

    def spec_data(self, source: Source) -> dict:
        data = super().spec_data(source)
        if data["head_transform"] and data["activation"] != "gelu":
            raise TfspecError(f"{source.where}: hidden_act: {_show(source.config['hidden_act'])} is not supported "
                              f"with {source.architecture}: its lm_head applies exact GELU whatever hidden_act says, "
                              "and tfspec's head uses the layers' activation")
        return data

    def _positional(self, c: dict, where: str) -> dict:
        offset = number(c, "pad_token_id", where, default=1) + 1
        rows = number(c, "max_position_embeddings", where, default=512)
        if rows <= offset:
            raise TfspecError(f"{where}: max_position_embeddings ({rows}) must exceed pad_token_id + 1 ({offset}): "
                              f"{self.title}'s positions start at row pad_token_id + 1")
        return {"kind": "learned", "max_len": rows - offset, "offset": offset}

    def _special_ids(self, source: Source, size: int) -> dict:
        """pad (it masks keys and places positions), bos and eos from the config; unk and mask
        (only tokenizers and training read them) from vocab.json, else fairseq's places: <unk> 3,
        <mask> the last id (roberta-base's 50264)."""
        c, where = source.config, source.where
        return {"pad_id": number(c, "pad_token_id", where, default=1),
                "bos_id": number(c, "bos_token_id", where, default=0),
                "eos_id": number(c, "eos_token_id", where, default=2),
                "unk_id": source.vocabulary.get("<unk>", 3), "mask_id": source.vocabulary.get("<mask>", size - 1)}

    def _head_rules(self) -> list[Rule]:
        return [*_dense("head.dense.weight", "head.dense.bias", "lm_head.dense"),
                *norm_rules("head.norm", "lm_head.layer_norm"), Rule("output.bias", ("lm_head.bias",))]

    def dropped(self, architecture: str) -> dict[str, str]:
        dropped = {"embeddings.position_ids": "a buffer of position indices, not a weight",
                   "embeddings.token_type_ids": "a buffer of zeros (the default token types), not a weight"}
        if architecture == self.export_architecture:
            return dropped | {"lm_head.*": f"the masked-LM head, not part of {architecture}"}
        return dropped | {"lm_head.decoder.weight": "the output projection, tied to the token embedding",
                          "lm_head.decoder.bias": "lm_head.bias under its tied name",
                          "pooler.*": f"{architecture} has no pooler"}

    def structure(self, spec) -> str | None:
        if reason := super().structure(spec):
            return reason
        # the head's activation, not a layer's: the IR's head.dense reads the spec's own (tfspec/ir/build.py)
        if spec.head_transform and spec.activation != "gelu":
            return f"{self.title}'s masked-LM head applies exact GELU: set activation: gelu"
        return None

    def config(self, spec) -> dict:
        v, positions = spec.vocab, spec.positional
        return super().config(spec) | {"max_position_embeddings": positions.max_len + positions.offset,
                                       "bos_token_id": v.bos_id, "eos_token_id": v.eos_id}


class _Renamed(Roberta):
    """A model type whose transformers classes are RoBERTa's under other names: export writes a
    spec imported from one of them under its own name, any other as RoBERTa."""

    vocab_default = 30522

    def structure(self, spec) -> str | None:
        if spec.reference is None or spec.reference.architecture not in self.architectures:
            return f"{self.title} computes what RoBERTa computes: export writes it as RoBERTa"
        return super().structure(spec)


@register
class XLMRoberta(_Renamed):
    model_type = "xlm-roberta"
    title = "XLM-RoBERTa"
    architectures = {"XLMRobertaModel": "", "XLMRobertaForMaskedLM": "roberta."}
    export_architecture = "XLMRobertaModel"
    masked_lm = "XLMRobertaForMaskedLM"


@register
class Camembert(_Renamed):
    model_type = "camembert"
    title = "CamemBERT"
    architectures = {"CamembertModel": "", "CamembertForMaskedLM": "roberta."}
    export_architecture = "CamembertModel"
    masked_lm = "CamembertForMaskedLM"
