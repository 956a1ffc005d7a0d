"""Mutants in what the imported model families (the zoo of published decoders) rely on: the
attention options they brought (query/key norms, layers without positions) and the family
modules that map them, each killed by the family tests against transformers."""

QK_NORM_TESTS = ["tests/test_import_qk_norm_families.py::test_logits_and_greedy_tokens_match_transformers"]

TORCH_NORM = ("            if self.qk_norm != \"none\":\n"
              "                q, k = self._normed(q, \"q\"), self._normed(k, \"k\")\n")
TORCH_ROTARY = ("            if self.frequencies is not None:  # one rotation table per call, for every layer\n"
                "                offset = ctx.state.offset if ctx.state is not None else 0\n"
                "                cos, sin = ctx.cached((\"rotary\", offset, Lq, self.rotary_key),\n"
                "                                      lambda: rotation(self.frequencies, offset, Lq, x.device, "
                "x.dtype))\n"
                "                q, k = rotate(q, cos, sin), rotate(k, cos, sin)\n")
ONNX_NORM = ("        if a[\"qk_norm\"] != \"none\":\n"
             "            q, k = _normed(b, node, q, \"q\"), _normed(b, node, k, \"k\")\n")
ONNX_ROTARY = ("        positions = a[\"positions\"] or {}\n"
               "        if positions.get(\"kind\") == \"rotary\":\n"
               "            frequencies = rotary_frequencies(d_k, positions)\n"
               "            cos, sin = e.cached((\"rotary\", node.shape[1], frequencies.tobytes()),\n"
               "                                lambda: _rotation(e, node.shape[1], q, frequencies))\n"
               "            q, k = (_rotate(b, t, cos, sin, heads, d_k, 2 * len(frequencies)) for t, heads in ((q, h), "
               "(k, g)))\n")

MUTANTS = [
    dict(name="qk_norm applied after the rotary rotation instead of before (PyTorch)",
         file="backends/torch/attention.py",
         old=TORCH_NORM + TORCH_ROTARY,
         new=TORCH_ROTARY + TORCH_NORM,
         tests=QK_NORM_TESTS),
    dict(name="qk_norm applied after the rotary rotation instead of before (ONNX)",
         file="backends/onnx/attention.py",
         old=ONNX_NORM + ONNX_ROTARY,
         new=ONNX_ROTARY + ONNX_NORM,
         tests=QK_NORM_TESTS),
    dict(name="per-head qk_norm gain indexed per feature of the whole projection (and the reverse)",
         file="tfspec/layers/attention.py",
         old='sizes = {"q": layer.d_k, "k": layer.d_k} if layer.qk_norm == "head" else',
         new='sizes = {"q": layer.d_k, "k": layer.d_k} if layer.qk_norm == "all" else',
         tests=QK_NORM_TESTS),
    dict(name="a layer without positions (NoPE) rotated anyway with the spec's rotary positions",
         file="tfspec/layers/attention.py",
         old="own = self.positions if self.positions is not None else spec.positional",
         new="own = self.positions if self.positions is not None and self.positions.kind != \"none\" "
             "else spec.positional",
         tests=[QK_NORM_TESTS[0] + "[smollm3]"]),
]
