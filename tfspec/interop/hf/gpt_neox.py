"""GPT-NeoX (``model_type: gpt_neox``): transformers' GPTNeoXForCausalLM and GPTNeoXModel as
tfspec specs (EleutherAI/gpt-neox-20b, the Pythia suite, StableLM-alpha, RedPajama-INCITE).

StableLM (``stablelm.py``: LayerNorms, rotary positions on the first ``rotary_pct`` of each
head's features, 0.25 unless said, untied output) with four differences: attention and MLP
read the layer's input in parallel, each through its own LayerNorm (``residual: parallel``;
``use_parallel_residual: false`` gives the sequential pre-norm layer); the MLP is one GELU
layer, not gated, and always biased; the query, key, value and output projections are biased
unless ``attention_bias`` is false; ``query_key_value`` holds each head's query, key and value
rows together (``layouts.PerHead``); the output projection is stored as ``embed_out``
(transformers 5 calls it lm_head in memory and writes that name back). transformers 4 files name the rotary settings
``rotary_pct`` and ``rotary_emb_base``; ``rope_parameters`` (transformers 5), when set, wins.
``gelu_fast`` (gpt-neox-20b) is tanh GELU with sqrt(2/pi) written to ten digits: in float32 it
differs from ``gelu_new`` no more than ``gelu_new`` from ``gelu_pytorch_tanh``. Defaults are
GPTNeoXConfig's (gpt-neox-20b's shape).
"""

from __future__ import annotations

from dataclasses import replace

from tfspec.interop.hf.family import Rule, Source, flag, norm_rules, number, register, repeated_layer
from tfspec.interop.hf.layouts import PerHead
from tfspec.interop.hf.stablelm import StableLm

OLD_ROTARY = {"rotary_emb_base": "rope_theta", "rotary_pct": "partial_rotary_factor"}
"""transformers 4's names for the rotary settings -> the names Llama's rotary reads."""


