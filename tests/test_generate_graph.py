"""generate.onnx (``export --generate``): the encoder and the whole search in one graph gives the
tokens of tfspec's Python search (``tfspec.search.search``) and of ``tfspec translate``.

References: the Python beam step against the graph's, on steps full of ties; the Python
search over the same export's step graph for every decoder kind (greedy, beam, length
penalties, min_length, per-row limits, many end-of-sequence ids so that hypotheses end at
different steps); ``translate``'s printed lines for imported Marian and T5 checkpoints; the
Python search on corrected inputs for what the graph does with bad ones.
"""

from __future__ import annotations

import importlib
import json

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper

from tfspec import load_spec
from tfspec.backends.onnx import OnnxModel, export
from tfspec.backends.onnx.builder import Builder
from tfspec.backends.onnx.runtime.generator import Generator
from tfspec.backends.onnx.variants.search_graph import beam_constants, beam_step
from tfspec.backends.torch import build_module
from tfspec.search import SearchOptions, length_penalty, search
from tfspec.spec import Spec

from tests.test_onnx import VARIANTS, shrunk

ort = pytest.importorskip("onnxruntime")

KINDS = ["tiny", "zoo/transformer-relative", "zoo/transformer-rotary", "zoo/convs2s", "zoo/universal",
         "zoo/qwen2.5-0.5b", "zoo/mistral-7b", "decoder-only, every causal kind",
         "recurrent encoder-decoder, no biases, untied",
         "T5's relative bias shared by mixed kinds, set scales, untied output"]
"""Encoder-decoder and decoder-only; sinusoidal, relative, rotary and T5 positions; GQA and a
sliding window (Qwen2, Mistral); convolutions, recurrent layers, ACT; bos = pad (T5: pad banned)."""
SETTINGS = [(1, 0.6, 0), (4, 0.6, 0), (2, 1.0, 3), (4, 0.0, 2), (1, 0.6, 1), (1, 0.6, 2), (1, 0.6, 4), (4, 0.6, 5)]
"""(beam, alpha, min_length) of each search compared: end of sequence first allowed at several steps."""


def with_stops(spec: Spec) -> Spec:
    """``spec`` with 40 more end-of-sequence ids: a random model then ends hypotheses at
    different steps (and sentences at different steps), as a trained one does."""
    data = spec.model_dump()
    data["vocab"]["eos_ids"] = list(range(20, 60))
    return Spec.model_validate(data)


def exported(name, write_spec, path, **options):
    spec = with_stops(shrunk(name) if name not in VARIANTS else load_spec(write_spec(VARIANTS[name])))
    torch.manual_seed(0)
    model = build_module(spec).eval()
    export(model, path, parity=False, generate=True, **options)
    return spec, model, OnnxModel(path, device="cpu")


def sources(spec, rng):
    """(input_ids, src, prefix): a padded batch of 3 sources, or 2 prompts of one length."""
    vocab = spec.vocab
    if spec.family == "decoder-only":
        ids = rng.integers(60, vocab.tgt_size, (2, 4))
        return ids, None, np.concatenate([np.full((2, 1), vocab.bos_id), ids], axis=1)
    ids = rng.integers(60, vocab.size, (3, 9))
    ids[1, 5:] = vocab.pad_id
    return ids, ids, None


@pytest.mark.parametrize("name", KINDS)
def test_generate_gives_the_python_search_tokens(name, write_spec, tmp_path):
    spec, _, model = exported(name, write_spec, tmp_path)
    generator, rng = Generator(model), np.random.default_rng(0)
    ended = 0
    for beam, alpha, min_length in SETTINGS:
        ids, src, prefix = sources(spec, rng)
        options = SearchOptions(beam=beam, alpha=alpha, min_length=min_length, max_extra=5, max_length=11)
        ours = generator(ids, options)
        assert ours == search(model.decoder(), src, options, prefix), (beam, alpha, min_length)
        ended += sum(len(out) < 9 for out in ours)
    assert ended, "no hypothesis ended by end of sequence: the test exercises too little"


