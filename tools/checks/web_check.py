"""The web page (clients/web) in a real headless Chromium: it must print what `tfspec translate` prints.

Serves clients/ and an export directory on 127.0.0.1 (COOP/COEP headers, so onnxruntime-web's
WASM may use threads), drives the Debian `chromium` with puppeteer-core (clients/web/drive-page.mjs:
no browser download), types the first N lines of the shipped sample's test split into the
page, presses Translate twice (the second run's tokens/s is the warm one) and compares every
output line with `tfspec translate DIR --beam B` on the same lines. Writes a screenshot.

    apt-get install -y chromium && (cd clients/web && npm ci --ignore-scripts)
    python tools/checks/web_check.py                                  # tiny, random weights, the sample's tokenizer
    python tools/checks/web_check.py --model small-onnx --screenshot docs/web-translate.png

Exit status 0 when every line is equal, 1 when one is not, 2 when something it needs is missing
(chromium, node, clients/web/node_modules): CI installs them, so a check that cannot run fails.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import shutil
import subprocess
import sys
import tempfile
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CLIENTS = REPO / "clients"
WEB = CLIENTS / "web"


class Handler(SimpleHTTPRequestHandler):
    """clients/ at /, the export at /model/; cross-origin isolated, so WASM threads are allowed."""

    extensions_map = {**SimpleHTTPRequestHandler.extensions_map, ".mjs": "text/javascript",
                      ".wasm": "application/wasm", ".onnx": "application/octet-stream"}

    def __init__(self, *args, model: Path, **kwargs):
        self.model = model
        super().__init__(*args, directory=str(CLIENTS), **kwargs)

    def translate_path(self, path: str) -> str:
        if path.startswith("/model/"):
            self.directory, path = str(self.model), path[len("/model"):]
        return super().translate_path(path)

    def end_headers(self) -> None:
        self.send_header("Cross-Origin-Opener-Policy", "same-origin")
        self.send_header("Cross-Origin-Embedder-Policy", "require-corp")
        super().end_headers()

    def log_message(self, *args) -> None:
        pass


def missing(chromium: str) -> list[str]:
    """What the check needs and this machine lacks, each with how to get it."""
    out = []
    if shutil.which("node") is None:
        out.append("node (Node.js 20 or newer)")
    if not (WEB / "node_modules" / "puppeteer-core").is_dir():
        out.append("clients/web/node_modules: (cd clients/web && npm ci --ignore-scripts)")
    if shutil.which(chromium) is None:
        out.append(f"{chromium}: apt-get install -y chromium")
    return out


def tiny_export(work: Path) -> Path:
    """tiny (random weights) with the sample's sentencepiece model, generate.onnx and tokenizer.json."""
    from tfspec.data import sample_dir, train_tokenizer

    tokenizer = train_tokenizer(sample_dir(), 1000, out_dir=work)
    tfspec(["export", "tiny", "-o", str(work / "model"), "--generate", "--tokenizer", str(tokenizer)])
    return work / "model"


def tfspec(args: list[str], stdin: str | None = None) -> str:
    done = subprocess.run([sys.executable, "-m", "tfspec", *args], input=stdin, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"error: tfspec {' '.join(args)} failed:\n{done.stderr.strip()}")
    return done.stdout


def drive(url: str, lines: list[str], args, runs: int = 2) -> dict:
    """What the page did: its status line, each run's outputs, tokens, seconds and threads."""
    job = {"url": url, "chromium": shutil.which(args.chromium), "lines": lines, "beam": args.beam, "runs": runs,
           "screenshot": str(args.screenshot.resolve()) if getattr(args, "screenshot", None) else None}
    done = subprocess.run(["node", str(WEB / "drive-page.mjs")], input=json.dumps(job), capture_output=True, text=True,
                          timeout=args.timeout)
    if done.returncode != 0:
        sys.exit(f"error: the browser run failed:\n{done.stderr.strip()}")
    return json.loads(done.stdout)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", type=Path, help="an export with generate.onnx and tokenizer.json (default: tiny)")
    p.add_argument("--lines", type=int, default=40, help="test lines to type, English then German (default 40)")
    p.add_argument("--beam", type=int, default=4)
    p.add_argument("--chromium", default="/usr/bin/chromium")
    p.add_argument("--screenshot", type=Path, help="where to write the page's screenshot (PNG)")
    p.add_argument("--timeout", type=float, default=600, help="seconds the browser may take")
    args = p.parse_args()
    if needs := missing(args.chromium):
        print("error: the web check cannot run; missing:\n  " + "\n  ".join(needs), file=sys.stderr)
        return 2
    from tfspec.data import sample_dir

    sides = [(sample_dir() / f"test.{s}").read_text(encoding="utf-8").splitlines() for s in ("en", "de")]
    lines = (sides[0][: (args.lines + 1) // 2] + sides[1])[: args.lines]
    with tempfile.TemporaryDirectory() as work:
        model = args.model or tiny_export(Path(work))
        if not (model / "generate.onnx").is_file() or not (model / "tokenizer.json").is_file():
            print(f"error: {model} needs generate.onnx and tokenizer.json: `tfspec export SPEC -o DIR --generate "
                  "--tokenizer MODEL`", file=sys.stderr)
            return 2
        expected = tfspec(["translate", str(model), "--beam", str(args.beam)], "\n".join(lines) + "\n").splitlines()
        with serve(model) as url:
            result = drive(url, lines, args)
    return report(result, expected, args)


@contextlib.contextmanager
def serve(model: Path):
    """The page's URL, served with ``model`` on 127.0.0.1 while the context lasts."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, model=model.resolve()))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/web/index.html?model=/model/"
    finally:
        server.shutdown()


def report(result: dict, expected: list[str], args) -> int:
    runs = result["runs"]
    if not runs or runs[-1].get("error"):
        print(f"error: the page says: {result['status']}\n" + "\n".join(result["console"]), file=sys.stderr)
        return 1
    equal = [sum(a == b for a, b in zip(run["outputs"], expected)) for run in runs]
    warm = runs[-1]
    print(f"web: {equal[-1]}/{len(expected)} lines equal to `tfspec translate --beam {args.beam}` "
          f"(runs: {', '.join(map(str, equal))}); onnxruntime-web WASM, {warm['threads']} thread(s): "
          f"{warm['tokens']} tokens in {warm['seconds']:.2f}s, {warm['tokens'] / warm['seconds']:.0f} tokens/s "
          f"(first run {runs[0]['tokens'] / runs[0]['seconds']:.0f})")
    for i, (got, want) in enumerate(zip(warm["outputs"], expected), 1):
        if got != want:
            print(f"  line {i}: page {got[:80]!r}\n  {'':>{len(str(i)) + 6}} tfspec {want[:80]!r}")
    if args.screenshot:
        print(f"screenshot: {args.screenshot}")
    ok = len(warm["outputs"]) == len(expected) and all(n == len(expected) for n in equal)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
