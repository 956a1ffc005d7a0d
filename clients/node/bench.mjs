// node bench.mjs DIR FILE BEAM RUNS: translate FILE's lines RUNS times in one process (as
// translate.mjs does, default flags otherwise) and print each run's tokens and seconds as JSON,
// for tools/bench/bench_js.py; the first run carries onnxruntime's one-time costs.

import fs from "node:fs";

import { splitLines } from "../lib/translator.mjs";
import { openExport } from "./open-export.mjs";

const [dir, file, beam, runs] = process.argv.slice(2);
const translator = await openExport(dir);
const lines = splitLines(fs.readFileSync(file, "utf8"));
const out = [];
for (let i = 0; i < Number(runs); i++) {
  const { outputs, tokens, seconds } = await translator.translate(lines, { beam: Number(beam) });
  out.push({ tokens, seconds, outputs });
}
process.stdout.write(JSON.stringify(out));
