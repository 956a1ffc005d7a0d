#!/usr/bin/env node
// node translate.mjs DIR [FILE] [--beam N] [--alpha A] [--max-extra N] [--batch N] [--threads N]
//
// `tfspec translate` without Python: reads lines (token ids, or text when DIR has tokenizer.json)
// from FILE or standard input and prints one line each, the same lines `tfspec translate` prints,
// from the export's generate.onnx (the encoder and the whole search in one graph). Bad input is
// one `error:` line on standard error and exit status 2, as in tfspec.

import fs from "node:fs";
import { parseArgs } from "node:util";

import { splitLines, TranslateError } from "../lib/translator.mjs";
import { openExport } from "./open-export.mjs";

const USAGE = "usage: translate.mjs DIR [FILE] [--beam N] [--alpha A] [--max-extra N] [--batch N] [--threads N]";
const OPTIONS = { // name: [low, high, integer?, default], the bounds of tfspec's own flags (tfspec/cli/types.py)
  beam: [1, 1024, true, 4], alpha: [0, 10, false, 0.6], "max-extra": [0, 2 ** 24, true, 50],
  batch: [1, 2 ** 24, true, 32], threads: [1, 1024, true, undefined],
};

const FLAGS = Object.fromEntries(Object.keys(OPTIONS).map((name) => [`--${name}`, name]));

function number(name, text) {
  const [low, high, integer, fallback] = OPTIONS[name];
  if (text === undefined) return fallback;
  const value = Number(text.replaceAll("_", ""));
  if (integer ? !/^\s*[+-]?\d+(_\d+)*\s*$/.test(text) : text.trim() === "" || Number.isNaN(value)) {
    throw new TranslateError(`argument --${name}: expected a ${integer ? "whole number" : "number"}, got '${text}'`);
  }
  if (!(Number.isFinite(value) && low <= value && value <= high)) {
    throw new TranslateError(`argument --${name}: must be between ${low.toLocaleString("en-US")} and ` +
      `${high.toLocaleString("en-US")}, got ${text}`);
  }
  return value;
}

function parse(argv) {
  const args = []; // "--max-extra -1" taken as argparse takes it (a value that looks negative)
  for (let i = 0; i < argv.length; i++) {
    const joined = argv[i] in FLAGS && i + 1 < argv.length && !argv[i + 1].startsWith("--");
    args.push(joined ? `${argv[i]}=${argv[++i]}` : argv[i]);
  }
  let parsed;
  try {
    parsed = parseArgs({ args, allowPositionals: true,
      options: Object.fromEntries(Object.keys(OPTIONS).map((name) => [name, { type: "string" }])) });
  } catch (e) {
    throw new TranslateError(`${e.message}\n${USAGE}`);
  }
  const { values, positionals } = parsed;
  if (positionals.length < 1 || positionals.length > 2) throw new TranslateError(`expected DIR [FILE]\n${USAGE}`);
  const options = Object.fromEntries(Object.keys(OPTIONS).map((name) => [name, number(name, values[name])]));
  return { dir: positionals[0], input: positionals[1], ...options };
}

/** The input's lines, as translate's `_read` gives them: UTF-8, universal newlines, splitlines. */
function read(input) {
  const source = input === undefined || input === "-" ? 0 : input;
  let bytes;
  try {
    bytes = fs.readFileSync(source);
  } catch (e) {
    const where = input ?? "<stdin>";
    throw new TranslateError(e.code === "ENOENT" ? `${where}: no such input file` : `${where}: ${e.message}`);
  }
  try {
    return splitLines(new TextDecoder("utf-8", { fatal: true, ignoreBOM: true }).decode(bytes));
  } catch {
    throw new TranslateError(`${input ?? "<stdin>"}: cannot read it as UTF-8 text`);
  }
}

async function main(argv) {
  const args = parse(argv);
  const translator = await openExport(args.dir, { threads: args.threads });
  process.stderr.write(`${translator.name}: generate.onnx on onnxruntime-node (CPU)\n`);
  const lines = read(args.input);
  const result = await translator.translate(lines, {
    beam: args.beam, alpha: args.alpha, maxExtra: args["max-extra"], batch: args.batch,
    warn: (line) => process.stderr.write(`${line}\n`),
  });
  process.stdout.write(result.outputs.map((line) => `${line}\n`).join(""));
  const rate = (result.tokens / Math.max(result.seconds, 1e-9)).toFixed(0);
  process.stderr.write(`${lines.length} lines, ${result.tokens} tokens in ${result.seconds.toFixed(2)}s ` +
    `(${rate} tokens/s), beam ${args.beam}\n`);
}

main(process.argv.slice(2)).catch((e) => {
  if (!(e instanceof TranslateError)) {
    process.stderr.write(`${e.stack}\nthis is a bug in translate.mjs\n`);
    process.exitCode = 70;
    return;
  }
  process.stderr.write(`error: ${e.message}\n`);
  process.exitCode = 2;
});
