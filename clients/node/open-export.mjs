// A tfspec export directory opened for translation in Node.js: tfspec.json, generate.onnx in an
// onnxruntime-node session (set up as tfspec's Python runtime sets up its own: all graph
// optimisations, short spins on small machines), tokenizer.json when there is one.

import fs from "node:fs";
import os from "node:os";
import path from "node:path";

import { Tokenizer } from "@huggingface/tokenizers";
import ort from "onnxruntime-node";

import { TranslateError, Translator } from "../lib/translator.mjs";

const SPM_ONLY = ["tokenizer.model", "source.spm"]; // text tokenizers that only Python reads

function readJson(file, what) {
  try {
    return JSON.parse(fs.readFileSync(file, "utf8"));
  } catch (e) {
    throw new TranslateError(`${file}: not a readable ${what} (${e.message.split("\n")[0]})`);
  }
}

/**
 * Thread spinning on a machine of 4 cores or fewer, as tfspec's Python sessions set it: idle threads
 * spin 50 us between operators where onnxruntime (1.27 and later) bounds the spin, else not at all
 * (an unbounded spin takes the cores from the caller).
 */
function spinning(version) {
  const [major, minor] = version.split(".").map(Number);
  return major > 1 || minor >= 27 ? { allow_spinning: "1", spin_duration_us: "50" } : { allow_spinning: "0" };
}

/** The `Translator` of export directory `dir`, with `threads` onnxruntime threads (default: all cores). */
export async function openExport(dir, { threads } = {}) {
  const manifestPath = path.join(dir, "tfspec.json");
  if (!fs.existsSync(manifestPath)) {
    throw new TranslateError(`${dir}: no such model directory (write one with ` +
      "`tfspec export SPEC -o DIR --generate`)");
  }
  const manifest = readJson(manifestPath, "tfspec.json");
  const graph = path.join(dir, "generate.onnx");
  if (!fs.existsSync(graph)) {
    throw new TranslateError(`${dir}: no generate.onnx (the search in one graph): export it with ` +
      "`tfspec export SPEC -o DIR --generate`");
  }
  let tokenizer = null;
  if (fs.existsSync(path.join(dir, "tokenizer.json"))) {
    tokenizer = new Tokenizer(readJson(path.join(dir, "tokenizer.json"), "tokenizer.json"), {});
  } else if (SPM_ONLY.some((name) => fs.existsSync(path.join(dir, name)))) {
    throw new TranslateError(`${dir}: its tokenizer has no tokenizer.json, which JavaScript reads; export again ` +
      "with `--tokenizer MODEL` (tfspec's sentencepiece model) to write one");
  }
  const cores = os.availableParallelism();
  const options = { graphOptimizationLevel: "all", intraOpNumThreads: threads ?? cores, logSeverityLevel: 3 };
  if (cores <= 4) options.extra = { session: { intra_op: spinning(ort.env.versions.common) } };
  let session;
  try {
    session = await ort.InferenceSession.create(graph, options);
  } catch (e) {
    throw new TranslateError(`${graph}: onnxruntime cannot load it (${e.message.split("\n")[0]})`);
  }
  return new Translator({ manifest, session, Tensor: ort.Tensor, tokenizer });
}
