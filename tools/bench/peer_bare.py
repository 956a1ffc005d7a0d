"""The peers' timing functions (CTranslate2, transformers, onnxruntime-genai, llama.cpp), importing nothing but the peer.

A table's peer column runs these through the harness (tools/bench/isolated.py, one fresh process
per round); run as a script under ``python -I`` (tools/ not on the path), the same functions
are the bare control: a process that holds the peer, numpy and the standard library, nothing
of tfspec or of the harness. A peer column more than 10% below its bare speed in the same run
means the table's conditions slowed the peer, and the table is invalid. ``timed`` is also the
loop every engine's worker uses, so all get the same warm-up.

    python -I tools/bench/peer_bare.py JOB     # JOB: {"function": ..., "engines": [...], "kwargs": {...}}

Each function imports its peer only: ctranslate2 (``pip install ctranslate2``), transformers and
onnxruntime_genai (the dev install), llama_cpp (llama-cpp-python, in the Python
tools/bench/to_gguf.py's ``INSTALL`` makes), optimum (optimum-onnx, in its own environment: README).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import numpy as np

BARE_LIMIT = 0.9
"""A peer column below this fraction of its bare speed marks the table INVALID."""


def ort_options(threads: int):
    """onnxruntime session options of a peer's sessions: ``threads`` intra-op, one inter-op."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    return options


def timed(calls: list, warm: list, repeat: int = 1) -> list[float]:
    """Seconds per call of each of ``calls`` (mean of ``repeat`` back to back), after every
    call of ``warm`` ran once: sessions, arenas and caches set up at every shape first."""
    for call in warm:
        call()
    seconds = []
    for call in calls:
        start = time.perf_counter()
        for _ in range(repeat):
            call()
        seconds.append((time.perf_counter() - start) / repeat)
    return seconds


def translator(model: str, compute: str, threads: int):
    """(translate(src rows of ids, **options) -> output ids per row, the Translator): words.json
    beside the model names each id's token."""
    import ctranslate2

    words = json.loads((Path(model) / "words.json").read_text())
    index = {w: i for i, w in enumerate(words)}
    tr = ctranslate2.Translator(model, device="cpu", compute_type=compute, intra_threads=threads, inter_threads=1)

    def translate(src, **options):  # no </s> appended to sources; outputs start after <s>
        res = tr.translate_batch([[words[i] for i in row] for row in src], length_penalty=0.6, **options)
        return [[index[t] for t in r.hypotheses[0]] for r in res]
    translate.words = words
    return translate, tr


def ct2_times(threads: int, model: str, compute: str, sources: dict, settings: list, n: int, repeat: int = 1):
    """Seconds per decode of exactly ``n`` tokens at each (batch, beam) setting of
    ``sources`` (batch -> .npy of ids), 8-token decodes at every setting warming up."""
    translate, _ = translator(model, compute, threads)
    src = {int(b): np.load(path) for b, path in sources.items()}

    def run(b, beam, k):
        return translate(src[b], beam_size=beam, max_decoding_length=k, min_decoding_length=k)
    return timed([lambda b=b, m=m: run(b, m, n) for b, m in settings],
                 [lambda b=b, m=m: run(b, m, 8) for b, m in settings], repeat)


CT2_BACKENDS = ({"CT2_USE_MKL": "1"}, {"CT2_USE_MKL": "0"})
"""CTranslate2's two CPU backends: Intel MKL (its default on Intel CPUs) and its other GEMM
libraries. Which is faster depends on the CPU: on a 2-core AMX Xeon, MKL decoded `small` at
batch 1 ~10x slower (198 against 2,025 tok/s), so a table that kept the default would compare
against a crippled peer. ``fastest_ct2`` gives the peer its best."""


def fastest_ct2(job, threads: int, seconds=sum) -> tuple[dict, str]:
    """(environment, a line saying why) of the CTranslate2 backend under which ``job`` takes
    the least time (``seconds`` of its result), each backend tried in a bare process."""
    totals = {}
    for env in CT2_BACKENDS:
        result, _ = job.but(env=env, bare=True).run(threads)
        totals[env["CT2_USE_MKL"]] = seconds(result)
    best = min(totals, key=totals.get)
    return ({"CT2_USE_MKL": best}, f"{job.kwargs.get('compute', 'float32')}: CT2_USE_MKL={best} "
            f"({', '.join(f'CT2_USE_MKL={k} {v:.2f} s' for k, v in totals.items())} over every setting)")