def test_a_pad_started_decoder_never_emits_its_start_token(write_spec, tmp_path):
    """bos = pad (T5, Marian): the search bans the padding token, here made the likeliest first
    token of the first sentence (its output row a multiple of that token's)."""
    spec = load_spec(write_spec(VARIANTS["T5's relative bias shared by mixed kinds, set scales, untied output"]))
    pad, src = spec.vocab.pad_id, np.random.default_rng(0).integers(60, spec.vocab.size, (3, 7))
    torch.manual_seed(0)
    model = build_module(spec).eval()
    with torch.no_grad():
        start = torch.full((3, 1), spec.vocab.bos_id)
        output = dict(model.named_parameters())["output.weight"]
        output[pad] = 5 * output[model(torch.from_numpy(src), start)[0, 0].argmax()]
        assert model(torch.from_numpy(src), start)[0, 0].argmax() == pad
    export(model, tmp_path, parity=False, generate=True)
    onnx_model = OnnxModel(tmp_path, device="cpu")
    for beam in (1, 4):
        options = SearchOptions(beam=beam, max_extra=5)
        ours = Generator(onnx_model)(src, options)
        assert ours == search(onnx_model.decoder(), src, options) and pad not in sum(ours, [])


FIELDS = {"rows": TensorProto.INT64, "tokens": TensorProto.INT64, "scores": TensorProto.DOUBLE,
          "ended": TensorProto.INT64, "best": TensorProto.DOUBLE, "best_row": TensorProto.INT64,
          "best_token": TensorProto.INT64, "going": TensorProto.BOOL}


@pytest.fixture(scope="module")
def beam_step_session():
    """search_graph.beam_step alone: the Python step's arguments in, its fields out."""
    b, value = Builder("beam_step", 18, "float32", {}), helper.make_tensor_value_info
    inputs = [value("scores", TensorProto.DOUBLE, ["n", "k"]), value("values", TensorProto.DOUBLE, ["nk", "w"]),
              value("ids", TensorProto.INT64, ["nk", "w"]), value("finished", TensorProto.INT64, ["n"]),
              value("at_limit", TensorProto.BOOL, ["n"]), value("penalty", TensorProto.DOUBLE, [])]
    beam = beam_constants(b, b.shape_of("scores", 0), b.shape_of("scores", 1), (2, 5))
    step = beam_step(b, beam, "scores", "values", "ids", b.op("Shape", "values", start=1, end=2), "finished",
                     "at_limit", "penalty")
    for field in FIELDS:
        b.nodes.append(helper.make_node("Identity", [getattr(step, field)], [f"step.{field}"]))
    outputs = [value(f"step.{f}", t, ["n"] if f in ("ended", "best", "going") else ["n", "m"])
               for f, t in FIELDS.items()]
    graph = helper.make_graph(b.nodes, "beam_step", inputs, outputs, list(b.initializers.values()))
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)
    return ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])


def test_beam_step_graph_equals_the_python_step_even_on_ties(beam_step_session):
    """400 random steps whose scores take few values (ties everywhere, -inf among them, at times
    most of them): TopK, ArgMax and the one-hot ranks must order equal candidates as the stable
    argsort does, and both steps must fill a sentence short of k live extensions alike."""
    from tfspec.search import beam_step as python_step

    rng = np.random.default_rng(0)
    for _ in range(400):
        n, k = int(rng.integers(1, 4)), int(rng.integers(1, 5))
        w = 2 * k + int(rng.integers(0, 3))
        scores = np.where(rng.random((n, k)) < 0.2, -np.inf, -0.5 * rng.integers(0, 4, (n, k)))
        scores[:, 0] = -0.5 * rng.integers(0, 4, n)
        dead = 0.9 if rng.random() < 0.25 else 0.1  # at times fewer than k live extensions: fillers
        values = np.where(rng.random((n * k, w)) < dead, -np.inf, -0.25 * rng.integers(0, 5, (n * k, w)))
        values = -np.sort(-values, axis=1)  # as decoders return them, best first
        ids = np.stack([rng.permutation(12)[:w] for _ in range(n * k)])
        finished, at_limit = rng.integers(0, k, n), rng.random(n) < 0.3
        penalty = length_penalty(int(rng.integers(1, 9)), 0.6)
        want = python_step(scores, values, ids, np.array([2, 5]), finished, at_limit, penalty)
        got = dict(zip(FIELDS, beam_step_session.run(None, {"scores": scores, "values": values, "ids": ids,
                                                             "finished": finished, "at_limit": at_limit,
                                                             "penalty": np.array(penalty)})))
        ends = want.best_token < 0  # the Python step says -1 where the graph gives the end-of-sequence id
        assert np.all(np.isin(got["best_token"][ends, 0], [2, 5]) | (want.best[ends] == -np.inf))
        expected = {"rows": want.rows, "tokens": want.tokens, "scores": want.scores, "ended": want.ended,
                    "best": want.best, "best_row": want.best_row[:, None], "going": want.going,
                    "best_token": np.where(ends, got["best_token"][:, 0], want.best_token)[:, None]}
        for field, value in expected.items():
            np.testing.assert_array_equal(got[field], value, err_msg=field)


