"""The parity check ``tfspec export`` runs: ONNX Runtime against the PyTorch backend.

Random tokens at shapes no graph was built for (batch 3 and 1, ragged padding), compared
at non-padded positions (PyTorch zeroes fully masked rows, decomposed attention does not):
the full-sequence graph, the encoder, the step graph after pasts of 0, 1, 3 and 6 tokens,
greedy decoding token for token, and (exported with them) the static step graph's decoding
against the growing-cache step graph's, and the in-place step graph's steps against PyTorch and
its decoding against the growing-cache step graph's. Specs with banded attention (restricted) are also compared
on sequences long enough for PyTorch to compute them block by block.
"""

from __future__ import annotations

import numpy as np
import torch

from tfspec.backends.onnx.lower.attention import blocked
from tfspec.backends.onnx.runtime import OnnxModel
from tfspec.backends.onnx.runtime.inplace import InPlaceDecoder
from tfspec.backends.onnx.runtime.static import StaticDecoder
from tfspec.backends.onnx.variants import mask_name
from tfspec.backends.torch import TorchDecoder, TorchModel
from tfspec.checks import Check
from tfspec.ir.rope_scaling import length_dependent
from tfspec.layers.attention import block_plan
from tfspec.search import SearchOptions, search

CHUNKS = [(0, 1), (1, 3), (3, 6), (6, 9)]  # step inputs: pasts of 0, 1, 3 and 6 tokens


