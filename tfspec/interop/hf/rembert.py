"""RemBERT (``model_type: rembert``): transformers' RemBertModel and RemBertForMaskedLM as tfspec
specs (google/rembert; Chung et al. 2021, "Rethinking Embedding Coupling in Pre-trained
Language Models"), with the task classes BERT's pooler and classifier give.

BERT's post-norm encoder and tensor names (``bert.py``) with decoupled embeddings. The input
embeddings (tokens, positions, token types) are ``input_embedding_size`` E wide, summed, normed
and projected to the hidden size by ``encoder.embedding_hidden_mapping_in`` (``embed_projection``,
always present, as ALBERT's). The masked-LM head has an output embedding of its own: a dense
layer to ``output_embedding_size`` O, the activation, a LayerNorm, then ``decoder`` (V x O, with
a bias), which transformers 5 never ties to the input embedding (RemBertForMaskedLM declares no
tied weights, whatever ``tie_word_embeddings`` says). RemBertModel's checkpoints hold no way
back down to E for a token projection: its spec reads the hidden states through the input
projection's transpose (``out: tied``), and only the hidden states and the pooler are compared.

tfspec's masked-LM head maps the hidden states to the input embeddings' width, so
RemBertForMaskedLM imports where O equals E; google/rembert's (E 256, O 1664, RemBertConfig's
defaults) is refused by name, and imports as RemBertModel. RemBertForCausalLM (``is_decoder``)
is not imported. Defaults are RemBertConfig's (google/rembert's shape). Its sentencepiece
vocabulary is not read: pad, bos and eos are the config's ids ([CLS] 312, [SEP] 313).

RemBertModel and its task classes compute what ALBERT's compute with no layers shared, so
``export --format hf`` writes those specs as ALBERT (the first family by name); the masked LM,
whose output is untied, as RemBERT.
"""

from __future__ import annotations

from dataclasses import replace

from tfspec.errors import TfspecError
from tfspec.interop.hf.bert import Bert, _dense
from tfspec.interop.hf.family import Rule, Source, norm_rules, number, register

DEFAULTS = {"vocab_size": 250300, "hidden_size": 1152, "num_hidden_layers": 32, "num_attention_heads": 18,
            "intermediate_size": 4608, "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0,
            "bos_token_id": 312, "eos_token_id": 313, "input_embedding_size": 256, "output_embedding_size": 1664}
"""RemBertConfig's values where they differ from BertConfig's (or BERT has no such field)."""


@register
class RemBert(Bert):
    model_type = "rembert"
    title = "RemBERT"
    architectures = {"RemBertModel": "", "RemBertForMaskedLM": "rembert."}
    export_architecture = "RemBertModel"
    masked_lm = "RemBertForMaskedLM"
    heads = ("cls.",)
    mapped = Bert.mapped + ("input_embedding_size", "output_embedding_size", "bos_token_id", "eos_token_id")
    required = {"is_decoder": (False,)}
    aliases = {"embedding_size": "input_embedding_size"}
    """google/rembert's config.json carries the conversion's embedding_size beside input_embedding_size."""
    ignored = {key: why for key, why in Bert.ignored.items() if key not in ("bos_token_id", "eos_token_id")} | {
        "classifier_dropout_prob": "dropout of a task head's input: training only",
        "embedding_dropout_prob": "left over from the conversion (google/rembert's config.json); transformers' "
                                  "RemBERT drops its embeddings out by hidden_dropout_prob and reads none of it",
        "tie_word_embeddings": "RemBERT's output embedding is its own (output_embedding_size wide): transformers 5 "
                               "never ties it to the input embedding (RemBertForMaskedLM declares no tied weights)"}
    defaults = DEFAULTS
    vocab_default = DEFAULTS["vocab_size"]

    def spec_data(self, source: Source) -> dict:
        source = replace(source, config=DEFAULTS | source.config)
        c, where = source.config, source.where
        data = super().spec_data(source)
        width, out = number(c, "input_embedding_size", where), number(c, "output_embedding_size", where)
        mlm = data["head_transform"]
        if mlm and out != width:
            raise TfspecError(f"{where}: output_embedding_size: {out} is not supported with input_embedding_size "
                              f"{width} in {source.architecture}: its head maps the hidden states to "
                              "output_embedding_size features before its own output embedding, and tfspec's masked-LM "
                              "head maps them to the input embeddings' width; tfspec imports it with the two equal "
                              f"(and any as {self.export_architecture})")
        return data | {"embed_projection": {"width": width, "out": None if mlm else "tied"},
                       "tie_embeddings": "none" if mlm else "output"}

    def _special_ids(self, source: Source, size: int) -> dict:
        """pad (it masks keys), bos and eos from the config; unk and mask (only tokenizers and
        training read them) from a vocabulary file where one lists them (RemBERT ships a
        sentencepiece model, which tfspec does not read), else tfspec's defaults."""
        c, where = source.config, source.where
        found = {key: source.vocabulary[token] for key, token in (("unk_id", "<unk>"), ("mask_id", "[MASK]"))
                 if token in source.vocabulary}
        ids = {key: number(c, field, where, nullable=True) for key, field in
               (("pad_id", "pad_token_id"), ("bos_id", "bos_token_id"), ("eos_id", "eos_token_id"))}
        fallback = {"pad_id": 0, "bos_id": DEFAULTS["bos_token_id"], "eos_id": DEFAULTS["eos_token_id"]}
        return {key: fallback[key] if value is None else value for key, value in ids.items()} | found

    def rules(self, spec, architecture: str) -> list[Rule]:
        rules = super().rules(spec, architecture)
        rules += _dense("encoder.project_in.weight", "encoder.project_in.bias", "encoder.embedding_hidden_mapping_in")
        if spec.head_transform and not spec.ties_output:
            rules.append(Rule("output.weight", ("cls.predictions.decoder.weight",)))
        return rules

    def _head_rules(self) -> list[Rule]:
        return [*_dense("head.dense.weight", "head.dense.bias", "cls.predictions.dense"),
                *norm_rules("head.norm", "cls.predictions.LayerNorm"),
                Rule("output.bias", ("cls.predictions.decoder.bias",))]

    def dropped(self, architecture: str) -> dict[str, str]:
        dropped = {"embeddings.position_ids": "a buffer of position indices, not a weight"}
        if architecture == self.export_architecture:
            return dropped | {"cls.*": f"the masked-LM head, not part of {architecture}"}
        return dropped | {"pooler.*": f"{architecture} has no pooler"}

    def structure(self, spec) -> str | None:
        if reason := super().structure(spec):
            return reason
        if spec.embed_projection is None:
            return (f"{self.title} always projects its embeddings to the hidden size (embedding_hidden_mapping_in): "
                    "set embed_projection")
        if spec.head_transform and spec.ties_output:
            return f"transformers' {self.masked_lm} has an output embedding of its own: set tie_embeddings: none"
        return None

    def config(self, spec) -> dict:
        v = spec.vocab
        return super().config(spec) | {"input_embedding_size": spec.embed_width,
                                       "output_embedding_size": spec.embed_width, "bos_token_id": v.bos_id,
                                       "eos_token_id": v.eos_id, "tie_word_embeddings": False}
