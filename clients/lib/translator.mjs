// Lines -> ids -> generate.onnx -> text, as `tfspec translate` does it, for Node.js and browsers.
//
// Mirrors tfspec/cli/deploy.py (`cmd_translate`, `Codec`, `_read`) and tfspec/evaluate.py
// (`decode_all`, `batches`): blank lines stay blank, a line longer than the model's positions is
// cut with a warning, bad ids are refused with the line number, lines are decoded in batches of
// similar length and printed in input order. The search itself runs inside generate.onnx. No
// dependencies: the caller passes the runtime's Tensor class (onnxruntime-node or -web), the
// session and, for text, a tokenizer built from the export's tokenizer.json.

export const MAX_LINE = 100_000; // characters in a line (deploy.py's MAX_LINE)
const NO_LIMIT = 1n << 40n; // max_length when positions are unbounded (translate passes None)

export class TranslateError extends Error {}

const LINE_BREAKS = /\r\n|[\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029]/;
const PY_SPACE = "\t\n\v\f\r\x1c-\x1f \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000";
const BLANK = new RegExp(`^[${PY_SPACE}]*$`, "u");
const EDGES = new RegExp(`^[${PY_SPACE}]+|[${PY_SPACE}]+$`, "gu");
const WORDS = new RegExp(`[${PY_SPACE}]+`, "u");
const INTEGER = /^[+-]?\p{Nd}+(?:_\p{Nd}+)*$/u;

/** Python's `text.splitlines()` after universal newlines (what `sys.stdin.read()` gives). */
export function splitLines(text) {
  const lines = text.split(LINE_BREAKS);
  if (lines[lines.length - 1] === "") lines.pop();
  return lines;
}

/** Python's `not line.strip()`: its whitespace, not JavaScript's (U+FEFF is text there). */
export const isBlank = (line) => BLANK.test(line);

const pyStrip = (text) => text.replace(EDGES, "");
const codePoints = (text) => Array.from(text);
const thousands = (n) => n.toLocaleString("en-US");

/** Python's `repr()` of a string, for error messages that quote input as translate's do. */
export function pyRepr(text) {
  const quote = text.includes("'") && !text.includes('"') ? '"' : "'";
  const hidden = /[\p{Cc}\p{Cf}\p{Cs}\p{Co}\p{Cn}\p{Zl}\p{Zp}\p{Zs}]/u;
  const escapes = { "\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r", [quote]: `\\${quote}` };
  const body = codePoints(text).map((c) => {
    if (c in escapes) return escapes[c];
    if (c === " " || !hidden.test(c)) return c;
    const code = c.codePointAt(0);
    const [prefix, width] = code < 0x100 ? ["\\x", 2] : code < 0x10000 ? ["\\u", 4] : ["\\U", 8];
    return prefix + code.toString(16).padStart(width, "0");
  });
  return quote + body.join("") + quote;
}

/** Python's `int()` of one word: a sign, decimal digits of any script, single underscores. */
function pyInt(word) {
  if (!INTEGER.test(word)) return null;
  const digits = codePoints(word.replaceAll("_", "")).map((c) => {
    if (c === "+" || c === "-") return c;
    let zero = c.codePointAt(0); // Unicode puts each script's digits 0-9 in one run: find its start
    while (/\p{Nd}/u.test(String.fromCodePoint(zero - 1))) zero -= 1;
    return String((c.codePointAt(0) - zero) % 10);
  });
  return BigInt(digits.join(""));
}

/**
 * Which lines to decode together: evaluate.py's `batches` (examples), shortest first, stable;
 * with `oneLength`, a batch also ends where the length changes.
 */
export function batches(lengths, size, oneLength = false) {
  const order = lengths.map((n, i) => i).filter((i) => lengths[i] > 0);
  order.sort((a, b) => lengths[a] - lengths[b] || a - b);
  const out = [];
  for (const i of order) {
    const last = out[out.length - 1];
    if (!last || last.length >= size || (oneLength && lengths[last[0]] !== lengths[i])) out.push([]);
    out[out.length - 1].push(i);
  }
  return out;
}

