"""``tfspec validate``, ``schema``, ``graph``, ``report``, ``table3``, ``compile`` and ``list``:
a spec, the IR it lowers to, its parameter count against the paper's, and its PyTorch module."""

from __future__ import annotations

import json
import sys
import time

from tfspec.analysis import analyze_params
from tfspec.cli import analysis, train_memory
from tfspec.cli.models import checkpoint_directory, load_model_spec
from tfspec.cli.tables import millions, render
from tfspec.cli.types import POSITIVE, integer, out_file
from tfspec.errors import TfspecError
from tfspec.ir import build_graph
from tfspec.paper import deviation, table3
from tfspec.spec import Spec, load_spec, resolve, shipped_specs

SPEC_HELP = ("a spec file or shipped name, a `tfspec import` directory, or a Hugging Face checkpoint directory "
             "(read as `tfspec import` reads it)")
ABSURD = 10**12  # parameters: beyond any model trained to date; worth a warning before anything allocates


def cmd_validate(args) -> int:
    failed = 0
    for ref in args.specs:
        try:
            spec = load_model_spec(ref)
            graph = build_graph(spec)
        except TfspecError as e:
            failed += 1
            for line in e.lines():
                print(f"error: {line}", file=sys.stderr)
            continue
        print(f"ok: {checkpoint_directory(ref) or resolve(ref)}: {spec.name} ({spec.family}, {graph.num_params:,} parameters)")
        _warn_if_absurd(graph)
    return 2 if failed else 0


def _warn_if_absurd(graph) -> None:
    if graph.num_params > ABSURD:
        print(f"warning: {graph.name} has {graph.num_params:.3g} parameters ({graph.num_params * 4 / 2**40:.1f} "
              "TiB in float32); analysis works, but nothing this size can be allocated here", file=sys.stderr)


def cmd_schema(args) -> int:
    schema = Spec.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "tfspec model spec"
    print(json.dumps(schema, indent=2))
    return 0


def cmd_graph(args) -> int:
    from tfspec.ir.export import FORMATS

    text = FORMATS[args.format](build_graph(load_model_spec(args.spec)))
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


def _attention_sizes(spec) -> str:
    """"heads 32 (8 key/value), d_k 128, d_v 128, " as the layers' plans resolve them (their
    distinct values joined by "/" where layers differ); empty without attention."""
    layers = [p.attention for name, _ in spec.stacks for p in spec.plan(name) if p.attention is not None]
    if not layers:
        return ""
    values = {f: "/".join(str(v) for v in dict.fromkeys(getattr(a, f) for a in layers))
              for f in ("heads", "kv_heads", "d_k", "d_v")}
    kv = f" ({values['kv_heads']} key/value)" if values["kv_heads"] != values["heads"] else ""
    return f"heads {values['heads']}{kv}, d_k {values['d_k']}, d_v {values['d_v']}, "