def all_graphs(graph: onnx.GraphProto):
    """``graph`` and every subgraph in it (the Loop bodies)."""
    yield graph
    for node in graph.node:
        for attribute in node.attribute:
            for sub in [attribute.g] if attribute.type == onnx.AttributeProto.GRAPH else attribute.graphs:
                yield from all_graphs(sub)


@pytest.mark.parametrize("int8", [False, True], ids=["float32", "int8"])
def test_only_default_domain_operators_and_weights_stored_once_per_graph(int8, tmp_path):
    torch.manual_seed(0)
    model = build_module(load_spec("tiny")).eval()
    result = export(model, tmp_path, generate=True, int8=int8)
    assert result.ok, [str(c) for c in result.checks if not c.ok]
    proto = onnx.load(str(tmp_path / "generate.onnx"))
    assert [o.domain for o in proto.opset_import] == [""]
    nodes = [node for graph in all_graphs(proto.graph) for node in graph.node]
    assert {n.domain for n in nodes} == {""} and any(n.op_type == "Loop" for n in nodes)
    manifest = json.loads((tmp_path / "tfspec.json").read_text())
    assert manifest["graphs"]["generate"] == "generate.onnx"
    assert [c["ok"] for c in manifest["parity"] if c["check"].startswith("generate.onnx")] == [True, True]
    if int8:
        assert manifest["int8"]["generate_sentences_equal"] == manifest["int8"]["generate_sentences"]
        return
    # tied: the encoder's lookup reads one copy; the step's lookup and output projection, in the body
    # that holds them (where onnxruntime pre-packs a Gemm's weight), read the other
    embedding = model.state_dict()["encoder.embed.weight"].numpy()
    copies = [sum(tuple(t.dims) == embedding.shape and np.array_equal(onnx.numpy_helper.to_array(t), embedding)
                  for t in graph.initializer) for graph in all_graphs(proto.graph)]
    assert copies[0] == 1 and sum(copies) == 2


def test_large_models_keep_the_loop_bodies_weights_in_the_side_file(monkeypatch, tmp_path):
    """Weights above EXTERNAL_DATA_BYTES go to the export's one data file, the Loop bodies' (the
    step's weights) too: here the threshold lies between the outer graph's bytes and all of them."""
    torch.manual_seed(0)
    model = build_module(load_spec("tiny")).eval()
    export(model, tmp_path / "inline", parity=False, generate=True)
    proto = onnx.load(str(tmp_path / "inline" / "generate.onnx"))
    outer = sum(len(t.raw_data) for t in proto.graph.initializer)
    assert sum(len(t.raw_data) for g in all_graphs(proto.graph) for t in g.initializer) > 1.5 * outer
    exporting = importlib.import_module("tfspec.backends.onnx.exporter")  # the module, not the function
    monkeypatch.setattr(exporting, "EXTERNAL_DATA_BYTES", int(1.2 * outer))
    export(model, tmp_path / "side", parity=False, generate=True)
    proto = onnx.load(str(tmp_path / "side" / "generate.onnx"), load_external_data=False)
    assert all(t.data_location == onnx.TensorProto.EXTERNAL for g in all_graphs(proto.graph) for t in g.initializer
               if np.prod(t.dims) * 4 > 1024 and not t.name.rsplit("/", 1)[-1].startswith("const"))
    # the weights: in the export's one data file; tables the graphs compute (sinusoids) may stay inside
    onnx_model, src = OnnxModel(tmp_path / "side", device="cpu"), np.array([[70, 71, 72, 2]])
    options = SearchOptions(beam=4, max_extra=5)
    assert Generator(onnx_model)(src, options) == search(onnx_model.decoder(), src, options)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny")
    torch.manual_seed(0)
    spec = with_stops(load_spec("tiny"))
    export(build_module(spec).eval(), path, parity=False, generate=True)
    model = OnnxModel(path, device="cpu")
    return spec, model, Generator(model)


