"""ALBERT (``model_type: albert``): transformers' AlbertModel and AlbertForMaskedLM as tfspec
specs (albert-base-v2 .. albert-xxlarge-v2; Lan et al. 2020).

BERT's post-norm encoder (``bert.py``) with ALBERT's two changes (§3.1). Its embeddings are
``embedding_size`` E wide (128 in every released size), normed and projected to the hidden
size by ``embedding_hidden_mapping_in`` (``embed_projection``, always present, even where E
equals the hidden size); the masked-LM head's dense layer maps back to E, and its output is tied
to the E-wide table. Its layers share parameters: ``num_hidden_layers`` L applications fall into
``num_hidden_groups`` G equal runs, each repeating its ``inner_group_num`` K layers L / G times
(``share_layers: {cycle: K, repeats: L / G}``; every released model has G = K = 1, one layer's
weights applied L times). tfspec's stack unrolls the L x K layers; only the layers a run owns
have parameters. Refused by name: G not dividing L (transformers then runs its groups unequal
numbers of times and never runs some) and K > 1 with G = L (nothing shared, and the layer
names could not be told from the spec). The pooler is one ``pooler`` Linear (not BERT's
``pooler.dense``). Defaults are AlbertConfig's (albert-xxlarge's shape); pad is 0, [CLS] and
[SEP] are bos_token_id and eos_token_id (2, 3), <unk> 1 and [MASK] 4, as in the released
sentencepiece vocabulary.
"""

from __future__ import annotations

from dataclasses import replace

from tfspec.errors import TfspecError
from tfspec.interop.hf.bert import Bert, _dense
from tfspec.interop.hf.family import Rule, Source, norm_rules, number, register
from tfspec.interop.hf.layouts import Concat

DEFAULTS = {"vocab_size": 30000, "embedding_size": 128, "hidden_size": 4096, "num_attention_heads": 64,
            "intermediate_size": 16384, "hidden_act": "gelu_new", "hidden_dropout_prob": 0.0,
            "attention_probs_dropout_prob": 0.0, "pad_token_id": 0, "bos_token_id": 2, "eos_token_id": 3}
"""AlbertConfig's values where they differ from BertConfig's."""
LEFTOVERS = {"down_scale_factor": 1, "gap_size": 0, "net_structure_type": 0, "num_memory_blocks": 0}
"""Fields of the released configs (albert-base-v2) from the TensorFlow code's experiments, which
transformers reads none of: imported at the released values only."""


