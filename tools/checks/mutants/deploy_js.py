"""Mutants in deployment without Python, beside generate.onnx's (deploy.py): the tokenizer.json
written from tfspec's sentencepiece model (tfspec/data/tokenizer_json.py) and the JavaScript
clients' translation logic (clients/lib/translator.mjs, through the Node.js client's tests)."""

MUTANTS = [
    dict(name="tokenizer.json keeps trailing whitespace symbols (sentencepiece drops them)",
         file="tfspec/data/tokenizer_json.py",
         old='_replace({"Regex": rf"{SPACE}+\\z"}, ""), ',
         new="",
         tests=["tests/test_tokenizer_json.py::test_edges_of_whitespace_special_names_and_unknown_characters"]),
    dict(name="tokenizer.json decodes only one leading whitespace piece away",
         file="tfspec/data/tokenizer_json.py",
         old='_replace({"Regex": rf"\\A{SPACE}+"}, "")',
         new='_replace({"Regex": rf"\\A{SPACE}"}, "")',
         tests=["tests/test_tokenizer_json.py::test_any_ids_decode_as_sentencepiece_decodes_them"]),
    dict(name="JS client cuts an over-long line one token too long",
         file="clients/lib/translator.mjs",
         old="ids = [...ids.slice(0, this.limit - 1), this.vocab.eos_id];",
         new="ids = [...ids.slice(0, this.limit), this.vocab.eos_id];",
         tests=["tests/test_node_client.py"]),
    dict(name="JS client feeds generate.onnx one token more than --max-extra",
         file="clients/lib/translator.mjs",
         old="if (this.rowLimits) feeds.max_extra = scalar(maxExtra);",
         new="if (this.rowLimits) feeds.max_extra = scalar(maxExtra + 1);",
         tests=["tests/test_node_client.py"]),
    dict(name="JS client feeds a mask of ones to a batch of prompts (padding read as tokens)",
         file="clients/lib/translator.mjs",
         old="sources.forEach((s, r) => mask.fill(1n, r * width + first(s), r * width + first(s) + s.length));",
         new="mask.fill(1n);",
         tests=["tests/test_node_client.py"]),
]