def run(generator: Generator, ids, **feeds) -> tuple[list[list[int]], np.ndarray, np.ndarray]:
    """generate.onnx's outputs for ``feeds`` (beam 4, alpha 0.6, max_length 11, no min_length and
    no max_extra bound unless given): each row's ids before the end of sentence, the scores and
    the padded sequences."""
    feeds = {"max_length": 11, "num_beams": 4, "length_penalty": 0.6, "min_length": 0, "max_extra": 2**30} | feeds
    arrays = {k: np.array(v, np.float32 if k == "length_penalty" else np.int64) for k, v in feeds.items()}
    ids = np.array(ids, np.int64)
    if generator.masks:  # right-padded sources
        arrays.setdefault("attention_mask", (ids != generator.model.spec.vocab.pad_id).astype(np.int64))
    sequences, scores, lengths = generator.session.run(None, {"input_ids": ids, **arrays})
    return [row[:n].tolist() for row, n in zip(sequences, lengths)], scores, sequences


def test_bad_inputs_give_the_documented_results(tiny):
    spec, model, generator = tiny
    vocab, decoder = spec.vocab, model.decoder()
    src = np.array([[70, 71, 72, 73, vocab.eos_id]])

    def python(ids, **options):
        return search(decoder, np.array(ids), SearchOptions(**({"beam": 4, "max_extra": 50} | options)))
    assert run(generator, src, num_beams=0)[0] == run(generator, src, num_beams=-3)[0] == python(src, beam=1,
                                                                                                  max_length=11)
    assert run(generator, src, max_length=0)[0] == run(generator, src, max_length=-2)[0] == python(src, max_length=1)
    outside = np.array([[70, -5, vocab.size, 10**12, vocab.eos_id]])
    unk = [[70, vocab.unk_id, vocab.unk_id, vocab.unk_id, vocab.eos_id]]
    assert run(generator, outside)[0] == python(unk, max_length=11)
    batch = [[vocab.pad_id] * 3, [70, 71, 72]]  # an empty line among others: no output, no score
    outputs, scores, _ = run(generator, batch)
    assert outputs == [[], python(batch, max_length=11)[1]] and scores[0] == -np.inf
    assert run(generator, np.zeros((1, 0)))[0] == [[]]
    positions = spec.positional.max_len  # a source longer than the positions: its first max_len ids
    long = np.random.default_rng(0).integers(60, vocab.size, (1, positions + 30))
    assert run(generator, long, max_length=positions + 9, num_beams=1)[0] == python(long[:, :positions], beam=1,
                                                                                    max_length=positions)


def test_scores_are_gnmt_penalised_log_probabilities(tiny):
    """sequences_scores is the best hypothesis's summed log-probability, end of sentence
    included, over GNMT's penalty of its length: recomputed from the step graph's log_probs."""
    spec, model, generator = tiny
    decoder, vocab = model.decoder(), spec.vocab
    src = np.array([[70, 71, 72, 73, vocab.eos_id], [80, 81, 82, vocab.eos_id, vocab.pad_id]])
    for alpha in (0.0, 0.6, 1.3):
        outputs, scores, sequences = run(generator, src, length_penalty=alpha, num_beams=3)
        for row, out, score, sequence in zip(src, outputs, scores, sequences):
            scored = sequence[: len(out) + 1].tolist() if len(out) < 11 else out  # with its end of sentence
            state, total = decoder.start(row[None]), 0.0
            for token, fed in zip(scored, [vocab.bos_id] + scored):
                log_probs, state = decoder.run(state, np.array([[fed]]), ["log_probs"])
                total += float(log_probs[0, token])
            assert score == pytest.approx(total / ((5 + len(scored)) / 6) ** alpha, abs=1e-4)