def cmd_report(args) -> int:
    from tfspec.interop.hf.counts import count_line, transformers_count  # the family modules: not at every start

    spec = load_model_spec(args.spec)
    graph = build_graph(spec)
    if args.train:
        return train_memory.report(spec, graph, args)
    report = analyze_params(graph)
    costs = "" if args.format == "json" else analysis.report_text(spec, graph, args)  # fails before printing
    theirs = transformers_count(spec, report.total)
    if args.format == "json":
        params = report.to_json() | ({"transformers": theirs} if theirs else {})
        print(json.dumps({"name": spec.name, "family": spec.family, "params": params,
                          **analysis.report_json(spec, graph, args), "spec": spec.model_dump(mode="json")},
                         indent=2))
        return 0
    rows = []
    for section, parts in report.sections.items():
        subtotal = sum(parts.values())
        rows.append([section, f"{subtotal:,}", f"{100 * subtotal / report.total:.1f}%"])
        rows += [[f"  {part}", f"{n:,}", ""] for part, n in parts.items()]
    rows.append(["total", f"{report.total:,}", "100.0%"])
    dims = f"{spec.family}; d_model {spec.d_model}, {_attention_sizes(spec)}d_ff {spec.d_ff}; " + ", ".join(
        f"{n} {s.num_layers} layers" for n, s in spec.stacks)
    heading = f"{spec.name}: {report.total:,} parameters ({millions(report.total)})"
    if report.active != report.total:  # a mixture of experts: each token runs top_k of E
        heading += f", {report.active:,} active per token ({millions(report.active)})"
    if args.format == "markdown":
        print(f"### {heading}\n\n{dims}\n")
    else:
        print(f"{heading}\n{dims}\n")
    print(render(["component", "parameters", "share"], rows, args.format), end="")
    shared_depth = {}  # layers.K.<role> = layers.J.<role>: one line per layer whose weights others apply
    for use, owner in report.tied.items():
        stack, _, rest = use.partition(".layers.")
        index, _, role = rest.partition(".")
        source = getattr(spec, stack).owner(int(index)) if rest and index.isdigit() else None
        if source is not None and owner == f"{stack}.layers.{source}.{role}" and source != int(index):
            shared_depth.setdefault((stack, source, None), set()).add(int(index))  # universal, ALBERT
        elif rest and owner == f"{stack}.layers.0.{role}" and index.isdigit():  # one per stack (T5's bias)
            shared_depth.setdefault((stack, 0, role), set()).add(int(index))
        else:
            print(f"\ntied: {use} = {owner}", end="")
    for (stack, source, role), indices in shared_depth.items():
        what = " (shared across depth)" if role is None else f": {role}"
        print(f"\ntied: {stack} layers {_spans(sorted(indices))} = {stack} layer {source}{what}", end="")
    if report.tied:
        print()
    ref = spec.reference
    if ref and ref.params_millions:
        print(f"\n{ref.source}{f' ({ref.row})' if ref.row else ''}: {ref.params_millions:g}M; "
              f"tfspec {millions(report.total)} ({deviation(report.total, ref.params_millions):+.1%})")
    if theirs:
        print(f"\n{count_line(theirs)}")
    print(costs, end="")
    _warn_if_absurd(graph)
    return 0


def _spans(indices: list[int]) -> str:
    """Sorted layer indices as runs: ``1-11``, or ``2, 4`` (ALBERT's cycles share every other layer)."""
    if indices[-1] - indices[0] == len(indices) - 1:
        return f"{indices[0]}-{indices[-1]}" if len(indices) > 1 else str(indices[0])
    return ", ".join(map(str, indices))


def cmd_table3(args) -> int:
    rows = table3()
    if args.format == "json":
        print(json.dumps([{"spec": r.spec, "row": r.row, **r.fields, "params": r.params,
                           "paper_millions": r.paper_millions, "deviation": r.deviation} for r in rows], indent=2))
        return 0
    keys = list(rows[0].fields)
    table = [[r.row, *r.fields.values(), millions(r.params), r.paper_millions and f"{r.paper_millions:g}M",
              _signed(r.deviation, "{:+.1%}"), _signed(r.implied_extra_vocab, "{:+,.0f}"), r.spec] for r in rows]
    print(render(["row", *keys, "tfspec", "paper", "deviation", "extra vocab", "spec"], table, args.format), end="")
    gaps = [r.implied_extra_vocab for r in rows if r.paper_millions and r.row != "big"]
    print(f"\nThe paper's counts for the base family sit above tfspec's by what {min(gaps):,.0f}-{max(gaps):,.0f} "
          f"(mean {sum(gaps) / len(gaps):,.0f}) more d_model-wide vocabulary rows would add: the gap scales with "
          "d_model, as if its vocabulary were ~4k tokens larger than 37000. tfspec prints its own count and "
          "does not fudge the formula.")
    return 0


def _signed(value: float | None, fmt: str) -> str:
    return "" if value is None else fmt.format(value)


