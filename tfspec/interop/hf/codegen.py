"""CodeGen (``model_type: codegen``): transformers' CodeGenForCausalLM and CodeGenModel as tfspec
specs (Salesforce/codegen-350M-mono, -2B, -6B, -16B in their nl, multi and mono variants).

GPT-J (``gptj.py``: one LayerNorm shared by attention and a biased MLP added in parallel,
rotary positions on the first ``rotary_dim`` features of each head in interleaved pairs, no
attention biases, a biased untied output) whose query, key and value projections are one
matrix ``qkv_proj`` stored in the order of the 4-way model parallelism CodeGen was trained
with: four blocks of rows, each holding its quarter of the queries, then of the values, then of
the keys (``ModelParallelQkv`` reorders them to tfspec's q, k, v at import, back at export).
``n_embd`` must therefore be a multiple of 4 (transformers cannot split it otherwise).
Defaults are CodeGenConfig's (codegen-6B's shape).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tfspec.errors import TfspecError
from tfspec.interop.hf.cohere import InterleavedRotary
from tfspec.interop.hf.family import Rule, Source, number, register
from tfspec.interop.hf.gptj import GPTJ

MP_NUM = 4
"""The model-parallel blocks of CodeGen's qkv_proj (transformers' ``mp_num``, fixed at 4)."""


@dataclass(frozen=True)
class ModelParallelQkv(InterleavedRotary):
    """CodeGen's ``qkv_proj`` rows, (4, [q, v, k], d / 4), as tfspec's q, k, v rows, then with
    the rotary features of each head in ``InterleavedRotary``'s order."""

    def _order(self, rows: int) -> np.ndarray:
        blocks = np.arange(rows).reshape(MP_NUM, 3, rows // (3 * MP_NUM))
        return blocks[:, [0, 2, 1]].transpose(1, 0, 2).ravel()[super()._order(rows)]


@register
class CodeGen(GPTJ):
    model_type = "codegen"
    title = "CodeGen"
    architectures = {"CodeGenForCausalLM": "transformer.", "CodeGenModel": ""}
    export_architecture = "CodeGenForCausalLM"
    export_rank = 1  # its specs are GPT-J's (only the stored qkv order differs): export writes GPT-J
    ignored = GPTJ.ignored | {"n_ctx": "kept by CodeGenConfig for old checkpoints; transformers never reads it"}
    defaults = GPTJ.defaults
    """CodeGenConfig's values where GPT-2's differ: GPT-J's."""

    def spec_data(self, source: Source) -> dict:
        d_model = number(self.defaults | source.config, "n_embd", source.where)
        if d_model % MP_NUM:
            raise TfspecError(f"{source.where}: n_embd ({d_model}) must be a multiple of {MP_NUM}: CodeGen stores "
                              f"its query, key and value rows in {MP_NUM} model-parallel blocks")
        return super().spec_data(source)

    def rules(self, spec, architecture: str) -> list[Rule]:
        """GPT-J's, the three projections read from the one ``qkv_proj``."""
        out = []
        for rule in super().rules(spec, architecture):
            if rule.ir.endswith(".w_qkv"):
                stored = rule.hf[0].replace(".q_proj.", ".qkv_proj.")
                a = rule.layout
                rule = Rule(rule.ir, (stored,), ModelParallelQkv(width=a.width, rotary=a.rotary, rotated=a.rotated))
            out.append(rule)
        return out

    def dropped(self, architecture: str) -> dict[str, str]:
        return super().dropped(architecture) | {"h.*.attn.causal_mask": "the causal-mask buffer of the original "
                                                                          "checkpoints"}

    def config(self, spec) -> dict:
        return super().config(spec) | {"n_ctx": spec.positional.max_len}
