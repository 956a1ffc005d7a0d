"""What a model family module declares, and the checks every family shares.

A family (``bert.py``, ``gpt2.py``; ``llama.py`` drops in the same way) is a class registered
with ``@register``. It says which ``config.json`` fields it maps into the spec, which values
of other fields it computes exactly (``required``: anything else is refused by name), which
fields do not change the computation (``ignored``, each with its reason), and how its tensors
are named (``rules``: one table used in both directions). A field on none of the lists is
refused: a typo or a new transformers option must never be dropped silently. A family module
registers itself when imported: the package imports every module of its folder
(``tfspec.registry.discover``), so a new family is one new file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from tfspec.errors import TfspecError
from tfspec.interop.hf.layouts import Copy, Layout
from tfspec.interop.hf.quantized import METHODS, quant_method

if TYPE_CHECKING:
    from tfspec.interop.hf.task_heads import Pooled

FAMILIES: dict[str, type[Family]] = {}

COMMON_IGNORED = {
    **dict.fromkeys(("transformers_version", "_name_or_path", "_commit_hash", "torch_dtype", "dtype",
                     "model_type", "architectures"), "bookkeeping (architectures and model_type are read first)"),
    **dict.fromkeys(("auto_map", "custom_pipelines"), "pointers to the repository's own code (trust_remote_code), "
                    "which transformers does not run for a model type it has a class of; tfspec reads the "
                    "configuration as that class does"),
    "_attn_implementation_autoset": "bookkeeping of transformers 4.4x (which attention kernel it picked)",
    **dict.fromkeys(("use_cache", "return_dict", "output_hidden_states", "output_attentions", "torchscript",
                     "use_bfloat16", "gradient_checkpointing", "chunk_size_feed_forward", "_attn_implementation",
                     "attn_implementation", "output_past", "xla_device", "tie_encoder_decoder"),
                    "how transformers runs the model (outputs, caching, memory), not what it computes"),
    "tf_legacy_loss": "the loss of transformers 4's TensorFlow models: training only",
    **dict.fromkeys(("id2label", "label2id", "num_labels", "problem_type"), "the labels of a task head, which a "
                    "*ForSequenceClassification, *ForTokenClassification or *ForQuestionAnswering import reads"),
    "classifier_dropout": "dropout of a task head's input: training only",
    "finetuning_task": "the name of the task a head was fine-tuned on: bookkeeping",
    **dict.fromkeys(("summary_type", "summary_use_proj", "summary_activation", "summary_proj_to_labels",
                     "summary_first_dropout", "summary_last_dropout"), "classification heads tfspec does not import"),
    **dict.fromkeys(("tokenizer_class", "prefix", "sep_token_id", "decoder_start_token_id", "task_specific_params",
                     "max_length", "min_length", "do_sample", "early_stopping", "num_beams", "num_beam_groups",
                     "diversity_penalty", "temperature", "top_k", "top_p", "typical_p", "repetition_penalty",
                     "length_penalty", "no_repeat_ngram_size", "encoder_no_repeat_ngram_size", "bad_words_ids",
                     "num_return_sequences", "output_scores", "return_dict_in_generate", "forced_bos_token_id",
                     "forced_eos_token_id", "remove_invalid_values", "exponential_decay_length_penalty",
                     "suppress_tokens", "begin_suppress_tokens", "encoder_repetition_penalty", "epsilon_cutoff",
                     "eta_cutoff", "num_assistant_tokens", "num_assistant_tokens_schedule",
                     "assistant_confidence_threshold", "assistant_lookbehind", "target_lookbehind"),
                    "tokenizer and generation settings (transformers moves the latter to generation_config)"),
    "initializer_range": "initialisation of untrained weights",
    "_num_labels": "an old spelling of num_labels (distilgpt2, bart-large): classification heads tfspec does not import",
    "force_bos_token_to_be_generated": "an old generation setting (bart-large-cnn), now forced_bos_token_id",
}
"""PretrainedConfig's own fields that no family's computation reads, with the reason."""

COMMON_REQUIRED = {"is_encoder_decoder": (False,), "pruned_heads": ({},), "add_cross_attention": (False,),
                   "cross_attention_hidden_size": (None,)}
"""Fields whose other values would change the computation of every family imported so far
(``quantization_config`` besides: ``Family.quantized``)."""


@dataclass(frozen=True)
class Source:
    """What a family maps into a spec: the configuration and what the checkpoint shows."""

    config: dict
    where: str
    """The configuration's file, for messages."""
    architecture: str
    names: frozenset[str] | None = None
    """Tensor names, the base model's prefix removed; None for a configuration alone."""
    vocabulary: dict[str, int] = field(default_factory=dict)
    """Token -> id from the tokenizer files (vocab.txt, vocab.json), to find special tokens."""


