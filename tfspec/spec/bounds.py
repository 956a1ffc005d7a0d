"""The ranges a real model's numbers can have, enforced by the schema.

Past them lies overflow in numpy and int32 arithmetic, minutes of IR building, or a
``torch.empty`` that cannot succeed, not a model. Each bound leaves wide headroom over the
largest published value (noted beside it), so anything a real model uses validates and
analyses; sizes beyond this machine's memory still validate and report (``tfspec report``)
and are refused by ``compile``/``export`` before allocating (``tfspec.spec.bounds.check_allocatable``).
The bounds land in the JSON Schema (``minimum``/``maximum``), so editors show them.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

MAX_WIDTH = 2**20
"""d_model, d_k, d_v, d_ff: PaLM's d_ff is 73,728 (14x headroom)."""
MAX_HEADS = 4096
"""Attention heads: published models use at most 128."""
MAX_VOCAB = 2**24
"""Vocabulary rows: published vocabularies reach ~256k (byte-level: 1M)."""
MAX_POSITIONS = 2**24
"""Longest sequence (max_len), attention reach r, relative distances: 16M tokens."""
MAX_LAYERS = 1024
"""Layers in one stack (unrolled): published models use at most ~200. The IR holds one
node per sub-layer, so this also bounds how long validation takes."""
MAX_BLOCK = 64
"""Sub-layers in one layer's block: published blocks have 2-3."""
MAX_KERNEL = 4096
"""Convolution width."""
MAX_DILATION = 2**20
MAX_SEGMENTS = 2**16
"""Segment (token type) rows: BERT uses 2."""
MAX_CHANNELS = 64
"""Channels of an image input: RGB has 3, RGBA 4; multispectral images reach dozens."""
MAX_STEPS = 10**12
MAX_SPEC_BYTES = 2**21
"""A spec file: shipped specs are ~1 KB; 2 MiB of YAML already takes seconds to parse."""
MAX_SPEC_VALUES = 100_000
"""Values a spec file stands for with its aliases expanded (a 2 MiB file holds ~500,000 without
any; nested aliases multiply)."""
MAX_TEXT = 4096
"""Characters in a name, path or description."""

Width = Annotated[int, Field(ge=1, le=MAX_WIDTH)]
Heads = Annotated[int, Field(ge=1, le=MAX_HEADS)]
MIN_VOCAB = 6
"""Tokens in a vocabulary: the four special ids and at least two ordinary ones."""
VocabSize = Annotated[int, Field(ge=1, le=MAX_VOCAB)]
TokenId = Annotated[int, Field(ge=0, lt=MAX_VOCAB)]
Positions = Annotated[int, Field(ge=1, le=MAX_POSITIONS)]
Reach = Annotated[int, Field(ge=0, le=MAX_POSITIONS)]
"""Positions a local attention sees beyond its query block (0: none)."""
Layers = Annotated[int, Field(ge=1, le=MAX_LAYERS)]
Kernel = Annotated[int, Field(ge=1, le=MAX_KERNEL)]
Dilation = Annotated[int, Field(ge=1, le=MAX_DILATION)]
Segments = Annotated[int, Field(ge=0, le=MAX_SEGMENTS)]
Steps = Annotated[int, Field(ge=1, le=MAX_STEPS)]
Channels = Annotated[int, Field(ge=1, le=MAX_CHANNELS)]
Epsilon = Annotated[float, Field(gt=0.0, le=1.0)]
"""Norm epsilon: published values are 1e-12..1e-5."""
RotaryBase = Annotated[float, Field(gt=1.0, le=1e12)]
"""Rotary wavelength base: published 1e4..1e8."""
RopeFactor = Annotated[float, Field(gt=0.0, le=1e6)]
"""Rotary frequency scaling factors: Llama 3.1 uses 8, 1 and 4; Llama 3.2 factor 32."""
Fraction = Annotated[float, Field(gt=0.0, le=1.0)]
"""A share of features, e.g. the rotated part of each head (GPT-NeoX: 0.25)."""
Text = Annotated[str, Field(max_length=MAX_TEXT)]

MAX_BUCKETS = 2**16
"""Distance buckets of a relative attention bias: T5 uses 32."""
