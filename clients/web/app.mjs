// The page: loads an export directory (?model=URL, default ./model/) into onnxruntime-web (WASM)
// and translates what is typed, line by line as `tfspec translate` does (../lib/translator.mjs).
// Every file comes from this server: the runtime and its .wasm from node_modules, no CDN.
// For scripts driving the page (tools/checks/web_check.py): document.body.dataset.state is "loading",
// "ready", "busy", "done" or "error", and window.tfspecResult holds the last result.

import { Tokenizer } from "./node_modules/@huggingface/tokenizers/dist/tokenizers.mjs";
import * as ort from "./node_modules/onnxruntime-web/dist/ort.wasm.bundle.min.mjs";

import { splitLines, TranslateError, Translator } from "../lib/translator.mjs";

const $ = (id) => document.getElementById(id);
// an absolute URL: a relative one resolves against the bundle's own URL (docs/deploy-js.md)
ort.env.wasm.wasmPaths = new URL("./node_modules/onnxruntime-web/dist/", import.meta.url).href;
// threads need cross-origin isolation (COOP/COEP headers); without it, one thread
ort.env.wasm.numThreads = self.crossOriginIsolated ? navigator.hardwareConcurrency : 1;

function show(state, message, error = false) {
  document.body.dataset.state = state;
  $("status").textContent = message;
  $("status").classList.toggle("error", error);
}

async function fetchOk(url, what) {
  const response = await fetch(url);
  if (!response.ok) throw new TranslateError(`${url}: ${what} not found (HTTP ${response.status})`);
  return response;
}

async function load(base) {
  const manifest = await (await fetchOk(new URL("tfspec.json", base), "the export's tfspec.json")).json();
  const tokenizerFile = await fetch(new URL("tokenizer.json", base));
  const tokenizer = tokenizerFile.ok ? new Tokenizer(await tokenizerFile.json(), {}) : null;
  const graph = await (await fetchOk(new URL("generate.onnx", base), "generate.onnx (export with --generate)"))
    .arrayBuffer();
  const session = await ort.InferenceSession.create(new Uint8Array(graph),
    { executionProviders: ["wasm"], graphOptimizationLevel: "all" });
  return new Translator({ manifest, session, Tensor: ort.Tensor, tokenizer });
}

function option(id, low, high, integer) {
  const text = $(id).value;
  const value = Number(text);
  if (text.trim() === "" || !(low <= value && value <= high) || (integer && !Number.isInteger(value))) {
    throw new TranslateError(`${id}: must be a ${integer ? "whole " : ""}number between ${low} and ${high}`);
  }
  return value;
}

async function translate(translator) {
  show("busy", "translating…");
  const warnings = [];
  try {
    const lines = splitLines($("source").value);
    const result = await translator.translate(lines, {
      beam: option("beam", 1, 1024, true), alpha: option("alpha", 0, 10, false),
      maxExtra: option("max-extra", 0, 2 ** 24, true), warn: (w) => warnings.push(w),
    });
    $("output").value = result.outputs.join("\n");
    const rate = result.tokens / Math.max(result.seconds, 1e-9);
    $("speed").textContent = `${result.tokens} tokens in ${result.seconds.toFixed(2)} s: ${rate.toFixed(0)} tokens/s`;
    window.tfspecResult = { ...result, warnings, threads: ort.env.wasm.numThreads };
    show("done", [`${translator.name}: ${lines.length} lines translated`, ...warnings].join("; "));
  } catch (e) {
    window.tfspecResult = { error: e.message, warnings };
    show("error", `error: ${e.message}`, true);
    if (!(e instanceof TranslateError)) throw e;
  }
}

const base = new URL(new URLSearchParams(location.search).get("model") ?? "./model/", location.href);
show("loading", `loading ${base.pathname}…`);
load(base).then((translator) => {
  const text = translator.tokenizer ? "text" : "token ids";
  show("ready", `${translator.name} from ${base.pathname}: type ${text}, one line each; ` +
    `onnxruntime-web ${ort.env.versions.web}, WASM, ${ort.env.wasm.numThreads} thread(s)`);
  $("translate").disabled = false;
  $("translate").addEventListener("click", () => translate(translator));
}, (e) => show("error", `error: ${e.message}`, true));
