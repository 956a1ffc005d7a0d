// How translate.mjs reads lines, against Python itself (tests/node_fixture.py's python.json):
// splitlines after universal newlines, which lines are blank, repr in error messages; and
// the batches of tfspec.evaluate.batches, worked by hand.

import assert from "node:assert/strict";
import { test } from "node:test";

import { batches, isBlank, pyRepr, splitLines } from "../../lib/translator.mjs";
import { missing, python } from "./fixture.mjs";

test("lines split where Python's splitlines splits them", { skip: missing }, () => {
  for (const [text, want] of python.splitlines) assert.deepEqual(splitLines(text), want, JSON.stringify(text));
});

test("blank lines are those Python's strip empties", { skip: missing }, () => {
  for (const [text, want] of python.blank) assert.equal(isBlank(text), want, JSON.stringify(text));
});

test("input is quoted as Python's repr quotes it", { skip: missing }, () => {
  for (const [text, want] of python.repr) assert.equal(pyRepr(text), want);
});

test("batches: shortest first, in input order among equals, blank lines left out", () => {
  assert.deepEqual(batches([3, 0, 1, 3, 2, 1], 2), [[2, 5], [4, 0], [3]]);
  assert.deepEqual(batches([3, 0, 1, 3, 2, 1], 2, true), [[2, 5], [4], [0, 3]]);
  assert.deepEqual(batches([0, 0], 4), []);
});
