"""Running exported graphs with onnxruntime: sessions, provider choice, decoding.

``OnnxModel(dir)`` opens what ``tfspec export`` wrote, checking the manifest and each graph's
metadata first, so a directory from another tfspec format, a swapped graph or a corrupt file
is refused with the reason. ``OnnxModel.decoder()`` is a ``tfspec.search.Decoder``.
"""

from __future__ import annotations

import os
import sys
from importlib import metadata as dist_metadata
from pathlib import Path

import numpy as np

from tfspec.errors import TfspecError
from tfspec.padding import implied_mask
from tfspec.spec import spec_from_data
from tfspec.untrusted import file_name, parse_json, read_json

from .decoding import OnnxDecoder
from ..variants import listed, variant
from .inplace import InPlaceDecoder
from .static import StaticDecoder

FORMAT = 3
"""Version of the layout of exported directories (tensor names, manifest keys). 2: step graphs
gather their state rows by ``beam_rows`` (format 1 did not); 3: their per-source inputs keep
one row per source, shared by that source's group of rows."""
MANIFEST = "tfspec.json"
"""What the manifest's graphs may be: ``emit``'s kinds and generate.onnx (``export --generate``)."""


def session_options(threads: int | None = None):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    cores = os.cpu_count() or 1
    options.intra_op_num_threads = threads or cores
    if cores <= 4:
        for key, value in spinning(ort.__version__):
            options.add_session_config_entry(key, value)
    options.log_severity_level = 3
    return options


SPIN_US = 50
"""How long an idle intra-op thread spins before it sleeps, on machines of 4 cores or fewer.
Between two operators of a step a spinning thread picks up the next one at once, where a
sleeping one pays a wake-up per operator: a decoding step has 170-270 of them, so on 2 quiet cores
decoding ran 1.2-1.4x faster with 50 us than with no spinning. Bounded, it stops soon after a
step ends, so Python's host work between steps and other processes keep the cores: beside a busy
process it gave 0.77-1.21x of no spinning, onnxruntime's unbounded default 0.69-0.93x
(BENCHMARKS.md, `tools/bench/bench_spin.py`)."""


def spinning(version: str) -> list[tuple[str, str]]:
    """Session config for thread spinning on a small machine: bounded where onnxruntime can
    bound it (``spin_duration_us``, 1.27 and later; older releases ignore the key and would spin
    unbounded), else off."""
    major, minor = (int(part) for part in version.split(".")[:2])
    if (major, minor) >= (1, 27):
        return [("session.intra_op.allow_spinning", "1"), ("session.intra_op.spin_duration_us", str(SPIN_US))]
    return [("session.intra_op.allow_spinning", "0")]


def providers(device: str) -> list[str]:
    """Execution providers to ask for: CUDA first when requested or available."""
    import onnxruntime as ort

    available = ort.get_available_providers()
    if device == "cpu":
        return ["CPUExecutionProvider"]
    if "CUDAExecutionProvider" not in available:
        if device == "cuda":
            raise TfspecError("--device cuda: this onnxruntime has no CUDA provider; install tfspec[gpu] "
                              "(onnxruntime-gpu) instead of tfspec[cpu]")
        return ["CPUExecutionProvider"]
    return ["CUDAExecutionProvider", "CPUExecutionProvider"]


def warn_if_both_runtimes() -> None:
    """onnxruntime and onnxruntime-gpu share one import package: the last installed wins."""
    installed = []
    for name in ("onnxruntime", "onnxruntime-gpu"):
        try:
            dist_metadata.version(name)
            installed.append(name)
        except dist_metadata.PackageNotFoundError:
            pass
    if len(installed) == 2:
        print("warning: both onnxruntime and onnxruntime-gpu are installed; they overwrite each other. "
              "Uninstall both and install one (tfspec[cpu] or tfspec[gpu])", file=sys.stderr)


