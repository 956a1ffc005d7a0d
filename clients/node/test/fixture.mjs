// What the tests compare with: the directory $TFSPEC_JS_FIXTURE that tests/node_fixture.py
// wrote (`npm test` writes one first: test/with-fixture.mjs; tests/test_node_client.py too).

import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

export const NODE_CLIENT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const dir = process.env.TFSPEC_JS_FIXTURE;

/** Why the tests cannot run, or undefined. */
export const missing = dir ? undefined : "no fixture: run `npm test` (or set TFSPEC_JS_FIXTURE)";
const read = (name) => dir && JSON.parse(fs.readFileSync(path.join(dir, name), "utf8"));
export const fixture = read("cases.json");
export const python = read("python.json");
