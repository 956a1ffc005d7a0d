"""The ``tfspec`` command: a thin layer over the public API, each subcommand in a module of this package.

Errors caused by input (specs, files, sizes) print one ``error:`` line each and exit 2.
Only the module of the subcommand that runs is imported: the spec schema, the IR and the
backends cost pydantic, networkx and torch, which ``tfspec --version`` and ``--help`` do not need.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import traceback
from collections.abc import Iterable

from tfspec import __version__, hugepages
from tfspec.errors import TfspecError

EPILOG = """\
SPEC is a path to a YAML spec or the name of a shipped one (see `tfspec list`):
  tfspec validate specs/base.yaml my-variant.yaml
  tfspec report base --format markdown
  tfspec graph tiny --format mermaid > tiny.mmd
  tfspec compile big --device meta
"""

COMMANDS = {
    "validate": ("specs", "check specs and explain what is wrong"),
    "schema": ("specs", "print the spec JSON Schema (for editor completion and validation)"),
    "graph": ("specs", "dump the IR graph of a spec (ops, tensors with symbolic shapes, params)"),
    "report": ("specs", "parameters, FLOPs, paths and training cost, from the IR (no allocation)"),
    "table3": ("specs", "reproduce the parameter column of the paper's Table 3"),
    "compile": ("specs", "emit the PyTorch module, check it against the IR, run a step"),
    "list": ("specs", "list the shipped specs"),
    "table1": ("analysis", "reproduce the paper's Table 1 from one-layer specs"),
    "plot": ("analysis", "plot per-layer cost and path length against n (PNG or SVG)"),
    "export": ("deploy", "write ONNX graphs (or a Hugging Face checkpoint), check them against PyTorch"),
    "translate": ("deploy", "decode input lines with an exported model (onnxruntime)"),
    "generate": ("generate", "continue a text prompt with a decoder-only model"),
    "serve": ("serve", "serve an exported model over HTTP (batching, limits, metrics, OpenAI API)"),
    "import": ("interop", "turn a Hugging Face checkpoint directory into a spec and tfspec weights"),
    "data": ("data", "fetch, prepare and tokenize parallel corpora"),
    "train": ("train", "train a spec on a parallel corpus with the paper's recipe"),
    "average": ("train", "average the last k checkpoints of a run (§6.1)"),
    "evaluate": ("train", "translate a split with beam search and score it with sacrebleu"),
    "finetune": ("finetune", "add a classification head to a pretrained encoder and train it"),
    "transcribe": ("ctc", "read speech (Whisper, wav2vec 2.0), an image or frames with an exported model"),
    "classify": ("vision", "label image files with an exported image classifier (ViT, DeiT, DINOv2)"),
    "sample": ("images", "draw images from an image run and write a PNG grid"),
}
"""Each subcommand: the module (in tfspec.cli) whose ``register`` adds it, and its line in
``tfspec --help``, which lists them in this order without importing any."""
WEIGHTS = frozenset({"compile", "export", "translate", "generate", "serve", "import", "train", "average", "evaluate",
                     "finetune", "transcribe", "classify", "sample"})
"""Subcommands that hold weights: run with huge pages where the kernel makes them opt-in (``hugepages``)."""


def parser(commands: Iterable[str] = COMMANDS) -> argparse.ArgumentParser:
    """The command line with every subcommand listed and ``commands`` complete: their modules
    are imported to add their arguments (``main`` passes only the one it runs)."""
    p = argparse.ArgumentParser(
        prog="tfspec", epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Compile declarative Transformer specs (YAML) into a graph IR, analyse it, and emit "
                    "PyTorch modules.")
    p.add_argument("--version", action="version", version=f"tfspec {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    listed = {name: sub.add_parser(name, help=line, description=line) for name, (_, line) in COMMANDS.items()}

    def command(name, fn, description=None):
        c = listed[name]
        c.set_defaults(fn=fn)
        c.description = description or c.description
        return c

    for module in dict.fromkeys(COMMANDS[name][0] for name in commands):
        importlib.import_module(f"tfspec.cli.{module}").register(command)
    return p


def _named(argv: list[str]) -> list[str]:
    """The subcommand on the line, if it is one: its first word that is not an option (tfspec's
    own options take no value)."""
    name = next((word for word in argv if not word.startswith("-")), None)
    return [name] if name in COMMANDS else []


BUG = 70  # EX_SOFTWARE: tfspec itself failed; input errors exit 2


def command() -> int:
    """The ``tfspec`` command (its console script and ``python -m tfspec``): the process is the
    command's own, so a subcommand that holds weights may re-execute it with huge pages
    (``hugepages``) before running ``main``."""
    if WEIGHTS.intersection(_named(sys.argv[1:])):
        hugepages.reexec()
    return main()


def main(argv: list[str] | None = None) -> int:
    """Run one subcommand (``argv``, default: this process's arguments) in this process, never
    replaced: a notebook or a wrapper calling it keeps running. The exception boundary: whatever
    input can cause (a bad spec, file or size, an unreadable path, a full disk, memory) ends as
    ``error:`` lines and exit 2; anything else is a bug in tfspec and keeps its traceback, under
    a line that says so."""
    argv = sys.argv[1:] if argv is None else argv
    args = parser(_named(argv)).parse_args(argv)
    return guarded(args.fn, args)


def guarded(fn, *args) -> int:
    """``fn(*args)`` behind ``main``'s exception boundary (also each process of ``tfspec serve --workers``)."""
    try:
        return fn(*args)
    except TfspecError as e:
        return _refuse(e.lines())
    except KeyboardInterrupt as e:
        print(f"interrupted: {e}" if str(e) else "interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except OSError as e:  # the file system's answer about a path the user gave: missing, denied, full
        where = f"{e.filename}: " if e.filename else ""
        return _refuse([f"{where}{e.strerror or e}"])
    except MemoryError:
        return _refuse(["out of memory: this machine cannot hold the model or data asked for; try a smaller "
                        "spec, batch or --device meta"])
    except Exception:
        traceback.print_exc()
        print(f"error: this is a bug in tfspec {__version__}, not a problem with your input; please report it "
              "with the command line and the traceback above", file=sys.stderr)
        return BUG


def _refuse(lines: list[str]) -> int:
    for line in lines:
        print(f"error: {line}", file=sys.stderr)
    return 2
