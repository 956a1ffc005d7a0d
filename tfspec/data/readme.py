"""The README.md written beside a corpus: where the text came from, under which licences, what
cleaning and splitting did to it, and the command that makes it again."""

from __future__ import annotations

import shlex
from pathlib import Path

from tfspec.data.corpus import SPLITS

RULES = {
    "empty": "a side empty after markup stripping and whitespace normalisation",
    "identical": "source and target identical",
    "format-only": "a side with no letters besides format strings and placeholders",
    "length": "a side outside 1-100 words",
    "ratio": "one side longer than 3 x the other + 2 words",
    "untranslated": "the target is still English (same words, or >= 20% English function words)",
    "duplicate": "the same pair seen before",
}


def command(request: dict, data_dir: Path) -> str:
    """The shell command that makes this corpus again."""
    kind = request["kind"]
    words = ["tfspec", "data", kind]
    if kind == "fetch":
        words += ["--pair", request["pair"], "--sources", ",".join(request["sources"])]
    elif kind == "prepare":
        inputs = [i["path"] for i in request["inputs"]]
        words += ["--tsv", inputs[0]] if len(inputs) == 1 else ["--src", inputs[0], "--tgt", inputs[1]]
        words += ["--pair", request["pair"]]
    else:
        words += ["CORPUS", "--source", request["source"], "--sizes", ",".join(map(str, request["sizes"])),
                  "--max-words", str(request["max_words"])]
    if request.get("held_out"):
        words += ["--held-out", str(request["held_out"])]
    return shlex.join([*words, str(data_dir)])


def render(manifest: dict, data_dir: Path) -> str:
    src, tgt = manifest["src"], manifest["tgt"]
    out = [f"# {manifest['pair']} parallel corpus", "",
           f"Made by {manifest['created_by']} with:", "", "```bash", command(manifest["request"], data_dir), "```", "",
           f"Files: `{{train,dev,test}}.{{{src},{tgt}}}` (one segment per line, UTF-8, aligned line by line), "
           "`{train,dev,test}.docs` (the document of each line), `manifest.json` (counts, sources, sha256 of "
           "every file).", "", "| split | pairs | documents |", "|---|---:|---:|"]
    out += [f"| {s} | {manifest['splits'][s]['pairs']:,} | {manifest['splits'][s]['documents']:,} |" for s in SPLITS]
    out += ["", "## Sources and licences", "", "| source | packages | licence | train | dev | test |",
            "|---|---|---|---:|---:|---:|"]
    for name, info in manifest["sources"].items():
        packages = ", ".join(f"`{p}` {v}" for p, v in info["packages"].items()) or "-"
        counts = " | ".join(f"{info['pairs'][s]:,}" for s in SPLITS)
        out.append(f"| {info['title']} ({name}) | {packages} | {info['licence']} | {counts} |")
    if any(info["packages"] for info in manifest["sources"].values()):
        out += ["", "The text is the documentation of these Debian packages, translated by their projects, "
                "and stays under its licence: keep this file with any copy. Each package's full copyright "
                "notice is `/usr/share/doc/PACKAGE/copyright` inside it (unpacked under `.cache/root/` by "
                "`tfspec data fetch`). The MPL-2.0 text: https://mozilla.org/MPL/2.0/."]
    cleaning = manifest["cleaning"]
    if "dropped" in cleaning:
        out += ["", "## Split", "", f"Held out by {manifest['split']}: whole documents go to test, then dev, "
                f"in the order of the sha256 of their names, until each has about {manifest['held_out']:,} "
                "pairs; the rest is train. A pair whose source sentence also occurs in a held-out split is "
                "removed from train (and from dev, for test), so no test source is seen in training."]
        out += ["", "## Cleaning", "", f"{cleaning['aligned']:,} aligned pairs, {cleaning['kept']:,} kept; "
                f"{cleaning['held_out_overlap']:,} more removed for overlap with a held-out split. Dropped "
                "(a pair counts under the first rule it breaks):", ""]
        out += [f"- {name}: {cleaning['dropped'].get(name, 0):,} ({why})" for name, why in RULES.items()]
    else:
        sampled = ", ".join(f"{s} {n:,}" for s, n in cleaning["sampled_from"].items())
        out += ["", "## Sample", "", f"A sample of a cleaned corpus ({sampled} pairs), chosen by the sha256 of "
                "the source text among the pairs of one source short enough for quick tests; each split "
                "comes from the same split of the corpus, so dev and test are still held out by document."]
    return "\n".join(out) + "\n"
