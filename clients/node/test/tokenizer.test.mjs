// The export's tokenizer.json read by @huggingface/tokenizers gives sentencepiece's ids on
// every line of the sample's test split and sentencepiece's text for any ids (tests/node_fixture.py
// records sentencepiece's, the reference).

import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { test } from "node:test";

import { Tokenizer } from "@huggingface/tokenizers";

import { fixture, missing, python } from "./fixture.mjs";

const tokenizer = () => new Tokenizer(JSON.parse(fs.readFileSync(path.join(fixture.dirs.text, "tokenizer.json"),
  "utf8")), {});

test("ids equal sentencepiece's on the sample's test split", { skip: missing }, () => {
  const t = tokenizer();
  assert.equal(python.tokenizer.lines.length, 400);
  for (const [line, ids] of python.tokenizer.lines) assert.deepEqual(t.encode(line).ids, ids, line);
});

test("text equals sentencepiece's for any ids", { skip: missing }, () => {
  const t = tokenizer();
  for (const [ids, text] of python.tokenizer.decode) {
    assert.equal(t.decode(ids, { skip_special_tokens: true, clean_up_tokenization_spaces: false }), text, ids);
  }
});