def test_translate_engine_generate_prints_what_translate_prints(tiny, cli, tmp_path):
    lines = "70 71 72 73\n\n80 81 82\n90 91 92 93 94 95 96 97 98\n100\n"
    (tmp_path / "in.txt").write_text(lines)
    for beam in ("1", "4"):
        args = ("translate", tiny[1].directory, tmp_path / "in.txt", "--beam", beam, "--max-extra", "4", "--batch", "3")
        code, want, _ = cli(*args)
        assert code == 0 and want.count("\n") == 5
        assert cli(*args, "--engine", "generate")[:2] == (0, want)


def test_refusals(cli, tmp_path):
    code, _, err = cli("export", "zoo/bert-base", "-o", tmp_path / "a", "--generate", "--no-check")
    assert code == 2 and "--generate: bert-base has no decoder" in err
    code, _, err = cli("export", "tiny", "-o", tmp_path / "b", "--generate", "--format", "hf")
    assert code == 2 and "--generate applies to --format onnx" in err
    assert cli("export", "tiny", "-o", tmp_path / "c", "--no-check")[0] == 0
    (tmp_path / "in.txt").write_text("5 6 7\n")
    code, _, err = cli("translate", tmp_path / "c", tmp_path / "in.txt", "--engine", "generate")
    assert code == 2 and "exported without generate.onnx" in err


def test_openvino_runs_generate_onnx_with_onnxruntime_tokens(tiny):
    """OpenVINO (CPU) computes the float64 scores in float32; on a model without exact ties it gives
    the same tokens, per-row limits (max_extra) and min_length included."""
    ov = pytest.importorskip("openvino")
    spec, model, generator = tiny
    compiled = ov.Core().compile_model(str(model.directory / "generate.onnx"), "CPU",
                                       {"INFERENCE_PRECISION_HINT": "f32"})
    src = np.random.default_rng(1).integers(60, spec.vocab.size, (3, 7))
    src[2, 4:] = spec.vocab.pad_id
    for beam in (1, 4):
        feeds = {"input_ids": src, "max_length": np.array(11), "num_beams": np.array(beam),
                 "length_penalty": np.array(0.6, np.float32), "min_length": np.array(2), "max_extra": np.array(3),
                 "attention_mask": (src != spec.vocab.pad_id).astype(np.int64)}
        got = {o.get_any_name(): v for o, v in compiled(feeds).items()}
        assert [row[:n].tolist() for row, n in zip(got["sequences"], got["sequences_lengths"])] == run(
            generator, src, num_beams=beam, min_length=2, max_extra=3)[0]


@pytest.mark.parametrize("family", ["marian", "t5"])
def test_imported_checkpoints_translate_alike_through_generate_onnx(family, cli, tmp_path):
    """Marian and T5 start decoding from the padding token, which the search bans."""
    pytest.importorskip("transformers")
    if family == "marian":
        from test_import_seq2seq import imported
        imported("marian", tmp_path, cli)
    else:
        from test_import_t5 import imported
        imported("t5", tmp_path, cli)
    ours = tmp_path / "ours"
    code, out, err = cli("export", ours, "--weights", ours / "model.safetensors", "-o", tmp_path / "onnx", "--generate",
                         "--no-check")  # the export's checks are test_only_default_domain_...'s
    assert code == 0, out + err
    rng = np.random.default_rng(0)
    (tmp_path / "in.txt").write_text("".join(" ".join(map(str, rng.integers(3, 88, n))) + "\n" for n in (3, 9, 5, 12)))
    for beam in ("1", "4"):
        args = ("translate", tmp_path / "onnx", tmp_path / "in.txt", "--beam", beam, "--max-extra", "6")
        code, want, _ = cli(*args)
        assert code == 0 and cli(*args, "--engine", "generate")[:2] == (0, want)
