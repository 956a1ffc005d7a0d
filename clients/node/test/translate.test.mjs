// translate.mjs prints what `tfspec translate` printed for each case of the fixture (the
// Python search over the export's step graphs is the reference): the same lines on standard
// output, the same warnings, the same `error:` line and exit status for bad input.

import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import path from "node:path";
import { test } from "node:test";

import { fixture, missing, NODE_CLIENT } from "./fixture.mjs";

const TRANSLATE = path.join(NODE_CLIENT, "translate.mjs");
const lines = (text, prefix) => text.split("\n").filter((line) => line.startsWith(prefix));
// what follows "error: " (argparse's lines start with the program's name, translate.mjs's do not)
const errors = (text) => text.split("\n").filter((l) => l.includes("error: ")).map((l) => l.split("error: ").pop());

for (const [i, c] of (fixture?.cases ?? [{ dir: "", args: [] }]).entries()) {
  const name = `case ${i}: ${c.dir} ${c.args.join(" ")} (${c.input?.length ?? 0} characters in)`;
  test(name, { skip: missing }, () => {
    const run = spawnSync(process.execPath, [TRANSLATE, fixture.dirs[c.dir], ...c.args],
      { input: c.input, encoding: "utf8" });
    assert.equal(run.status, c.code, run.stderr);
    assert.equal(run.stdout, c.stdout);
    assert.deepEqual(lines(run.stderr, "warning:"), lines(c.stderr, "warning:"));
    if (c.code === 0) {  // "N lines, T tokens": translate's count of tokens made
      const count = (text) => text.match(/^\d+ lines, \d+ tokens/m)?.[0];
      assert.equal(count(run.stderr), count(c.stderr));
    } else {
      assert.deepEqual(errors(run.stderr), errors(c.stderr));
    }
  });
}

test("the fixture covers text, ids and a decoder-only model, greedy and beam, and refusals", { skip: missing }, () => {
  const covered = new Set(fixture.cases.map((c) => `${c.dir} ${c.code} ${c.args.includes("1")}`));
  for (const want of ["text 0 true", "text 0 false", "ids 0 false", "dec 0 true", "dec 0 false", "ids 2 false"]) {
    assert.ok(covered.has(want), want);
  }
  const text = fixture.cases.find((c) => c.dir === "text" && c.code === 0);
  assert.ok(text.stdout.split("\n").length > 40 && lines(text.stderr, "warning:").length === 1);
});
