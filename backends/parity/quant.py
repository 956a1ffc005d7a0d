"""The checks a quantised export (``--int4``, ``--int8``) runs: the graphs against the PyTorch
model holding exactly the weights the graphs hold (dequantised from the written bytes: a
tolerance for what onnxruntime's quantised activations alone cost, ``same_weights`` of the
policy times the largest |value| of each output compared), and against the float model (the quantisation error itself, ``float_rms``). Sentences
are not compared token for token: quantised activations flip near-ties of random weights'
logits; every step's log-probabilities are compared instead.

The policy (``int4.Int4``, ``int8.Int8``) says which initializers hold a quantised matrix
(``matrix``) and what it multiplies by (``dequantize``); the matrices are read from the data
file one at a time. A matrix that one graph reads in two forms (a tied embedding gathered in
float32 whose transposed product is int8) becomes, in PyTorch, one parameter per form.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import torch
from onnx import external_data_helper, numpy_helper

from tfspec.backends.onnx.runtime import OnnxModel
from tfspec.checks import Check

from .onnx import check_parity


def check_quantised(onnx_model: OnnxModel, model, quant, seed: int = 0) -> list[Check]:
    """Both checks of the module docstring, on the parity inputs (``parity.check_parity``).
    ``model`` is changed in place to hold the graphs' weights (no second copy in memory)."""
    feeds = _tokens(model, seed)
    with torch.no_grad():
        want = model.eval()(*map(torch.from_numpy, feeds.values())).numpy()
    got = onnx_model.logits(**feeds)
    rms = float(np.linalg.norm(got - want) / np.linalg.norm(want))
    same = dequantised(model, onnx_model.directory / onnx_model.manifest["graphs"]["model"], quant)
    tolerances = {output: quant.same_weights * scale for output, scale in output_scales(same, seed).items()}
    checks = [Check(f"{c.name} (the graphs' {quant.label} weights, in PyTorch)", c.diff, c.tolerance)
              for c in check_parity(onnx_model, same, seed=seed, tolerances=tolerances)
              if "sentences that differ" not in c.name]  # quantised activations flip a random model's near-ties
    checks.append(Check("full-sequence logits vs float32, RMS relative to theirs", rms, quant.float_rms))
    return checks


def dequantised(model, path: Path, quant) -> torch.nn.Module:
    """``model``, its quantised weights replaced (in place) by those graph ``path`` multiplies by."""
    proto = onnx.load(str(path), load_external_data=False)
    tensors = {t.name: t for t in proto.graph.initializer}

    def read(name: str) -> np.ndarray:
        t = onnx.TensorProto()
        t.CopyFrom(tensors[name])
        if external_data_helper.uses_external_data(t):
            external_data_helper.load_external_data_for_tensor(t, str(path.parent))
        return numpy_helper.to_array(t)

    params = dict(model.named_parameters())
    matrices = {name: _slot(quant.matrix(name), params) for name in tensors if quant.matrix(name) is not None}
    roles = _roles(model, proto.graph, {name: slot[0] for name, slot in matrices.items()})
    with torch.no_grad():
        for name, (param, expert) in matrices.items():
            if name not in roles:  # a check that compared float weights here would pass unseen
                raise RuntimeError(f"{path.name}: no IR node reads {name} (ONNX nodes are named <IR node>/...)")
            w = torch.from_numpy(quant.dequantize(name, read, tuple(params[param].shape[expert is not None:])))
            for p in roles[name]:
                (p if expert is None else p[expert]).copy_(w)
    return model


def _slot(matrix: str, params: dict) -> tuple[str, int | None]:
    """(IR parameter, expert index or None) of a quantised matrix: ``W``, or ``P.<expert>`` (one
    expert's slice)."""
    if matrix in params:
        return matrix, None
    param, _, expert = matrix.rpartition(".")
    return param, int(expert)


def _roles(model, graph: onnx.GraphProto, matrices: dict[str, str]) -> dict[str, list[torch.nn.Parameter]]:
    """Quantised initializer -> the PyTorch parameters it stands for: those of the IR nodes whose
    ONNX nodes read it (a node's ONNX nodes are named ``<IR node>/...``). A tied use that reads
    its matrix in another form than the owner does is given a parameter of its own first."""
    reads: dict[tuple[str, str], set[str]] = {}  # (IR node, parameter) -> the initializers of it read there
    for node in graph.node:
        for name in node.input:
            if name in matrices:
                reads.setdefault((node.name.partition("/")[0], matrices[name]), set()).add(name)
    owner = {p: n.name for n in model.graph.nodes() for role, p in n.params.items() if n.owns(role)}
    quantised, roles = set(matrices.values()), {}
    for n in model.graph.nodes():
        for role, param in n.params.items():
            if param not in quantised:
                continue
            module, read = model.get_submodule(n.name), reads.get((n.name, param), set())
            if not n.owns(role) and read != reads.get((owner[param], param), set()):
                module.register_parameter(role, torch.nn.Parameter(getattr(module, role).detach().clone()))
            for name in read:
                roles.setdefault(name, []).append(getattr(module, role))
    return roles


def output_scales(model, seed: int = 0) -> dict[str, float]:
    """The largest |value| of each output the parity check compares (the logits, and where the
    model has them the encoder memory and the pooled output) on random tokens: what
    ``same_weights`` is relative to."""
    outputs = tuple(o for o in ("logits", "memory", "pooled") if o in model.graph.ports)
    with torch.no_grad():
        found = model.run({port: torch.from_numpy(v) for port, v in _tokens(model, seed).items()}, outputs)
    return {name: float(value.abs().max()) for name, value in found.items()}


def _tokens(model, seed: int) -> dict[str, np.ndarray]:
    """Random unpadded token inputs for the model's ports (src and/or tgt), in that order."""
    rng, vocab, ports = np.random.default_rng(seed), model.graph.spec.vocab, model.graph.ports
    sizes = {"src": vocab.size, "tgt": vocab.tgt_size}
    return {port: rng.integers(4, size, (3, 9)) for port, size in sizes.items() if port in ports}