def ct2_outputs(threads: int, model: str, compute: str, src: str, n: int, targets: str | None = None) -> dict:
    """Greedy and beam-4 outputs of exactly ``n`` tokens for the sources in ``src`` (.npy), and
    the teacher-forced log-probabilities of ``targets`` (.npy; score_batch appends </s>)."""
    translate, tr = translator(model, compute, threads)
    rows = np.load(src)
    out = {str(beam): translate(rows, beam_size=beam, max_decoding_length=n, min_decoding_length=n) for beam in (1, 4)}
    if targets is not None:
        words = translate.words
        tokens = lambda ids: [[words[i] for i in r] for r in ids]  # noqa: E731
        out["scores"] = [s.log_probs for s in tr.score_batch(tokens(rows), tokens(np.load(targets)))]
    return out


def ct2_lines(threads: int, model: str, compute: str, sources: str, batch: int, beams: list, limit: int) -> dict:
    """Seconds to translate every line of ``sources`` (a JSON list of id lists) at each beam, in
    batches of ``batch``, and the outputs; the first 64 lines at each beam warm up."""
    translate, _ = translator(model, compute, threads)
    lines, outputs = json.loads(Path(sources).read_text()), {}

    def run(rows, beam):
        outputs[str(beam)] = translate(rows, max_batch_size=batch, beam_size=beam, max_decoding_length=limit)
    seconds = timed([lambda b=b: run(lines, b) for b in beams], [lambda b=b: run(lines[:64], b) for b in beams])
    return {"seconds": seconds, "outputs": outputs}


def ct2_generate(threads: int, model: str, prompts: dict, n: int, check: str | None = None,
                 prefill: str | None = None):
    """Seconds to generate exactly ``n`` tokens greedily after each batch of ``prompts`` (batch
    -> .npy of ids); with ``check`` (.npy), instead the tokens generated after those prompts."""
    import ctranslate2

    words = json.loads((Path(model) / "words.json").read_text())
    index = {w: i for i, w in enumerate(words)}
    gen = ctranslate2.Generator(model, device="cpu", intra_threads=threads, inter_threads=1)

    def run(rows, k):
        res = gen.generate_batch([[words[i] for i in row] for row in rows], max_length=k, min_length=k,
                                 sampling_topk=1, include_prompt_in_result=False)
        return [[index[t] for t in r.sequences[0]] for r in res]
    return generate(run, prompts, n, check, prefill)


def hf_generate(threads: int, model: str, prompts: dict, n: int, check: str | None = None,
                prefill: str | None = None):
    """``ct2_generate`` for transformers' ``generate`` (KV cache, SDPA, greedy) on the saved model."""
    import torch
    import transformers

    torch.set_num_threads(threads)
    hf = transformers.AutoModelForCausalLM.from_pretrained(model).eval()

    def run(rows, k):
        with torch.inference_mode():
            out = hf.generate(torch.from_numpy(rows), max_new_tokens=k, min_new_tokens=k, do_sample=False,
                              pad_token_id=0)
        return out[:, rows.shape[1]:].tolist()
    return generate(run, prompts, n, check, prefill)


def optimum_generate(threads: int, model: str, prompts: dict, n: int, check: str | None = None,
                     prefill: str | None = None):
    """``ct2_generate`` for optimum's ``ORTModelForCausalLM.generate`` (transformers' search over
    the directory's ONNX graph, onnxruntime CPU, its sessions given ``threads``), in the Python of
    optimum-onnx's own environment (it pins transformers < 4.58)."""
    import torch
    from optimum.onnxruntime import ORTModelForCausalLM

    torch.set_num_threads(threads)
    ort = ORTModelForCausalLM.from_pretrained(model, session_options=ort_options(threads),
                                              provider="CPUExecutionProvider")

    def run(rows, k):
        with torch.inference_mode():
            out = ort.generate(torch.from_numpy(rows), attention_mask=torch.ones(rows.shape, dtype=torch.long),
                               max_new_tokens=k, min_new_tokens=k, do_sample=False, pad_token_id=0)
        return out[:, rows.shape[1]:].tolist()
    return generate(run, prompts, n, check, prefill)


def seq2seq_generate(threads: int, model: str, prompts: dict, n: int, check: str | None = None,
                     prefill: str | None = None, optimum: bool = False):
    """``ct2_generate`` for a seq2seq model: each prompt row is a source, exactly ``n`` greedy
    target tokens after the decoder's start token, by transformers' ``generate`` over the
    checkpoint, or with ``optimum`` by ``ORTModelForSeq2SeqLM.generate`` over the directory's
    encoder and merged decoder (onnxruntime CPU, its sessions given ``threads``)."""
    import torch

    torch.set_num_threads(threads)
    if optimum:
        from optimum.onnxruntime import ORTModelForSeq2SeqLM

        engine = ORTModelForSeq2SeqLM.from_pretrained(model, session_options=ort_options(threads),
                                                      provider="CPUExecutionProvider")
    else:
        import transformers

        engine = transformers.AutoModelForSeq2SeqLM.from_pretrained(model).eval()

    def run(rows, k):
        with torch.inference_mode():
            out = engine.generate(torch.from_numpy(rows), attention_mask=torch.ones(rows.shape, dtype=torch.long),
                                  max_new_tokens=k, min_new_tokens=k, do_sample=False)
        return out[:, 1:].tolist()  # after the start token
    return generate(run, prompts, n, check, prefill)