@dataclass(frozen=True)
class Rule:
    """One IR parameter, the checkpoint tensors it comes from, and how they hold it (its
    ``layout``, ``layouts.py``: stored as is by default)."""

    ir: str
    hf: tuple[str, ...]
    layout: Layout = Copy()

    def hf_shapes(self, shape: tuple[int, ...]) -> dict[str, tuple[int, ...]]:
        """Checkpoint tensor -> its shape, for an IR parameter of ``shape``."""
        return dict(zip(self.hf, self.layout.hf_shapes(tuple(shape), len(self.hf)), strict=True))

    def to_ir(self, parts: list[np.ndarray]) -> np.ndarray:
        """The IR parameter of the checkpoint tensors ``parts`` (in ``hf``'s order)."""
        return self.layout.to_ir(parts)

    def to_hf(self, value: np.ndarray) -> dict[str, np.ndarray]:
        """Checkpoint tensor -> its values (its part, where several rules write one) of the IR ``value``."""
        return dict(zip(self.hf, self.layout.to_hf(value, len(self.hf)), strict=True))


SHAPES = {"encoder-decoder": "an encoder-decoder", "decoder-only": "a decoder alone", "encoder-only": "an encoder alone"}
"""How ``Family.structure`` names a spec family."""


class Family:
    """Base of the family modules: the lists below, and the four mappings."""

    model_type: ClassVar[str]
    title: ClassVar[str]
    """How people write the name (GPT-2)."""
    architectures: ClassVar[dict[str, str]]
    """transformers class -> the prefix its checkpoints put before the base model's tensors."""
    export_architecture: ClassVar[str]
    mapped: ClassVar[tuple[str, ...]]
    """Fields ``spec_data`` reads."""
    required: ClassVar[dict[str, tuple]] = {}
    """Field -> the values tfspec computes exactly (beyond ``COMMON_REQUIRED``)."""
    ignored: ClassVar[dict[str, str]] = {}
    """Field -> why it does not change the computation (beyond ``COMMON_IGNORED``)."""
    defaults: ClassVar[dict] = {}
    """transformers' configuration class's values of the fields whose fallback in ``spec_data``
    (a parent family's) differs: what a ``config.json`` leaving the field out means
    (MistralConfig's intermediate_size 14336, not Llama's 11008). Hand-copied, as transformers
    is no dependency of tfspec; ``tests/test_import_defaults.py`` checks them against it."""
    free: ClassVar[tuple[str, ...]] = ("dropout", "attention_dropout", "activation_dropout", "label_smoothing",
                                       "vocab.unk_id", "vocab.mask_id")
    """Spec fields (dotted) the exported model does not compute with (training settings, ids
    only tokenizers read): a spec may set them as it likes and still fit the family."""

    heads: ClassVar[tuple[str, ...]] = ()
    """Name prefixes of tensors outside the base model (no architecture prefix before them)."""
    family: ClassVar[str]
    """The spec family (``encoder-decoder``, ``decoder-only``, ``encoder-only``) its models are."""
    grouped: ClassVar[bool] = False
    """Whether ``config`` describes stacks whose layers differ (SmolLM3's layers without
    positions among rotary ones); other families' configurations repeat one layer, and
    ``export --format hf`` refuses them a stack of groups of different blocks."""
    task_heads: ClassVar[Pooled | None] = None
    """How the family's *ForSequenceClassification reads the first position, which gives it its
    *ForSequenceClassification, *ForTokenClassification and *ForQuestionAnswering
    (``task_heads.py``); None: no task classes (decoders, BertGeneration)."""
    leaves_out: ClassVar[str | None] = None
    """What of the published class the import leaves out (Llama 4's vision tower), the reason
    its left-out tensors are noted under; a configuration imported alone notes it once too."""
    task_class: ClassVar[type | None] = None
    """The ``task_heads.TaskHeads`` subclass that puts the task classes in front of the family, where
    its heads read settings of their own from the configuration (ModernBERT's); None: TaskHeads."""
    quantized: ClassVar[tuple[str, ...]] = ()
    """The ``quantization_config`` quant_methods of published checkpoints the import reads,
    dequantizing each tensor as transformers does (``quantized.py``: gpt-oss's mxfp4, DeepSeek-V3's
    fp8); any other quantization_config is refused by name."""
    aliases: ClassVar[dict[str, str]] = {}
    """Field a repository's own code reads -> the field transformers reads for the same value
    (Nemotron-H's attention_head_dim for head_dim): accepted where the two agree, refused where they
    differ (the published weights then fit one reading only)."""
    export_rank: ClassVar[int] = 0
    """Where two families compute the same spec, ``export --format hf`` writes the lower rank's
    class (a family few people load ranks 1), then the first by model type."""

    def spec_data(self, source: Source) -> dict:
        """The spec (as YAML-ready data) of a configuration and what its checkpoint holds."""
        raise NotImplementedError

    def check(self, config: dict, where: str) -> dict[str, str]:
        """``check_config`` of ``config`` (a family reading a nested configuration checks that too:
        Llama 4's text_config): the fields present that do not change the computation -> why."""
        return check_config(self, config, where)

    def rename(self, name: str) -> str:
        """A tensor name as current transformers writes it (older checkpoints differ)."""
        return name

    def rules(self, spec, architecture: str) -> list[Rule]:
        """Every IR parameter of ``spec`` and its tensors in ``architecture``'s checkpoints."""
        raise NotImplementedError

    def dropped(self, architecture: str) -> dict[str, str]:
        """Tensor name patterns (``fnmatch``) a checkpoint may hold that ``architecture`` does not
        use -> why; such tensors are left out with a note, any other unused tensor is refused."""
        return {}

    def structure(self, spec) -> str | None:
        """Why ``spec`` cannot be this family at all (checked before ``config``), or None."""
        if spec.family != self.family:
            return f"{self.title} is {SHAPES[self.family]}; this spec is {spec.family}"
        return None

    def config(self, spec) -> dict:
        """``config.json`` of ``spec`` for ``export_architecture(spec)``."""
        raise NotImplementedError

    def architecture_for(self, spec) -> str:
        return self.export_architecture

    def count_differences(self, spec, architecture: str) -> list[tuple[int, str]]:
        """Where transformers' ``num_parameters()`` of ``architecture``, built from the
        configuration ``spec`` was imported from, counts otherwise than tfspec: (how many more
        it counts, negative for fewer; what, as "<what> it stores as parameters") per convention.
        None by default: most families count alike."""
        return []

    def outputs(self, architecture: str) -> dict[str, str]:
        """tfspec output port -> the output of ``architecture`` that must equal it."""
        return {"logits": "logits"}


