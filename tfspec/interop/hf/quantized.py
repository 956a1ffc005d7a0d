"""Quantized checkpoints as their repositories publish them (``quantization_config``), read as
transformers dequantizes them on loading: one module per ``quant_method`` (``mxfp4.py``: gpt-oss;
``fp8.py``: DeepSeek-V3), each with the settings it reads (``check_settings``) and the
checkpoint whose quantized tensors it reads dequantized, one at a time (``dequantized``). A family
names the methods its published checkpoints use (``Family.quantized``); any other is refused."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tfspec.interop.hf import fp8, mxfp4

if TYPE_CHECKING:
    from tfspec.interop.hf.checkpoint import Checkpoint

METHODS = {module.METHOD: module for module in (mxfp4, fp8)}


def quant_method(settings) -> str | None:
    """A ``quantization_config``'s ``quant_method`` (None for none, or for a value that is no object)."""
    return settings.get("quant_method") if isinstance(settings, dict) else None


def dequantized(checkpoint: Checkpoint) -> Checkpoint:
    """``checkpoint`` with its quantized tensors read as transformers dequantizes them, where its
    configuration names a method of ``METHODS`` (the family has accepted it); else itself."""
    settings = checkpoint.config.get("quantization_config")
    method = quant_method(settings)
    return METHODS[method].dequantized(checkpoint, settings) if method in METHODS else checkpoint
