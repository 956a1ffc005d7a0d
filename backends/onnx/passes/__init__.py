"""Rewrites of emitted graphs and the weight policies applied while emitting, one per module:
fused operators (``fused``), clean-ups (``tidy``), int4 and int8 weights (``int4``, ``int8``) and
activation-aware int4 scales (``awq``). Each pass says what it changed."""