def genai_generate(threads: int, model: str, prompts: dict, n: int, session_options: dict,
                   check: str | None = None, prefill: str | None = None):
    """``ct2_generate`` for onnxruntime-genai's own loop on its export of the same weights, its
    session given ``threads`` and ``session_options`` (tfspec's spinning setting)."""
    import onnxruntime_genai as og

    config = og.Config(model)
    config.overlay(json.dumps({"model": {"decoder": {"session_options": {"intra_op_num_threads": threads,
                                                                          **session_options}}}}))
    genai = og.Model(config)

    def run(rows, k):
        params = og.GeneratorParams(genai)
        params.set_search_options(batch_size=len(rows), min_length=rows.shape[1] + k, max_length=rows.shape[1] + k)
        generator = og.Generator(genai, params)
        generator.append_tokens(rows.astype(np.int32))
        while not generator.is_done():
            generator.generate_next_token()
        return [generator.get_sequence(i)[rows.shape[1]:].tolist() for i in range(len(rows))]
    return generate(run, prompts, n, check, prefill)


def llama_generate(threads: int, model: str, prompts: dict, n: int, check: str | None = None,
                   prefill: str | None = None, extra_buffers: bool = True):
    """``ct2_generate`` for llama.cpp (llama-cpp-python's C API, a GGUF file): every row of a
    batch is a sequence of its own in one context (llama.cpp's batched decoding), one
    ``llama_decode`` per step for all of them, the greedy choice taken from its logits.
    ``extra_buffers``: llama.cpp's extra weight buffer types (repacked Q4_0/Q8_0, AMX)."""
    import llama_cpp as L

    L.llama_backend_init()
    model_params = L.llama_model_default_params()
    model_params.use_extra_bufts = extra_buffers
    lm = L.llama_model_load_from_file(model.encode(), model_params)
    params = L.llama_context_default_params()
    params.n_ctx, params.n_batch, params.n_ubatch, params.n_seq_max = 8 * 1024, 1024, 512, 8
    params.n_threads = params.n_threads_batch = threads
    ctx = L.llama_init_from_model(lm, params)
    vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(lm))
    batch = L.llama_batch_init(8 * 1024, 0, 8)

    def step(tokens: list[tuple[int, int, int, bool]]) -> list[int]:
        """Decode (token, position, sequence, wants logits) entries; the argmax of each wanted."""
        for i, (token, pos, seq, wanted) in enumerate(tokens):
            batch.token[i], batch.pos[i], batch.n_seq_id[i], batch.logits[i] = token, pos, 1, wanted
            batch.seq_id[i][0] = seq
        batch.n_tokens = len(tokens)
        if L.llama_decode(ctx, batch):
            raise RuntimeError("llama_decode failed")
        return [int(np.ctypeslib.as_array(L.llama_get_logits_ith(ctx, i), (vocab,)).argmax())
                for i, t in enumerate(tokens) if t[3]]

    def run(rows, k):
        L.llama_memory_clear(L.llama_get_memory(ctx), True)
        width = rows.shape[1]
        last = step([(int(t), p, s, p == width - 1) for s, row in enumerate(rows) for p, t in enumerate(row)])
        out = [last]
        for p in range(width, width + k - 1):
            out.append(last := step([(t, p, s, True) for s, t in enumerate(last)]))
        return np.array(out).T
    return generate(run, prompts, n, check, prefill)


def optimum_encode(threads: int, model: str, inputs: dict, task: str, check: bool = False):
    """Seconds per forward of optimum's ``ORTModelForSequenceClassification`` (``task``
    "text") or ``ORTModelForImageClassification`` ("image") at each batch of ``inputs`` (batch
    -> .npz of the model's inputs), 3 calls each after one warm-up; with ``check``, the logits of
    the first batch instead."""
    import torch
    from optimum import onnxruntime as ort

    torch.set_num_threads(threads)
    auto = {"text": ort.ORTModelForSequenceClassification, "image": ort.ORTModelForImageClassification}[task]
    engine = auto.from_pretrained(model, session_options=ort_options(threads), provider="CPUExecutionProvider")
    feeds = [{k: torch.from_numpy(v) for k, v in np.load(path).items()} for path in inputs.values()]

    def run(feed):
        with torch.inference_mode():
            return engine(**feed).logits
    if check:
        return run(feeds[0]).tolist()
    return {"seconds": timed([lambda f=f: run(f) for f in feeds], [lambda f=f: run(f) for f in feeds], 3),
            "rss": peak_rss()}


