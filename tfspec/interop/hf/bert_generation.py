"""BertGeneration (``model_type: bert-generation``): transformers' BertGenerationEncoder as a
tfspec spec (google/bert_for_seq_generation_L-24_bbc_encoder and the other checkpoints of
Rothe et al. 2020, "Leveraging Pre-trained Checkpoints for Sequence Generation Tasks").

BERT's computation and tensor names (``bert.py``: post-norm layers, learned positions from row
0, a LayerNorm on the embeddings) without token type embeddings and without a pooler: the
encoder's last hidden states are its output. Its sentencepiece vocabulary puts pad, eos and
bos at 0, 1 and 2 (the config's ids) and <unk> at 3. Defaults are BertGenerationConfig's
(BERT-large's shape, a 50358-token vocabulary).
"""

from __future__ import annotations

from tfspec.interop.hf.bert import Bert
from tfspec.interop.hf.family import Family, Rule, Source, number, register


@register
class BertGeneration(Bert):
    model_type = "bert-generation"
    title = "BertGeneration"
    architectures = {"BertGenerationEncoder": ""}
    export_architecture = "BertGenerationEncoder"
    task_heads = None
    mapped = tuple(key for key in Bert.mapped if key != "type_vocab_size") + ("bos_token_id", "eos_token_id")
    ignored = {key: why for key, why in Bert.ignored.items() if key not in ("bos_token_id", "eos_token_id")}
    vocab_default = 50358
    export_rank = 1  # DistilBertModel computes the same specs and is what people load

    def spec_data(self, source: Source) -> dict:
        c, where = source.config, source.where
        layers = number(c, "num_hidden_layers", where, default=24)
        return super().spec_data(source) | {
            "segments": 0, "pooler": False, "d_model": number(c, "hidden_size", where, default=1024),
            "heads": number(c, "num_attention_heads", where, default=16),
            "d_ff": number(c, "intermediate_size", where, default=4096),
            "encoder": {"layers": layers, "block": ["self_attention", "ffn"]}}

    def _special_ids(self, source: Source, size: int) -> dict:
        """pad, eos and bos from the config; <unk> from the vocabulary, else sentencepiece's 3."""
        c, where = source.config, source.where
        return {"pad_id": number(c, "pad_token_id", where, default=0),
                "eos_id": number(c, "eos_token_id", where, default=1),
                "bos_id": number(c, "bos_token_id", where, default=2), "unk_id": source.vocabulary.get("<unk>", 3)}

    def rules(self, spec, architecture: str) -> list[Rule]:
        return [rule for rule in super().rules(spec, architecture) if rule.ir != "encoder.segment.weight"]

    def structure(self, spec) -> str | None:
        if reason := Family.structure(self, spec):
            return reason
        if spec.segments:
            return f"{self.title} adds no segment (token type) embeddings: set segments: 0"
        if spec.pooler or spec.head_transform:
            return f"transformers' {self.export_architecture} has no pooler and no head: drop pooler and head_transform"
        return None

    def outputs(self, architecture: str) -> dict[str, str]:
        return {"memory": "last_hidden_state"}

    def config(self, spec) -> dict:
        config = {key: value for key, value in super().config(spec).items() if key != "type_vocab_size"}
        return config | {"bos_token_id": spec.vocab.bos_id, "eos_token_id": spec.vocab.eos_id}
