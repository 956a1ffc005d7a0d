"""Llama 4 as published (``model_type: llama4``): the language model of transformers'
Llama4ForConditionalGeneration, the class of meta-llama/Llama-4-Scout-17B-16E and
Llama-4-Maverick-17B-128E (and their -Instruct), whose config.json nests the text model's
configuration in ``text_config`` and the vision tower's in ``vision_config``.

tfspec imports the text model: ``text_config`` read as ``llama4.py``'s Llama 4 (text) reads a
``llama4_text`` file (its fields checked there, by name), the tensors under ``language_model.``
(``language_model.model.*`` and ``language_model.lm_head.weight``), and the count that of
Llama4ForCausalLM built from text_config. The vision tower (``vision_model.*``) and the
multimodal projector (``multi_modal_projector.*``) are left out with one note. A prompt of text
alone reaches the language model only (transformers merges image features in at image tokens,
with pixel values), so the import computes what Llama4ForConditionalGeneration computes for
text. ``export --format hf`` writes the text model (``llama4_text``, Llama4ForCausalLM).
"""

from __future__ import annotations

from dataclasses import replace

from tfspec.errors import TfspecError
from tfspec.interop.hf.family import Rule, Source, _show, check_config, register
from tfspec.interop.hf.llama4 import Llama4Text

TEXT = "Llama4ForCausalLM"
"""The class of the language model inside Llama4ForConditionalGeneration (``language_model``)."""
VISION = ("the vision tower and multimodal projector of Llama4ForConditionalGeneration (vision_config): tfspec "
          "imports the text model")


@register
class Llama4(Llama4Text):
    model_type = "llama4"
    title = "Llama 4"
    architectures = {"Llama4ForConditionalGeneration": "language_model.model."}
    export_architecture = "Llama4ForConditionalGeneration"
    mapped = ("text_config",)
    required = {"tie_word_embeddings": (False,)}
    ignored = {"vision_config": VISION,
               **dict.fromkeys(("boi_token_index", "eoi_token_index", "image_token_index"),
                               "ids of the image tokens, whose embeddings only the vision tower's features replace")}
    export_rank = 1
    leaves_out = VISION

    def _text(self, config: dict, where: str) -> dict:
        """``text_config``: an object (absent: Llama4TextConfig's defaults, as transformers reads it)."""
        text = config.get("text_config") or {}
        if not isinstance(text, dict):
            raise TfspecError(f"{where}: text_config must be an object (the text model's configuration), "
                              f"got {_show(text)}")
        if text.get("model_type", "llama4_text") != "llama4_text":
            raise TfspecError(f"{where}: text_config.model_type: {_show(text['model_type'])} is not supported; "
                              "tfspec reads Llama 4's text model, llama4_text")
        return text

    def check(self, config: dict, where: str) -> dict[str, str]:
        """The top level's fields, then text_config's as a ``llama4_text`` file's."""
        text = check_config(Llama4Text(), self._text(config, where), f"{where} (text_config)")
        return check_config(self, config, where) | {f"text_config.{key}": why for key, why in text.items()}

    def spec_data(self, source: Source) -> dict:
        text = self._text(source.config, source.where)
        return super().spec_data(replace(source, config=text, where=f"{source.where} (text_config)", architecture=TEXT))

    def rename(self, name: str) -> str:
        # the output projection sits beside the text model, not under its base prefix
        return super().rename(name.removeprefix("language_model."))

    def rules(self, spec, architecture: str) -> list[Rule]:
        return super().rules(spec, TEXT)

    def dropped(self, architecture: str) -> dict[str, str]:
        return super().dropped(TEXT) | {"vision_model.*": VISION, "multi_modal_projector.*": VISION}

    def count_differences(self, spec, architecture: str) -> list[tuple[int, str]]:
        return super().count_differences(spec, TEXT)

    def structure(self, spec) -> str | None:
        return (f"{self.title}'s published class holds a vision tower tfspec does not build; export writes the text "
                f"model ({Llama4Text.title}, {TEXT})")