def cmd_compile(args) -> int:
    import torch

    from tfspec.backends.torch import build_module

    spec = load_model_spec(args.spec)
    graph = build_graph(spec)
    started = time.perf_counter()
    model = build_module(graph, device=args.device)
    built = time.perf_counter() - started
    counted = sum(p.numel() for p in model.parameters())
    status = 0 if counted == graph.num_params else 1
    print(f"{spec.name}: {len(graph.nx)} IR ops -> PyTorch module on {args.device} in {built:.2f}s")
    print(f"parameters: IR {graph.num_params:,}, module {counted:,} ({'DIFFERENT' if status else 'equal'})")
    if args.device == "meta":
        return status
    gen = torch.Generator().manual_seed(0)
    vocab = spec.vocab
    tokens = [torch.randint(4, vocab.size if port == "src" else vocab.tgt_size, (args.batch, args.length),
                            generator=gen).to(args.device) for port in ("src", "tgt") if port in graph.ports]
    started = time.perf_counter()
    if "frames" in graph.ports:  # feature vectors in: random frames, random labels to score
        frames = torch.randn(args.batch, args.length, spec.frames.features, generator=gen).to(args.device)
        lengths = torch.full((args.batch,), args.length, device=args.device)
        logits = model.run({"frames": frames, "lengths": lengths})["logits"]
        tokens = [torch.randint(0, logits.shape[-1], logits.shape[:2], generator=gen).to(args.device)]
    else:
        logits = model(*tokens)
    loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), tokens[-1].flatten())
    loss.backward()
    print(f"forward + backward on a random batch {args.batch} x {args.length}: logits {tuple(logits.shape)}, "
          f"loss {loss.item():.3f} (uniform would be {torch.log(torch.tensor(float(logits.shape[-1]))):.3f}), "
          f"{time.perf_counter() - started:.2f}s")
    return status


def cmd_list(args) -> int:
    root = shipped_specs()
    rows = []
    for path in sorted(root.rglob("*.yaml")):
        spec = load_spec(path)
        about = spec.description or (spec.reference.source + f" ({spec.reference.row})" if spec.reference else "")
        rows.append([str(path.relative_to(root).with_suffix("")), spec.family, millions(build_graph(spec).num_params),
                     about])
    print(render(["name", "family", "params", "about"], rows), end="")
    return 0


def register(command) -> None:
    c = command("validate", cmd_validate,
                "Validate specs: every problem is printed as FILE:LINE: FIELD: message, and the exit status "
                "is 2 if any spec is invalid.")
    c.add_argument("specs", nargs="+", metavar="SPEC", help=SPEC_HELP)
    command("schema", cmd_schema)
    c = command("graph", cmd_graph)
    c.add_argument("spec", metavar="SPEC", help=SPEC_HELP)
    c.add_argument("--format", choices=["json", "dot", "mermaid"], default="json")
    c.add_argument("-o", "--output", type=out_file, help="write here instead of standard output")
    c = command("report", cmd_report)
    c.add_argument("spec", metavar="SPEC", help=SPEC_HELP)
    c.add_argument("--format", choices=["text", "json", "markdown"], default="text")
    analysis.add_report_options(c)
    train_memory.add_options(c)
    c = command("table3", cmd_table3)
    c.add_argument("--format", choices=["text", "json", "markdown"], default="text")
    c = command("compile", cmd_compile,
                "Build the PyTorch module of a spec, check its parameters equal the IR's, and run one forward "
                "and backward pass on random tokens. --device meta builds shapes only (any size).")
    c.add_argument("spec", metavar="SPEC", help=SPEC_HELP)
    c.add_argument("--device", default="cpu", help="cpu, cuda or meta (default: cpu)")
    c.add_argument("--batch", type=integer(1, 4096), default=2, help="sequences in the random batch (default: 2)")
    c.add_argument("--length", type=POSITIVE, default=16, help="tokens per sequence (default: 16)")
    command("list", cmd_list)