def hf_logits(threads: int, model: str, inputs: dict, task: str) -> list:
    """transformers' logits for the first batch of ``inputs`` (``optimum_encode``'s reference)."""
    import torch
    import transformers

    torch.set_num_threads(threads)
    auto = {"text": transformers.AutoModelForSequenceClassification,
            "image": transformers.AutoModelForImageClassification}[task]
    engine = auto.from_pretrained(model).eval()
    feed = {k: torch.from_numpy(v) for k, v in np.load(next(iter(inputs.values()))).items()}
    with torch.inference_mode():
        return engine(**feed).logits.tolist()


def speech_generate(threads: int, model: str, features: dict, n: int, check: bool = False, optimum: bool = False):
    """Seconds to transcribe exactly ``n`` greedy tokens at each batch of ``features`` (batch ->
    .npy of log-mel features) by transformers' Whisper ``generate`` over the checkpoint, or with
    ``optimum`` by ``ORTModelForSpeechSeq2Seq.generate`` over the directory's ONNX graphs; with
    ``check``, the tokens of the first batch instead."""
    import torch

    torch.set_num_threads(threads)
    if optimum:
        from optimum.onnxruntime import ORTModelForSpeechSeq2Seq

        engine = ORTModelForSpeechSeq2Seq.from_pretrained(model, session_options=ort_options(threads),
                                                          provider="CPUExecutionProvider")
    else:
        import transformers

        engine = transformers.WhisperForConditionalGeneration.from_pretrained(model).eval()
    batches = [torch.from_numpy(np.load(path)) for path in features.values()]

    def run(x, k):
        with torch.inference_mode():
            return engine.generate(input_features=x, max_new_tokens=k, min_new_tokens=k, do_sample=False,
                                   num_beams=1).tolist()
    if check:
        return run(batches[0], n)
    return {"seconds": timed([lambda x=x: run(x, n) for x in batches], [lambda x=x: run(x, 8) for x in batches]),
            "rss": peak_rss()}


def peak_rss() -> int:
    """Bytes of the largest resident set this process had: VmHWM, which starts afresh at exec
    (getrusage's ru_maxrss does not: a worker would report its parent's peak); 0 off Linux."""
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return 0
    return next((int(line.split()[1]) * 1024 for line in status.splitlines() if line.startswith("VmHWM:")), 0)


def generate(run, prompts: dict, n: int, check: str | None, prefill: str | None = None):
    """The tokens ``run`` makes after the ``check`` prompts, or {"seconds": at every batch of
    ``prompts`` after an 8-token warm-up at each, then (with ``prefill``, a long prompt) the
    seconds to read that prompt and give one token, "rss": the process's peak resident bytes}:
    the loop every generation worker shares."""
    if check is not None:
        return [[int(t) for t in row] for row in run(np.load(check), n)]
    rows = [np.load(path) for path in prompts.values()]
    calls, warm = [lambda r=r: run(r, n) for r in rows], [lambda r=r: run(r, 8) for r in rows]
    if prefill is not None:
        long = np.load(prefill)
        calls.append(lambda: run(long, 1))
        warm.append(lambda: run(long[:, : long.shape[1] // 2], 1))
    return {"seconds": timed(calls, warm), "rss": peak_rss()}


def invalid(peer: str, speed: float, bare: float) -> str | None:
    """Why a table is invalid when its peer column ran below ``BARE_LIMIT`` of its bare speed."""
    if speed < BARE_LIMIT * bare:
        return f"INVALID: {peer} ran {speed:.0f} in the table but {bare:.0f} bare ({speed / bare:.0%})"
    return None


if __name__ == "__main__":
    job = json.loads(sys.argv[1])
    stdout = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # stdout carries the answer only
    result = globals()[job["function"]](**job["kwargs"])
    held = [m for m in ("torch", "onnxruntime", "ctranslate2", "transformers", "onnxruntime_genai", "llama_cpp", "tfspec",
                        "isolated") if m in sys.modules and m not in job["engines"]]
    if held:
        sys.exit(f"refused: the bare process imported {', '.join(held)}, not only {', '.join(job['engines'])}")
    json.dump({"pid": os.getpid(), "result": result}, stdout)
    stdout.flush()