def register(cls: type[Family]) -> type[Family]:
    """Class decorator: file ``cls`` under its model type (the package then puts its task
    classes in front, ``task_heads.with_task_heads``); returns ``cls`` itself, for families that
    extend it."""
    if cls.model_type in FAMILIES:
        raise ValueError(f"family {cls.model_type!r} registered twice")
    FAMILIES[cls.model_type] = cls
    return cls


def check_config(family: Family, config: dict, where: str) -> dict[str, str]:
    """Refuse, by name, each field whose value tfspec would not compute exactly or does not know;
    return the fields present that do not change the computation (field -> why), for the record."""
    required = COMMON_REQUIRED | family.required
    ignored = COMMON_IGNORED | family.ignored
    known = set(family.mapped) | ignored.keys() | family.aliases.keys() | {"quantization_config"}
    for key, value in config.items():
        if key in required and not any(same_json(value, v) for v in required[key]):
            allowed = " or ".join(json.dumps(v) for v in required[key])
            raise TfspecError(f"{where}: {key}: {_show(value)} is not supported; tfspec imports {family.title} "
                              f"with {key} {allowed}")
        if key not in required and key not in known:
            raise TfspecError(f"{where}: unknown field {key} ({_show(value)}) in a {family.model_type} config; tfspec "
                              "cannot tell whether it changes the computation, so it does not import it")
    _check_quantization(family, config.get("quantization_config"), where)
    for alias, field_name in family.aliases.items():
        theirs = (family.defaults | config).get(field_name)
        if alias in config and not same_json(config[alias], theirs):
            raise TfspecError(f"{where}: {alias} ({_show(config[alias])}) differs from {field_name} ({_show(theirs)}), "
                              f"which transformers' {family.title} reads for the same thing; tfspec imports a "
                              "configuration whose two readings agree")
    read = set(family.mapped) | required.keys() | {"model_type", "architectures"}
    return {key: ignored[key] for key in config if key in ignored and key not in read}