/** The fields of tfspec.json that translation reads, each of its type (the file is data). */
function checkManifest(manifest) {
  const whole = (x) => Number.isSafeInteger(x) && x >= 0;
  const fields = [["vocab.size", whole], ["vocab.pad_id", whole], ["vocab.bos_id", whole], ["vocab.eos_id", whole],
    ["spec.family", (x) => typeof x === "string"], ["spec.positional.kind", (x) => typeof x === "string"],
    ["spec.positional.max_len", (x) => x === null || whole(x)]];
  for (const [name, ok] of fields) {
    const value = name.split(".").reduce((x, key) => (x !== null && typeof x === "object" ? x[key] : undefined),
      manifest);
    if (!ok(value)) throw new TranslateError(`tfspec.json: ${name} is missing or not what an export writes`);
  }
}

export class Translator {
  /**
   * manifest: the export's tfspec.json; session: an InferenceSession of generate.onnx; Tensor:
   * the runtime's Tensor class; tokenizer: a @huggingface/tokenizers Tokenizer, or null (ids).
   */
  constructor({ manifest, session, Tensor, tokenizer = null }) {
    checkManifest(manifest);
    const spec = manifest.spec;
    this.session = session;
    this.Tensor = Tensor;
    this.tokenizer = tokenizer;
    this.name = manifest.name;
    this.vocab = manifest.vocab;
    this.decoderOnly = spec.family === "decoder-only";
    // the longest sequence, its last token included (Positional.limit); exports before the
    // manifest said it followed the same rule from the spec
    this.limit = "position_limit" in manifest ? manifest.position_limit
      : spec.positional.kind !== "none" ? spec.positional.max_len : null;
    this.targetSize = this.vocab.target_size || this.vocab.size;
    // Exports before min_length and max_extra became plain inputs gave them defaults, which
    // onnxruntime's JavaScript bindings neither list nor feed: there a batch holds sources of one length
    this.rowLimits = session.inputNames.includes("max_extra");
    // Prompts of different lengths share a batch, left-padded, where the graph takes their mask
    // (as `tfspec translate --engine generate` batches them); older exports took one at a time
    this.leftPadded = this.decoderOnly && session.inputNames.includes("attention_mask");
  }

  /** Source ids (with end of sentence) of input line `number`; [] for a blank line (`Codec.encode`). */
  encode(line, number, warn = () => {}) {
    if (isBlank(line)) return [];
    const length = codePoints(line).length;
    if (length > MAX_LINE) {
      throw new TranslateError(`line ${number}: ${thousands(length)} characters, more than the ` +
        `${thousands(MAX_LINE)} a line may have; split it into sentences`);
    }
    let ids = this.tokenizer ? this.textIds(line) : this.tokenIds(line, number);
    if (this.limit !== null && ids.length > this.limit) {
      warn(`warning: line ${number}: ${ids.length} tokens, more than the model's ${this.limit} positions; ` +
        `translating the first ${this.limit}`);
      ids = [...ids.slice(0, this.limit - 1), this.vocab.eos_id];
    }
    return ids;
  }

  textIds(line) {
    const ids = this.tokenizer.encode(line).ids; // end of sentence from the post-processor
    const high = ids.reduce((a, b) => Math.max(a, b), -1);
    if (high >= this.targetSize) {
      throw new TranslateError(`the tokenizer gave id ${high}, outside the model's vocabulary ` +
        `(0..${this.targetSize - 1})`);
    }
    return ids;
  }

  tokenIds(line, number) {
    const words = pyStrip(line).split(WORDS);
    const ids = words.map(pyInt);
    if (ids.includes(null)) {
      throw new TranslateError(`line ${number}: expected token ids separated by spaces (this model directory ` +
        `has no tokenizer), got ${pyRepr(codePoints(pyStrip(line)).slice(0, 40).join(""))}`);
    }
    const bad = ids.find((id) => id < 0n || id >= BigInt(this.vocab.size));
    if (bad !== undefined) {
      throw new TranslateError(`line ${number}: token id ${bad} is outside the vocabulary (0..${this.vocab.size - 1})`);
    }
    return [...ids.map(Number), this.vocab.eos_id];
  }

