// `npm test`: write the fixture with the repository's Python (tests/node_fixture.py; .venv/bin/python
// or $TFSPEC_PYTHON) unless $TFSPEC_JS_FIXTURE names one, then run every test/*.test.mjs.

import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";

import { NODE_CLIENT } from "./fixture.mjs";

const repo = path.resolve(NODE_CLIENT, "../..");
const env = { ...process.env };
const own = !env.TFSPEC_JS_FIXTURE;
if (own) {
  const python = env.TFSPEC_PYTHON ?? path.join(repo, ".venv/bin/python");
  env.TFSPEC_JS_FIXTURE = fs.mkdtempSync(path.join(os.tmpdir(), "tfspec-js-"));
  const made = spawnSync(python, ["-m", "tests.node_fixture", env.TFSPEC_JS_FIXTURE], { cwd: repo, stdio: "inherit" });
  if (made.status !== 0) {
    console.error(`error: ${python} -m tests.node_fixture failed (set TFSPEC_PYTHON to a Python with tfspec)`);
    fs.rmSync(env.TFSPEC_JS_FIXTURE, { recursive: true, force: true });
    process.exit(2);
  }
}
const tests = fs.readdirSync(path.join(NODE_CLIENT, "test")).filter((f) => f.endsWith(".test.mjs"));
const run = spawnSync(process.execPath, ["--test", ...tests.map((f) => path.join("test", f))],
  { cwd: NODE_CLIENT, env, stdio: "inherit" });
if (own) fs.rmSync(env.TFSPEC_JS_FIXTURE, { recursive: true, force: true });
process.exit(run.status ?? 1);