def _check_quantization(family: Family, settings: Any, where: str) -> None:
    """A quantization_config is one of the family's ``quantized`` methods, its settings those the
    method reads (fp8's block size and formats), or is absent."""
    if settings is None:
        return
    method = quant_method(settings)
    if method not in family.quantized:
        published = (f" or as published, quant_method {' or '.join(family.quantized)} (dequantized)"
                     if family.quantized else "")
        raise TfspecError(f"{where}: quantization_config: {_show(settings)} is not supported; tfspec imports "
                          f"{family.title} unquantized{published}")
    METHODS[method].check_settings(settings, f"{where}: quantization_config")


def same_json(value: Any, allowed: Any) -> bool:
    """Whether ``value`` is ``allowed`` as JSON tells values apart: true is not 1 nor 1.0 the
    integer 1, though Python's == says both; an integer is the float it equals (a file's 1 for 1.0)."""
    if isinstance(value, bool) or isinstance(allowed, bool):
        return type(value) is type(allowed) and value == allowed
    return not (isinstance(value, float) and isinstance(allowed, int)) and value == allowed


def _show(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def number(config: dict, key: str, where: str, kind=int, default=None, nullable: bool = False):
    """``config[key]`` checked to be a number of ``kind``: every family reads its numbers here,
    as JSON types them (true is no integer, 8.0 no count; an integer is a float). ``nullable``:
    null (None) is an answer too, for fields transformers types ``int | None``."""
    value = config.get(key, default)
    if value is None and nullable:
        return None
    ok = isinstance(value, kind) or (kind is float and isinstance(value, int))
    if not ok or isinstance(value, bool):
        raise TfspecError(f"{where}: {key} must be {'an integer' if kind is int else 'a number'}, got {_show(value)}")
    return value


def flag(config: dict, key: str, where: str, default: bool = False) -> bool:
    """``config[key]`` checked to be true or false: every family reads its switches here (a string
    "false" is not a switch, though ``bool`` of it is true; nor is 0)."""
    value = config.get(key, default)
    if not isinstance(value, bool):
        raise TfspecError(f"{where}: {key} must be true or false, got {_show(value)}")
    return value


def end_ids(config: dict, where: str, default) -> dict:
    """``eos_id``, and ``eos_ids`` when the config lists several, from ``eos_token_id``: one id
    or a list (Llama 3.1 Instruct's three), whose first is the one tfspec appends and writes."""
    value = config.get("eos_token_id", default)
    listed = [number({"eos_token_id": v}, "eos_token_id", where) for v in (value if isinstance(value, list) and value
                                                                           else [value])]
    return {"eos_id": listed[0], **({"eos_ids": listed} if len(set(listed)) > 1 else {})}


ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "relu": "relu",
               "relu2": "relu2", "silu": "silu", "swish": "silu"}
"""transformers' activation names (``ACT2FN``) that are exactly one of tfspec's."""
ACTIVATION_NAMES = {"gelu": "gelu", "gelu_tanh": "gelu_new", "relu": "relu", "relu2": "relu2", "silu": "silu"}
"""tfspec activation -> the name transformers configs use for it."""


def activation(config: dict, key: str, where: str, default: str) -> str:
    value = config.get(key, default)
    if not isinstance(value, str) or value not in ACTIVATIONS:
        raise TfspecError(f"{where}: {key}: {_show(value)} is not supported; tfspec computes "
                          f"{', '.join(ACTIVATIONS)}")
    return ACTIVATIONS[value]


def repeated_layer(spec, stack: str) -> tuple:
    """The resolved (``Spec.plan``) self-attention and feed-forward sub-layers of the first layer
    of ``stack``: what the configuration of a family that repeats one layer describes (``export``
    has checked that the layers are alike). Where that layer has no such sub-layer (recurrent or
    convolutional layers, experts in place of the feed-forward layer) a default one resolved
    against the spec stands in: the configuration then describes layers the spec does not have,
    and ``misfit`` refuses it, naming the fields that differ."""
    from tfspec.layers.attention import SelfAttention  # here: the layers import the schema, which imports them
    from tfspec.layers.ffn import FeedForward

    first = spec.plan(stack)[0]
    return first.attention or SelfAttention().resolved(spec), first.ffn or FeedForward().resolved(spec)


def norm_rules(ours: str, theirs: str) -> list[Rule]:
    """A LayerNorm's scale and shift, named alike on both sides."""
    return [Rule(f"{ours}.weight", (f"{theirs}.weight",)), Rule(f"{ours}.bias", (f"{theirs}.bias",))]