@register
class Albert(Bert):
    model_type = "albert"
    title = "ALBERT"
    architectures = {"AlbertModel": "", "AlbertForMaskedLM": "albert.", "AlbertForPreTraining": "albert."}
    export_architecture = "AlbertModel"
    masked_lm = "AlbertForMaskedLM"
    sentence_head = "sentence-order head (sop_classifier)"
    heads = ("predictions.", "sop_classifier.")
    mapped = Bert.mapped + ("embedding_size", "num_hidden_groups", "inner_group_num", "bos_token_id",
                            "eos_token_id")
    ignored = {k: v for k, v in Bert.ignored.items() if k not in ("bos_token_id", "eos_token_id")} | {
        "classifier_dropout_prob": "dropout of a task head's input: training only"}
    required = Bert.required | {key: (value,) for key, value in LEFTOVERS.items()}
    vocab_default = DEFAULTS["vocab_size"]

    def spec_data(self, source: Source) -> dict:
        source = replace(source, config=DEFAULTS | source.config)
        c, where = source.config, source.where
        data = super().spec_data(source)
        mlm = data["head_transform"]
        encoder = data["encoder"] | self._sharing(c, where)
        return data | {"pooler": not mlm and (source.names is None or "pooler.weight" in source.names),
                       "embed_projection": {"width": number(c, "embedding_size", where),
                                            "out": None if mlm else "tied"},
                       "encoder": encoder}

    def _sharing(self, c: dict, where: str) -> dict:
        """The unrolled stack's size and its ``share_layers``, from L, G and K."""
        layers = number(c, "num_hidden_layers", where, default=12)
        groups, inner = number(c, "num_hidden_groups", where, default=1), number(c, "inner_group_num", where, default=1)
        for key, value in (("num_hidden_groups", groups), ("inner_group_num", inner)):
            if value < 1:
                raise TfspecError(f"{where}: {key} must be at least 1, got {value}")
        if layers < 1 or layers % groups:
            raise TfspecError(f"{where}: num_hidden_groups: {groups} is not supported with num_hidden_layers "
                              f"{layers}: transformers then runs its groups unequal numbers of times (or never), "
                              "which tfspec's share_layers does not state; use a divisor of num_hidden_layers")
        if layers == groups and inner > 1:
            raise TfspecError(f"{where}: inner_group_num: {inner} is not supported with num_hidden_groups equal to "
                              f"num_hidden_layers ({layers}): every group runs once, and tfspec imports such layers "
                              "only as inner_group_num 1")
        sharing = {"share_layers": {"cycle": inner, "repeats": layers // groups}} if layers > groups else {}
        return {"layers": layers * inner, **sharing}

    def _special_ids(self, source: Source, size: int) -> dict:
        c, where = source.config, source.where
        pad = 0 if c.get("pad_token_id") is None else number(c, "pad_token_id", where)
        return {"pad_id": pad, "unk_id": 1, "bos_id": number(c, "bos_token_id", where),
                "eos_id": number(c, "eos_token_id", where), "mask_id": 4}

    def rules(self, spec, architecture: str) -> list[Rule]:
        rules = [Rule("encoder.embed.weight", ("embeddings.word_embeddings.weight",)),
                 Rule("encoder.pos.weight", ("embeddings.position_embeddings.weight",)),
                 Rule("encoder.segment.weight", ("embeddings.token_type_embeddings.weight",)),
                 *norm_rules("encoder.embed_norm", "embeddings.LayerNorm"),
                 *_dense("encoder.project_in.weight", "encoder.project_in.bias", "encoder.embedding_hidden_mapping_in")]
        share = spec.encoder.share_layers
        run = 1 if share is None else share.run
        for layer in spec.plan("encoder"):
            if layer.owner != layer.index:
                continue  # its weights are its owner's
            ours = f"encoder.layers.{layer.index}."
            theirs = f"encoder.albert_layer_groups.{layer.index // run}.albert_layers.{layer.index % run}."
            qkv = [f"{theirs}attention.{part}" for part in ("query", "key", "value")]
            rules += [Rule(ours + "self_attn.w_qkv", tuple(f"{p}.weight" for p in qkv), Concat()),
                      Rule(ours + "self_attn.b_qkv", tuple(f"{p}.bias" for p in qkv), Concat()),
                      *_dense(ours + "self_attn.w_o", ours + "self_attn.b_o", theirs + "attention.dense"),
                      *norm_rules(ours + "self_attn_norm", theirs + "attention.LayerNorm"),
                      *_dense(ours + "ffn.w_1", ours + "ffn.b_1", theirs + "ffn"),
                      *_dense(ours + "ffn.w_2", ours + "ffn.b_2", theirs + "ffn_output"),
                      *norm_rules(ours + "ffn_norm", theirs + "full_layer_layer_norm")]
        if spec.pooler:
            rules += _dense("encoder.pooler.w_pool", "encoder.pooler.b_pool", "pooler")
        return rules + (self._head_rules() if spec.head_transform else [])

    def _head_rules(self) -> list[Rule]:
        return [*_dense("head.dense.weight", "head.dense.bias", "predictions.dense"),
                *norm_rules("head.norm", "predictions.LayerNorm"), Rule("output.bias", ("predictions.bias",))]

    def dropped(self, architecture: str) -> dict[str, str]:
        dropped = {"embeddings.position_ids": "a buffer of position indices, not a weight",
                   "embeddings.token_type_ids": "a buffer of zeros (the default token types), not a weight",
                   "sop_classifier.*": "the sentence-order head, which tfspec does not import"}
        if architecture == self.export_architecture:
            return dropped | {"predictions.*": f"the masked-LM head, not part of {architecture}"}
        return dropped | {"predictions.decoder.*": "the output projection, tied to the token embedding and "
                                                   "predictions.bias", "pooler.*": f"{architecture} has no pooler"}

    def config(self, spec) -> dict:
        share, layers = spec.encoder.share_layers, spec.encoder.num_layers
        cycle, run = (1, 1) if share is None else (share.cycle, share.run)
        return super().config(spec) | {
            "embedding_size": spec.embed_width, "num_hidden_layers": layers // cycle,
            "num_hidden_groups": layers // run, "inner_group_num": cycle,
            "bos_token_id": spec.vocab.bos_id, "eos_token_id": spec.vocab.eos_id}