class OnnxModel:
    """An exported model directory, loaded into onnxruntime sessions."""

    def __init__(self, directory: str | Path, device: str = "auto", threads: int | None = None,
                 cuda_graphs: bool = True):
        self.directory = Path(directory)
        self.manifest = read_manifest(self.directory)
        self.spec = spec_from_data(self.manifest["spec"], str(self.directory / MANIFEST))
        self.dtype = np.dtype(self.manifest["dtype"])
        warn_if_both_runtimes()
        self._wanted, self._options = providers(device), session_options(threads)
        wanted = self._wanted
        self.sessions = _Sessions(self)
        self.graphs = False
        """Whether the static step graph's session captures CUDA graphs."""
        for kind in self.manifest["graphs"]:
            if not variant(kind).opened_at_load(wanted[0]):
                continue  # opened when asked for (static_session, generate_session, decoder(shortlist=True)), or never
            if kind == "model" and "decoder" in self.manifest["graphs"]:
                continue  # the full-sequence graph: opened when run (``_Sessions``), so that decoding holds
                # one session's copy of the weights, not two
            self._open(kind, capture=variant(kind).captured and cuda_graphs)
        self.provider = next(iter(self.sessions.values())).get_providers()[0]
        self.fallback = wanted[0] == "CUDAExecutionProvider" and self.provider != wanted[0]
        self.device = ("cuda" if self.provider == "CUDAExecutionProvider" else "cpu", 0)
        """Where decoding state lives: (device type, id) for OrtValues and IO binding."""
        self._bindings: dict = {}

    def describe(self) -> str:
        where = "CUDA" + (", CUDA graphs" if self.graphs else "") if self.provider == "CUDAExecutionProvider" else "CPU"
        where += ", in-place cache" if "decoder_inplace" in self.sessions else ""
        note = " (the CUDA provider failed to load: check the CUDA/cuDNN libraries)" if self.fallback else ""
        return f"onnxruntime {__import__('onnxruntime').__version__} on {where}{note}"

    def logits(self, **tokens: np.ndarray) -> np.ndarray:
        """The full-sequence graph: src and/or tgt (B, L) int64, and their masks (``feeds``) ->
        logits (B, L, vocab)."""
        return self.run("model", ["logits"], tokens)[0]

    def run(self, kind: str, outputs: list[str], feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        """Run graph ``kind`` on ``feeds`` as ``feeds`` completes them."""
        return self.sessions[kind].run(outputs, self.feeds(kind, feeds))

    def feeds(self, kind: str, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """``feeds`` for graph ``kind``: an optional ``segments`` input left out means one segment
        (ids 0); a token input's mask (``attention_mask``, ``decoder_attention_mask``, int64 or
        bool) left out is ``tfspec.padding.implied_mask``, and one the graph does not take (an
        export from before masks were inputs, which finds padding by id itself) is dropped."""
        taken = {i.name for i in self.sessions[kind].get_inputs()}
        if "src" in feeds and "segments" not in feeds and "segments" in taken:
            feeds = {**feeds, "segments": np.zeros_like(feeds["src"])}
        if kind not in ("model", "encoder"):
            return feeds
        vocab, feeds = self.spec.vocab, dict(feeds)
        for port in ("src", "tgt"):
            name = "decoder_attention_mask" if port == "tgt" and "src" in taken else "attention_mask"
            if port in feeds and name in taken:
                mask = feeds.get(name)
                if mask is None:
                    mask = implied_mask(feeds[port], vocab.pad_id, port == "tgt", vocab.starts_with_pad)
                feeds[name] = np.asarray(mask).astype(np.int64)
            elif name not in taken:
                feeds.pop(name, None)
        return feeds

    def session(self, proto: bytes):
        """A session for a graph built at run time, on the sessions' device and options."""
        import onnxruntime as ort

        return ort.InferenceSession(proto, self._options, providers=self._wanted)

    def on_device(self, array: np.ndarray):
        """An OrtValue holding ``array`` on the sessions' device."""
        import onnxruntime as ort

        return ort.OrtValue.ortvalue_from_numpy(array, *self.device)

    def run_on_device(self, kind: str, outputs: list[str], feeds: dict[str, np.ndarray]) -> dict:
        """Run graph ``kind`` from host ``feeds``, leaving the named outputs on the device as
        OrtValues (for decoding state that the host never needs to see)."""
        session, feeds = self.sessions[kind], self.feeds(kind, feeds)
        binding = self._bindings.setdefault(kind, session.io_binding())
        binding.clear_binding_outputs()
        for name, value in feeds.items():
            binding.bind_cpu_input(name, np.ascontiguousarray(value))
        for name in outputs:
            binding.bind_output(name, *self.device)
        session.run_with_iobinding(binding)
        return dict(zip(outputs, binding.get_outputs()))

    def decoder(self, static: bool | None = None, shortlist: bool = False,
                in_place: bool | None = None) -> OnnxDecoder | StaticDecoder:
        """The decoder over the step graph; ``static``: over the static one (written by
        ``export --static-cache``), by default where the session captures CUDA graphs;
        ``shortlist``: over the shortlist step graph (``export --shortlist``, growing cache);
        ``in_place``: over the in-place one (``export --fused``), by default wherever it was
        written and opened (CPU)."""
        if "decoder" not in self.sessions:
            raise TfspecError(f"{self.directory}: {self.spec.name} has no decoder to generate with "
                              f"(family {self.spec.family})")
        if shortlist:
            from .shortlist import ShortlistDecoder

            return ShortlistDecoder(self)
        if static is None:
            static = self.graphs
        if static:
            return StaticDecoder(self, capture=self.graphs)
        if in_place is None:
            in_place = "decoder_inplace" in self.sessions
        if in_place and "decoder_inplace" not in self.sessions:
            raise TfspecError(f"{self.directory}: no in-place step graph for {self.device[0].upper()} here (it is "
                              "written by `tfspec export ... --fused` and runs on CPU)")
        return InPlaceDecoder(self) if in_place else OnnxDecoder(self)

    def static_session(self):
        """The static step graph's session, opened on first use off CUDA."""
        if "decoder_static" not in self.sessions:
            if "decoder_static" not in self.manifest["graphs"]:
                raise TfspecError(f"{self.directory}: exported without a static step graph (re-export with "
                                  "`tfspec export ... --static-cache`)")
            self._open("decoder_static")
        return self.sessions["decoder_static"]

    def generate_session(self):
        """The session of generate.onnx (the whole search in one graph), opened on first use."""
        if "generate" not in self.sessions:
            if "generate" not in self.manifest["graphs"]:
                raise TfspecError(f"{self.directory}: exported without generate.onnx (re-export with "
                                  "`tfspec export ... --generate`)")
            self._open("generate")
        return self.sessions["generate"]

    def _open(self, kind: str, capture: bool = False) -> None:
        """Open graph ``kind``, checked against the manifest; with ``capture`` (the static step
        graph on CUDA) capturing CUDA graphs where onnxruntime accepts it."""
        path = self.directory / self.manifest["graphs"][kind]
        session = _graph_session(path, self._options, self._wanted) if capture else None
        self.graphs = self.graphs or session is not None
        session = session or _session(path, self._options, self._wanted)
        _check_metadata(path, session, self.manifest, kind)
        self.sessions[kind] = session


class _Sessions(dict):
    """Graph kind -> session; a graph of the manifest not opened yet opens when first asked for."""

    def __init__(self, model: OnnxModel):
        super().__init__()
        self.model = model

    def __missing__(self, kind: str):
        if kind not in self.model.manifest["graphs"]:
            raise KeyError(kind)
        self.model._open(kind)
        return self[kind]


def _session(path: Path, options, wanted: list):
    import onnxruntime as ort

    try:
        return ort.InferenceSession(str(path), options, providers=wanted)
    except Exception as e:  # noqa: BLE001 - onnxruntime raises several types for bad files
        raise TfspecError(f"{path}: onnxruntime cannot load it ({str(e).strip().splitlines()[0][:300]}); "
                          "re-export the model") from e


def _graph_session(path: Path, options, wanted: list):
    """A CUDA session of the static step graph that captures CUDA graphs, or None (saying
    why) where onnxruntime refuses: the caller then opens it without capture."""
    import onnxruntime as ort

    try:
        capturing = [("CUDAExecutionProvider", {"enable_cuda_graph": "1"}), *wanted[1:]]
        return ort.InferenceSession(str(path), options, providers=capturing)
    except Exception as e:  # noqa: BLE001 - a graph it cannot capture is refused at load
        print(f"warning: {path.name}: onnxruntime will not capture CUDA graphs of it "
              f"({str(e).strip().splitlines()[0][:200]}); decoding without them", file=sys.stderr)
        return None


def read_manifest(directory: Path) -> dict:
    """The directory's manifest, checked: written by ``tfspec export`` in this format."""
    if not directory.is_dir():
        raise TfspecError(f"{directory}: no such model directory (write one with `tfspec export SPEC -o DIR`)")
    path = directory / MANIFEST
    try:
        manifest = read_json(path)
    except FileNotFoundError:
        raise TfspecError(f"{directory}: not an exported tfspec model (no {MANIFEST})") from None
    except (OSError, ValueError) as e:
        raise TfspecError(f"{path}: corrupt manifest ({str(e)[:200]})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        found = manifest.get("format") if isinstance(manifest, dict) else None
        raise TfspecError(f"{directory}: exported in format {found!r} by tfspec "
                          f"{manifest.get('tfspec_version', '?') if isinstance(manifest, dict) else '?'}; this "
                          f"tfspec reads format {FORMAT}: re-export with `tfspec export`")
    for key in ("spec", "graphs", "dtype"):
        if key not in manifest:
            raise TfspecError(f"{path}: corrupt manifest (no {key!r})")
    graphs = manifest["graphs"]
    if not isinstance(graphs, dict) or not graphs or any(
            kind not in listed() or not file_name(file) for kind, file in graphs.items()):
        raise TfspecError(f"{path}: corrupt manifest ('graphs' must map graph kinds, {', '.join(listed())}, to file "
                          "names in the directory)")
    if manifest["dtype"] not in ("float32", "float16") or not isinstance(manifest["spec"], dict):
        raise TfspecError(f"{path}: corrupt manifest ('dtype' must be float32 or float16, 'spec' a mapping)")
    for file in graphs.values():
        if not (directory / file).is_file():
            raise TfspecError(f"{directory / file}: missing (the manifest lists it); re-export the model")
    return manifest


def _check_metadata(path: Path, session, manifest: dict, kind: str) -> None:
    meta = session.get_modelmeta().custom_metadata_map
    expected = {"tfspec.format": str(FORMAT), "tfspec.graph": kind, "tfspec.export_id": manifest.get("export_id")}
    for key, value in expected.items():
        if meta.get(key) != value:
            raise TfspecError(f"{path}: {key} is {meta.get(key)!r}, the manifest says {value!r}: this graph comes "
                              "from another export; re-export the model")
    try:  # the runtime sizes inputs by the manifest's spec: it must be the one the graph was built from
        same = parse_json(meta.get("tfspec.spec", "null")) == manifest["spec"]
    except ValueError:
        same = False
    if not same:
        raise TfspecError(f"{path}: the manifest's spec is not the one this graph was exported from (the manifest "
                          "was edited); re-export the model")
