"""Command line: ``zoo list``, ``zoo info``, ``zoo predict``, ``zoo generate``, ``zoo finetune``,
``zoo eval``, ``zoo demo``, ``zoo bench``, ``zoo export`` (also ``python -m zoo``)."""
from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections.abc import Sequence

import torch
from PIL import Image
from tqdm import tqdm

import zoo
from zoo.architectures.generation import check_options
from zoo.training import demo, evaluate, finetune
from zoo.deploy import bench
from zoo.deploy import exporter
from zoo.deploy import inference
from zoo.store import registry
from zoo.errors import DataError, run_command
from zoo.tokenizer import complete

PREDICT_BATCH_SIZE = 64


def _list(args: argparse.Namespace) -> int:
    names = zoo.list_models(args.pattern, pretrained=args.pretrained)
    for name in names:
        print(name)
    if not names:
        kind = "weights" if args.pretrained else "architecture"
        print(f"zoo: no {kind} matches {args.pattern!r}; `zoo list{'' if args.pretrained else ' --pretrained'}` "
              "shows every name", file=sys.stderr)
    return 0


def _format_size(num_bytes: int | None) -> str:
    return "unknown" if num_bytes is None else f"{num_bytes / 2**20:.1f} MiB"


def _info(args: argparse.Namespace) -> int:
    info = zoo.info(args.name)
    if args.json:
        print(json.dumps(info.to_dict(), indent=2))
        return 0
    rows = [
        ("name", info.name),
        ("architecture", info.arch),
        ("source", info.source),
        ("sha256", info.sha256 or "none published (verified against the server's hash header)"),
        ("parameters", f"{info.num_params:,}" if info.num_params else "unknown"),
        ("GMACs", info.gmacs if info.gmacs is not None else
         f"not counted ({bench.GRAPH_SKIP_REASON})" if registry.input_kind(info.arch) == "graphs" else "unknown"),
        ("file size", _format_size(info.file_size)),
        ("classes", info.num_classes),
        ("preprocess", json.dumps(info.preprocess)),
        ("recipe", info.recipe or "-"),
        ("license", info.license or "-"),
        ("card", info.card or "-"),
    ]
    for dataset, values in info.metrics.items():
        rows.append((f"metrics [{dataset}]", ", ".join(f"{k}={v}" for k, v in values.items())))
    width = max(len(key) for key, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  {value}")
    return 0


def _predict(args: argparse.Namespace) -> int:
    for path in args.images:  # a missing, unreadable or truncated file is found before the model loads
        _open_image(path, decode=False)
    model = zoo.load(args.name, device=args.device)
    preprocess = zoo.transforms(model)
    cfg = model.pretrained_cfg
    names = cfg.get("class_names") or (registry.load_categories(cfg["categories"]) if cfg.get("categories") else None)
    progress = tqdm(total=len(args.images), desc="zoo predict", unit="img", leave=False,
                    disable=len(args.images) <= args.batch_size)
    try:
        for start in range(0, len(args.images), args.batch_size):
            paths = args.images[start:start + args.batch_size]
            batch = torch.stack([preprocess(_open_image(path)) for path in paths]).to(args.device)
            if args.optimize and start == 0:
                progress.write(f"zoo: optimizing {args.name} ({args.optimize}) on the first {len(paths)} images; "
                               "compiling takes a while", file=sys.stderr)
                # timed on this batch's size; a last, smaller batch is padded onto its graph
                model = zoo.optimize(model, batch, args.optimize, max_batch_graphs=1)
                progress.write(f"zoo: {str(model.optimize_report).splitlines()[0]}", file=sys.stderr)
            with torch.no_grad():  # not inference_mode: an optimized model's compiled graph expects no_grad
                probs = model(batch).softmax(dim=-1)
            top = probs.topk(min(args.topk, probs.shape[-1]), dim=-1)
            lines = []
            for path, values, indices in zip(paths, top.values, top.indices):
                lines.append(path)
                lines += [f"  {p:7.2%}  {names[i] if names else i} ({i})"
                          for p, i in zip(values.tolist(), indices.tolist())]
            progress.write("\n".join(lines), file=sys.stdout)
            progress.update(len(paths))
    finally:
        progress.close()  # clears the bar, also before an error message
    return 0


def _open_image(path: str, decode: bool = True) -> Image.Image:
    """The decoded image (``decode``), or after only checking that the file is a whole image
    (PIL's ``verify``: a truncated PNG fails, a JPEG's data is read only when decoded), or an
    error naming the file."""
    try:
        with Image.open(path) as image:
            if decode:
                image.load()
            else:
                image.verify()
            return image
    except FileNotFoundError:
        raise DataError(f"{path}: no such image file") from None
    except IsADirectoryError:
        raise DataError(f"{path} is a folder; pass the image files in it, e.g. {path.rstrip('/')}/*") from None
    except (OSError, SyntaxError, ValueError) as error:  # PIL's errors for unreadable or truncated files
        raise DataError(f"{path} is not a readable image ({error}); remove it or replace it") from None


def _generate(args: argparse.Namespace) -> int:
    check_options(args.max_new_tokens, args.temperature, args.top_k, args.top_p)  # before the model loads
    model = zoo.load(args.name, device=args.device)
    sys.stdout.write(args.prompt.encode("utf-8", "surrogateescape").decode("utf-8", "replace"))  # bytes as given
    try:
        complete(model, args.prompt, args.max_new_tokens, args.seed, stream=_write_now,
                 temperature=args.temperature, top_k=args.top_k, top_p=args.top_p)
    finally:
        print()  # ends the streamed line, also before an error message
    return 0


def _write_now(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


def _whole_number(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None


def _positive_int(text: str) -> int:
    value = _whole_number(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {value}")
    return value


def _non_negative_int(text: str) -> int:
    value = _whole_number(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def _finetune(args: argparse.Namespace) -> int:
    finetune.run(args, command=args.command_line)
    return 0


def _eval(args: argparse.Namespace) -> int:
    rows = evaluate.compare(args.name, args.limit)
    print(f"{'evaluation':<24}{'metric':<8}{'claimed':>10}{'measured':>10}")
    for row in rows:
        flag = "" if row["ok"] else "   <-- differs from the card"
        print(f"{row['task']:<24}{row['metric']:<8}{row['claimed']:>10.4f}{row['measured']:>10.4f}{flag}")
    if all(row["ok"] for row in rows):
        print(f"{args.name}: every metric matches its card")
        return 0
    print(f"zoo: error: {args.name} does not reproduce its card (tolerance: {evaluate.ACCURACY_TOLERANCE} points "
          f"for accuracies, {evaluate.RELATIVE_TOLERANCE:.0%} for other metrics)", file=sys.stderr)
    return 1


def _demo(args: argparse.Namespace) -> int:
    demo.run(args, command=args.command_line)
    return 0


def _bench(args: argparse.Namespace) -> int:
    batch_sizes = bench.parse_batch_sizes(args.batch)
    rows, skipped = bench.bench(bench.select(args.patterns), batch_sizes, args.repeats, optimize=not args.no_optimize)
    print("\n".join(bench.machine_header()))
    print(bench.format_table(rows))
    for name, reason in skipped:
        print(f"skipped {name}: {reason}")
    if args.csv:
        bench.write_csv(rows, args.csv)
        print(f"wrote {args.csv}")
    return 0


def _export(args: argparse.Namespace) -> int:
    out = exporter.check_destination(args.out, args.format, args.overwrite)  # before the model loads
    model = zoo.load(args.name)
    example = exporter.example_input_for(model, batch=args.batch or exporter.EXAMPLE_BATCH)
    result = zoo.export(model, out, args.format, example_input=example, dynamic_batch=args.batch is None,
                        opset=args.opset, overwrite=args.overwrite)
    checked_in = "onnxruntime" if args.format == "onnx" else "the re-loaded file"
    batch = f"fixed batch of {args.batch}" if args.batch else "any batch size"
    print(f"wrote {result.path} ({args.format}, {_format_size(result.size_bytes)}, {batch}); {checked_in} matches "
          f"PyTorch within {result.max_abs_diff:.2g} (max abs diff), {result.seconds:.1f} s")
    return 0