def check_parity(ort_model: OnnxModel, model: TorchModel, tolerance: float = 1e-4, seed: int = 0,
                 tolerances: dict[str, float] | None = None) -> list[Check]:
    """The checks of the module docstring, each within ``tolerance``, or within ``tolerances``
    of the output it compares (``logits``, which the step log-probabilities follow, ``memory``,
    ``pooled``): a quantised export's error scales with each output's own magnitude."""
    spec, ports = model.graph.spec, model.graph.ports
    if "frames" in ports:
        return check_frame_parity(ort_model, model, tolerance, seed)
    if spec.dual is not None:  # a text and an image tower
        from tfspec.backends.parity.dual import check_dual_parity

        return check_dual_parity(ort_model, model, tolerance, seed)
    if spec.image_encoder is not None:  # pixels under a text decoder (TrOCR)
        from tfspec.backends.parity.ocr import check_ocr_parity

        return check_ocr_parity(ort_model, model, tolerance, seed)
    if "pixel_values" in ports:
        from tfspec.backends.parity.pixels import check_pixel_parity

        return check_pixel_parity(ort_model, model, tolerance, seed)
    if "input_values" in ports:  # a waveform encoder (wav2vec 2.0, HuBERT)
        from tfspec.backends.parity.waveform import check_waveform_parity

        return check_waveform_parity(ort_model, model, tolerance, seed)
    if "input_features" in ports:
        from tfspec.backends.parity.audio import check_audio_parity

        return check_audio_parity(ort_model, model, tolerance, seed)
    tolerances = {k: (tolerances or {}).get(k, tolerance) for k in ("logits", "memory", "pooled")}
    rng = np.random.default_rng(seed)
    pad = spec.vocab.pad_id
    src, src_keep = _tokens(rng, spec.vocab.size, 3, 11, pad, pad_from=(1, 6)) if "src" in ports else (None, None)
    tgt, tgt_keep = _tokens(rng, spec.vocab.tgt_size, 3, 9, pad, pad_from=(2, 5)) if "tgt" in ports else (None, None)
    model = model.eval()
    checks = []
    with torch.no_grad():
        feeds = {k: v for k, v in (("src", src), ("tgt", tgt)) if v is not None}
        masks = {k: v for k, v in (("src", src_keep), ("tgt", tgt_keep)) if v is not None}
        if "segments" in ports:
            feeds["segments"] = rng.integers(0, spec.segments, src.shape)
        outputs = ["logits"] + (["pooled"] if "pooled" in ports else [])
        ref = model.run({k: torch.from_numpy(v) for k, v in feeds.items()}
                        | {f"{k}_mask": torch.from_numpy(v) for k, v in masks.items()}, tuple(outputs))
        ours = dict(zip(outputs, ort_model.run("model", outputs, feeds | {
            mask_name(model.graph, k): v for k, v in masks.items()})))
        keep = tgt_keep if tgt is not None else src_keep
        if ref["logits"].dim() == 2:  # a sequence classification head: one row per sequence
            keep = np.ones(len(keep), dtype=bool)
        checks.append(Check("full-sequence logits, batch 3", _diff(ours["logits"], ref["logits"].numpy(), keep),
                            tolerances["logits"]))
        if "pooled" in ports:
            checks.append(Check("pooled output, batch 3", float(np.abs(ours["pooled"] - ref["pooled"].numpy()).max()),
                                tolerances["pooled"]))
        long = _blocked_length(model)
        if long is not None:
            sizes = {"src": spec.vocab.size, "tgt": spec.vocab.tgt_size}
            feeds = {port: _tokens(rng, sizes[port], 2, long, pad, pad_from=(1, long // 2))[0] for port in sizes
                     if port in feeds}
            ref = model(*[torch.from_numpy(v) for v in feeds.values()]).numpy()
            keep = feeds["tgt" if "tgt" in feeds else "src"] != pad
            checks.append(Check(f"full-sequence logits, length {long} (blocked attention)",
                                _diff(ort_model.logits(**feeds), ref, keep), tolerances["logits"]))
        if src is not None:
            memory = model.run({"src": torch.from_numpy(src), "src_mask": torch.from_numpy(src_keep)},
                               ("memory",))["memory"].numpy()
            ours = ort_model.run("encoder", ["memory"], {"src": src, "attention_mask": src_keep})[0]
            checks.append(Check("encoder memory, batch 3", _diff(ours, memory, src_keep), tolerances["memory"]))
    if tgt is None:
        return checks
    tgt = _ids(rng, spec.vocab.tgt_size, tgt.shape, pad)  # decoding feeds no target padding
    decoder = ort_model.decoder(static=False, in_place=False)  # the growing-cache step graph, step by step
    checks += _steps(decoder, model, src, src_keep, tgt, "decoder step", tolerances["logits"])
    options = SearchOptions(beam=1, max_extra=12, max_length=12)
    prefix = None if src is not None else tgt[:, :1]
    ours = search(decoder, src, options, prefix, src_mask=src_keep)
    theirs = search(TorchDecoder(model), src, options, prefix, src_mask=src_keep)
    differ = sum(x != y for x, y in zip(ours, theirs))
    checks.append(Check("greedy decoding, batch 3 (sentences that differ)", float(differ), 0))
    if "decoder_static" in ort_model.manifest["graphs"]:
        checks.append(_static_check(ort_model, src, prefix, src_keep))
    if "decoder_inplace" in ort_model.sessions:
        checks += _steps(InPlaceDecoder(ort_model, first_length=4), model, src, src_keep, tgt, "in-place step",
                         tolerances["logits"])
        checks.append(_same_search(ort_model, InPlaceDecoder(ort_model, first_length=4), "in-place step graph",
                                   src, prefix, src_keep))
    return checks


def _steps(decoder, model: TorchModel, src: np.ndarray | None, src_keep: np.ndarray | None, tgt: np.ndarray,
           name: str, tolerance: float) -> list[Check]:
    """``decoder``'s log-probabilities after pasts of 0, 1, 3 and 6 tokens against PyTorch's."""
    checks = []
    for batch in (3, 1):
        s = None if src is None else src[:batch]
        with torch.no_grad():
            feeds = {"tgt": torch.from_numpy(tgt[:batch])} | ({} if s is None else {
                "src": torch.from_numpy(s), "src_mask": torch.from_numpy(src_keep[:batch])})
            full = torch.log_softmax(model.run(feeds)["logits"], -1)
        wanted = _stepped(model, s, tgt[:batch], src_keep) if _per_call(model) else [
            full[:, b - 1].numpy() for _, b in CHUNKS]
        state = decoder.start(s) if s is None else decoder.start(s, src_keep[:batch])
        if s is None:  # decoder-only: one empty state, copied per row
            state = decoder.select(state, np.zeros(batch, dtype=np.int64), cross=True)
        for (a, b), want in zip(CHUNKS, wanted):
            log_probs, state = decoder.run(state, tgt[:batch, a:b], ["log_probs"])
            checks.append(Check(f"{name} after {a} tokens, batch {batch}",
                                float(np.abs(log_probs - want).max()), tolerance))
    return checks


def _per_call(model: TorchModel) -> bool:
    """Whether a step computes otherwise than the full sequence at its positions: an expert
    capacity (``_bounded_experts``), or rotary frequencies or their multiplier following the
    length a call reaches (dynamic, longrope), as transformers' do per call."""
    return _bounded_experts(model) or any(
        isinstance(node.attrs.get("positions"), dict) and length_dependent(node.attrs["positions"])
        for node in model.graph.nodes())


def _bounded_experts(model: TorchModel) -> bool:
    """Whether a ``moe`` op has an expert capacity (Switch Transformers), which counts the
    positions of one call: a decoding step of a few positions drops none the full sequence drops."""
    return any(node.op == "moe" and node.attrs.get("capacity") for node in model.graph.nodes())


@torch.no_grad()
def _stepped(model: TorchModel, src: np.ndarray | None, tgt: np.ndarray,
             src_keep: np.ndarray | None = None) -> list[np.ndarray]:
    """The PyTorch backend's log-probabilities at the end of each of CHUNKS, fed chunk by chunk
    to its cache as the step graph is (the reference where ``_per_call``)."""
    decoder = TorchDecoder(model)
    state = decoder.start(src) if src_keep is None else decoder.start(src, src_keep[:len(src)])
    return [torch.log_softmax(model.run({"tgt": torch.from_numpy(tgt[:, a:b])}, state=state)["logits"][:, -1],
                              -1).numpy() for a, b in CHUNKS]


def _static_check(ort_model: OnnxModel, src: np.ndarray | None, prefix: np.ndarray | None,
                  src_keep: np.ndarray | None) -> Check:
    """The static step graph decodes what the growing-cache one does: greedy and beam 4, its
    cache made to grow twice (4 slots, then 8, then 16) and its row buckets to shrink."""
    static = StaticDecoder(ort_model, capture=ort_model.graphs, first_length=4)
    return _same_search(ort_model, static, "static step graph", src, prefix, src_keep)


def _same_search(ort_model: OnnxModel, decoder, name: str, src: np.ndarray | None, prefix: np.ndarray | None,
                 src_keep: np.ndarray | None) -> Check:
    """``decoder`` searches as the growing-cache step graph does, greedy and beam 4 (its
    buffers start at 4 slots, and grow)."""
    differ = 0
    for beam in (1, 4):
        options = SearchOptions(beam=beam, max_extra=12, max_length=12)
        differ += sum(x != y for x, y in zip(search(decoder, src, options, prefix, src_mask=src_keep),
                                             search(ort_model.decoder(static=False, in_place=False), src, options,
                                                    prefix, src_mask=src_keep)))
    return Check(f"{name}, greedy and beam 4, batch 3 (sentences that differ)", float(differ), 0)


def _blocked_length(model: TorchModel) -> int | None:
    """A length at which every banded attention kind of the model runs in blocks, if positions allow."""
    bands = [n.layer.band() for n in model.graph.nodes() if n.op == "attention" and blocked(n)]
    if not bands:
        return None
    length = max(3 * block_plan(band)[0] + 5 for band in bands)
    spec = model.graph.spec
    if spec.image is not None:  # an image has as many positions as intensities
        return length if length <= spec.image.positions else None
    return length if spec.positional.kind == "none" or length <= spec.positional.max_len else None


def _ids(rng, vocab: int, shape: tuple[int, ...], pad: int) -> np.ndarray:
    """Random ids other than the special ones and the pad id: GPT-2 pads with its last id
    (<|endoftext|>), which a full sequence would take as padding and a decoding step not."""
    if not 4 <= pad < vocab:
        return rng.integers(4, vocab, shape)
    ids = rng.integers(4, vocab - 1, shape)
    return ids + (ids >= pad)


def _tokens(rng, vocab: int, batch: int, length: int, pad: int, pad_from: tuple[int, int]
            ) -> tuple[np.ndarray, np.ndarray]:
    """(tokens, mask): row ``pad_from[0]`` padded from ``pad_from[1]``, and the pad id as a word
    inside row 0 (the mask, not the id, says what is padding)."""
    tokens = _ids(rng, vocab, (batch, length), pad)
    row, start = pad_from
    tokens[row, start:] = pad
    keep = np.arange(length)[None, :] < np.where(np.arange(batch) == row, start, length)[:, None]
    if 0 <= pad < vocab and row != 0:
        tokens[0, length // 2] = pad
    return tokens, keep


def _diff(ours: np.ndarray, ref: np.ndarray, keep: np.ndarray) -> float:
    return float(np.abs(ours.astype(np.float32) - ref)[keep].max())


def check_frame_parity(ort_model, model, tolerance: float, seed: int = 0) -> list[Check]:
    """Frame log-probabilities of onnxruntime against PyTorch at batch 3 (one row padded from
    frame 5) and batch 1, compared at real frames (padding rows differ, as for tokens)."""
    rng = np.random.default_rng(seed)
    features = model.graph.spec.frames.features
    checks = []
    for batch, length, lengths in ((3, 11, [11, 5, 9]), (1, 7, [7])):
        frames = rng.standard_normal((batch, length, features)).astype(np.float32)
        lengths = np.array(lengths, dtype=np.int64)
        with torch.no_grad():
            ref = model.eval().run({"frames": torch.from_numpy(frames), "lengths": torch.from_numpy(lengths)},
                                   ("log_probs",))["log_probs"].numpy()
        ours = ort_model.run("model", ["log_probs"], {"frames": frames, "lengths": lengths})[0]
        keep = np.arange(length)[None, :] < lengths[:, None]
        diff = float(np.abs(ours.astype(np.float32) - ref)[keep].max())
        checks.append(Check(f"frame log-probabilities, batch {batch}", diff, tolerance))
    return checks