  /** The text of output ids (`Codec.decode`): the tokenizer's, or the ids themselves. */
  decode(ids) {
    if (!this.tokenizer) return ids.join(" ");
    if (!ids.length) return "";
    return this.tokenizer.decode(ids, { skip_special_tokens: true, clean_up_tokenization_spaces: false });
  }

  /** Output ids of each batch of sources (right-padded), from one run of generate.onnx. */
  async generate(sources, { beam, alpha, maxExtra }) {
    const width = sources.reduce((a, s) => Math.max(a, s.length), 0);
    const cap = this.limit === null ? NO_LIMIT : BigInt(this.limit - 1);
    const own = BigInt(maxExtra) + BigInt(this.decoderOnly ? 0 : width); // one length when !rowLimits
    const maxLength = this.rowLimits || own > cap ? cap : own;
    const ids = new BigInt64Array(sources.length * width).fill(BigInt(this.vocab.pad_id));
    const first = (s) => (this.leftPadded ? width - s.length : 0); // where each row's own tokens start
    sources.forEach((s, r) => s.forEach((id, c) => { ids[r * width + first(s) + c] = BigInt(id); }));
    const scalar = (value) => new this.Tensor("int64", BigInt64Array.from([BigInt(value)]), []);
    const feeds = {
      input_ids: new this.Tensor("int64", ids, [sources.length, width]),
      max_length: scalar(maxLength),
      num_beams: scalar(beam),
      length_penalty: new this.Tensor("float32", Float32Array.from([alpha]), []),
    };
    if (this.session.inputNames.includes("attention_mask")) { // 1 at each source's own tokens: padding is data
      const mask = new BigInt64Array(sources.length * width);
      sources.forEach((s, r) => mask.fill(1n, r * width + first(s), r * width + first(s) + s.length));
      feeds.attention_mask = new this.Tensor("int64", mask, [sources.length, width]);
    }
    if (this.rowLimits) feeds.max_extra = scalar(maxExtra);
    if (this.session.inputNames.includes("min_length")) feeds.min_length = scalar(0);
    let out;
    try {
      out = await this.session.run(feeds, ["sequences", "sequences_lengths"]);
    } catch (e) {
      throw new TranslateError(`generate.onnx: onnxruntime failed (${String(e.message).split("\n")[0]})`);
    }
    const [, columns] = out.sequences.dims;
    return sources.map((s, r) => Array.from(
      out.sequences.data.subarray(r * columns, r * columns + Number(out.sequences_lengths.data[r])), Number));
  }

  /**
   * Translate `lines` (options: beam, alpha, maxExtra, batch); returns {outputs, tokens, seconds}
   * with tokens counted as translate counts them (each output and its end of sentence).
   */
  async translate(lines, { beam = 4, alpha = 0.6, maxExtra = 50, batch = 32, warn = () => {} } = {}) {
    const sources = lines.map((line, i) => this.encode(line, i + 1, warn));
    const started = performance.now();
    const outputs = sources.map(() => []);
    const size = this.decoderOnly && !this.leftPadded ? 1 : batch;
    for (const rows of batches(sources.map((s) => s.length), size, !this.rowLimits)) {
      const result = await this.generate(rows.map((i) => sources[i]), { beam, alpha, maxExtra });
      rows.forEach((i, r) => { outputs[i] = result[r]; });
    }
    const seconds = (performance.now() - started) / 1000;
    const tokens = outputs.reduce((sum, out, i) => sum + (sources[i].length ? out.length + 1 : 0), 0);
    return { outputs: outputs.map((ids) => this.decode(ids)), tokens, seconds };
  }
}