@register
class GPTNeoX(StableLm):
    model_type = "gpt_neox"
    title = "GPT-NeoX"
    architectures = {"GPTNeoXForCausalLM": "gpt_neox.", "GPTNeoXModel": ""}
    export_architecture = "GPTNeoXForCausalLM"
    heads = ("embed_out.",)
    mapped = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
              "hidden_act", "max_position_embeddings", "layer_norm_eps", "rope_parameters", "rope_scaling",
              "rotary_pct", "rotary_emb_base", "attention_bias", "use_parallel_residual", "tie_word_embeddings",
              "bos_token_id", "eos_token_id", "pad_token_id", "attention_dropout", "hidden_dropout")
    required = {}
    ignored = {"is_decoder": "GPT-NeoX is causal whatever this says; transformers' GPT-NeoX does not read it",
               **dict.fromkeys(("attention_probs_dropout_prob", "hidden_dropout_prob"),
                               "older spellings of the dropouts; transformers' GPT-NeoX reads neither")}
    rope_types = ("default",)
    defaults = {"vocab_size": 50432, "hidden_size": 6144, "intermediate_size": 24576, "num_hidden_layers": 44,
                "num_attention_heads": 64, "hidden_act": "gelu", "max_position_embeddings": 2048,
                "bos_token_id": 0, "eos_token_id": 2}
    """GPTNeoXConfig's values where Llama's differ (those ``Llama.spec_data`` falls back on)."""
    names = {"embed": "embed_in", "layers": "layers", "attention": "attention", "final": "final_layer_norm",
             "output": "embed_out"}
    """Where this family's checkpoints keep the embedding, the layers, their attention, the final
    norm and the output projection."""
    buffers = {**{f"layers.*.attention.{b}": "the causal-mask buffer of older checkpoints (Pythia's)"
                  for b in ("bias", "masked_bias")},
               "layers.*.attention.rotary_emb.inv_freq": "rotary frequencies, computed from the config"}
    """Tensors older checkpoints store beside the weights, which the computation does not read."""

    def spec_data(self, source: Source) -> dict:
        c, where = self.defaults | source.config, source.where
        if c.get("hidden_act") == "gelu_fast":  # gpt-neox-20b's: tanh GELU to float32 rounding (docstring)
            c = c | {"hidden_act": "gelu_new"}
        return super().spec_data(replace(source, config=c)) | {
            "gated": False, "bias": True, "biases": self._projection_biases(c, where),
            "residual": self._residual(c, where)}

    def _projection_biases(self, c: dict, where: str) -> dict:
        attention = flag(c, "attention_bias", where, True)
        return {"q": attention, "k": attention, "v": attention, "o": attention, "ffn": True}

    def _residual(self, c: dict, where: str) -> str:
        return "parallel" if flag(c, "use_parallel_residual", where, True) else "sequential"

    def _rotary(self, c: dict, where: str) -> dict:
        old = {new: number(c, key, where, float) for key, new in OLD_ROTARY.items() if key in c}
        return super()._rotary(c | old, where)

    def rename(self, name: str) -> str:
        """The output projection under transformers 5's in-memory name (lm_head) as it is stored."""
        return self.names["output"] + name.removeprefix("lm_head") if name.startswith("lm_head.") else name

    def rules(self, spec, architecture: str) -> list[Rule]:
        n = self.names
        rules = [Rule("decoder.embed.weight", (f"{n['embed']}.weight",)), *norm_rules("decoder.norm", n["final"])]
        if spec.tie_embeddings == "none" and architecture.endswith("ForCausalLM"):
            rules.append(Rule("output.weight", (f"{n['output']}.weight",)))
        for layer in spec.plan("decoder"):
            (attn, ffn), theirs = layer.names, f"{n['layers']}.{layer.index}."
            qkv, dense = f"{theirs}{n['attention']}.query_key_value", f"{theirs}{n['attention']}.dense"
            rules += [*(r for ours, hf in self._norms(spec, attn, ffn) for r in norm_rules(ours, theirs + hf)),
                      self._qkv(f"{attn}.w_qkv", f"{qkv}.weight", layer.attention),
                      Rule(f"{attn}.w_o", (f"{dense}.weight",)),
                      Rule(f"{ffn}.w_1", (f"{theirs}mlp.dense_h_to_4h.weight",)),
                      Rule(f"{ffn}.w_2", (f"{theirs}mlp.dense_4h_to_h.weight",))]
            if spec.has_bias("q"):
                rules += [self._qkv(f"{attn}.b_qkv", f"{qkv}.bias", layer.attention),
                          Rule(f"{attn}.b_o", (f"{dense}.bias",))]
            if spec.has_bias("ffn"):
                rules += [Rule(f"{ffn}.b_1", (f"{theirs}mlp.dense_h_to_4h.bias",)),
                          Rule(f"{ffn}.b_2", (f"{theirs}mlp.dense_4h_to_h.bias",))]
        return rules

    def _norms(self, spec, attn: str, ffn: str) -> list[tuple[str, str]]:
        """(IR norm, checkpoint norm) of a layer: one before each sub-layer, parallel or not."""
        return [(f"{attn}_norm", "input_layernorm"), (f"{ffn}_norm", "post_attention_layernorm")]

    def _qkv(self, ours: str, theirs: str, attention) -> Rule:
        return Rule(ours, (theirs,), PerHead(attention.heads))

    def dropped(self, architecture: str) -> dict[str, str]:
        output = super().dropped(architecture)["lm_head.weight"]  # Llama's reason: tied, or no projection
        return {f"{self.names['output']}.weight": output, **self.buffers}

    def config(self, spec) -> dict:
        """StableLM's fields this family shares, and its own (the rotary settings under the names
        transformers 4 and 5 both read)."""
        shared = {k: v for k, v in super().config(spec).items() if k in self.mapped + ("architectures", "model_type")}
        positions = repeated_layer(spec, "decoder")[0].positions
        return shared | {"rotary_pct": positions.fraction, "rotary_emb_base": positions.base,
                         "attention_bias": spec.has_bias("q"), "use_parallel_residual": spec.residual == "parallel"}
