"""Mutants in generate.onnx (backends/onnx/variants/generate.py, search_graph.py, search_loops.py): the
search inside one graph, each a bug a reader of tfspec.search's beam step could plausibly make when spelling it
in ONNX operators."""

GENERATE, STEP, LOOPS = "backends/onnx/variants/generate.py", "backends/onnx/variants/search_graph.py", "backends/onnx/variants/search_loops.py"
TOKENS = "tests/test_generate_graph.py::test_generate_gives_the_python_search_tokens"

MUTANTS = [
    dict(name="generate.onnx ignores length_penalty (alpha read as 0)",
         file=GENERATE, old="f64(6)), alpha)  # ((5 + t + 1) / 6) ** alpha",
         new="f64(6)), f64(0))  # ((5 + t + 1) / 6) ** alpha",
         tests=[f"{TOKENS}[tiny]", "tests/test_generate_graph.py::test_scores_are_gnmt_penalised_log_probabilities"]),
    dict(name="generate.onnx's length limit one step late (at_limit from t, not t + 1)",
         file=LOOPS, old='b.op("GreaterOrEqual", b.op("Add", t, i64(1)), v["limits"])',
         new='b.op("GreaterOrEqual", t, v["limits"])',
         tests=[f"{TOKENS}[tiny]"]),
    dict(name="generate.onnx picks the last of equally scored finished hypotheses",
         file=STEP, old='first = b.op("ArgMax", finals, axis=1, keepdims=1)',
         new='first = b.op("ArgMax", finals, axis=1, keepdims=1, select_last_index=1)',
         tests=["tests/test_generate_graph.py::test_beam_step_graph_equals_the_python_step_even_on_ties"]),
    dict(name="generate.onnx lets a pad-started decoder (T5, Marian) emit the padding token",
         file=GENERATE, old="self.pad_banned = vocab.bos_id == vocab.pad_id != vocab.eos_id",
         new="self.pad_banned = False",
         tests=["tests/test_generate_graph.py::test_a_pad_started_decoder_never_emits_its_start_token"]),
    dict(name="export RUN takes the newest checkpoint even where the run has an average",
         file="tfspec/cli/deploy.py", old="args.weights = run_weights(run, None)",
         new='args.weights = run_weights(run, str(sorted((run / "checkpoints").iterdir())[-1]))',
         tests=["tests/test_train_cli.py::test_average_and_evaluate_on_both_backends",
                "tests/test_train_cli.py::test_export_a_run_with_its_weights_and_tokenizer"]),
]
