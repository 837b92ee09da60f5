"""The argument parser of ``zoo`` and `main`."""
from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Sequence

from zoo.cli.commands import *  # noqa: F403  (temporary)
from zoo.cli.commands import _bench, _demo, _eval, _export, _finetune, _generate, _info, _list, _non_negative_int, _positive_int, _predict, PREDICT_BATCH_SIZE, demo, exporter, finetune, inference
from zoo.errors import run_command


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="zoo", description="zoo: list models, show weight metadata, classify images, generate text, fine-tune, evaluate, "
        "demo, benchmark, export."
    )
    commands = parser.add_subparsers(dest="command", required=True)

    p = commands.add_parser("list", help="list architectures, or weights with --pretrained")
    p.add_argument("pattern", nargs="?", default="*", help="fnmatch pattern, e.g. 'resnet*'")
    p.add_argument("--pretrained", action="store_true", help="list weight names (arch.tag)")
    p.set_defaults(run=_list)

    p = commands.add_parser("info", help="metadata of a weight entry")
    p.add_argument("name", help="arch.tag, or an architecture for its default weights")
    p.add_argument("--json", action="store_true", help="print the entry as JSON")
    p.set_defaults(run=_info)

    p = commands.add_parser("predict", help="top-k classes of images with pretrained weights")
    p.add_argument("name", help="arch.tag, or an architecture for its default weights")
    p.add_argument("images", nargs="+", help="image files")
    p.add_argument("--topk", type=_positive_int, default=5, help="classes to show per image")
    p.add_argument("--batch-size", type=_positive_int, default=PREDICT_BATCH_SIZE,
                   help=f"images per forward pass (default: {PREDICT_BATCH_SIZE})")
    p.add_argument("--device", default="cpu")
    p.add_argument("--optimize", choices=inference.PRECISIONS,
                   help="run through zoo.optimize at this precision (auto: the fastest measured here)")
    p.set_defaults(run=_predict)

    p = commands.add_parser("generate", help="continue a text prompt with a byte-level language model")
    p.add_argument("name", help="weight name, e.g. moe_lm.stdlib")
    p.add_argument("prompt", help="the text to continue, e.g. 'def fib('")
    p.add_argument("--max-new-tokens", type=_non_negative_int, default=200,
                   help="bytes to generate at most (stops at end of file); printed as they come")
    p.add_argument("--temperature", type=float, default=0.8, help="0 for greedy decoding")
    p.add_argument("--top-k", type=int, help="sample from the k most likely bytes only")
    p.add_argument("--top-p", type=float, default=0.95, help="nucleus sampling threshold")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu")
    p.set_defaults(run=_generate)

    p = commands.add_parser("finetune", help="fine-tune a model on an image folder, text,label file or tensors")
    finetune.add_arguments(p)
    p.set_defaults(run=_finetune)

    p = commands.add_parser("eval", help="re-measure a bundled weight file's card metrics")
    p.add_argument("name", help="weight name, e.g. resnet20.fmnist")
    p.add_argument("--limit", type=int, help="only the first N test samples (the card's slice, e.g. 1000)")
    p.set_defaults(run=_eval)

    p = commands.add_parser("demo", help="fine-tune a bundled model on handwritten digits against training from scratch")
    demo.add_arguments(p)
    p.set_defaults(run=_demo)

    p = commands.add_parser("bench", help="results table: params, GMACs, top-1 and measured inference speed")
    p.add_argument("patterns", nargs="*", metavar="PATTERN",
                   help="weight names or fnmatch patterns ('resnet*'), or architectures (random weights); "
                   "default: every entry whose weights are on this machine")
    p.add_argument("--batch", default="1", help="batch sizes separated by commas, e.g. 1,16 (default: 1)")
    p.add_argument("--repeats", type=int, default=10, help="timed forward passes per measurement (default: 10)")
    p.add_argument("--csv", help="also write the table as CSV (timm's column names) to this file")
    p.add_argument("--no-optimize", action="store_true", help="time fp32 eager only, not zoo.optimize's choice")
    p.set_defaults(run=_bench)

    p = commands.add_parser("export", help="export a model to ONNX, TorchScript or a torch.export program, checked")
    p.add_argument("name", metavar="NAME_OR_DIR", help="weight name (resnet20.fmnist) or a folder zoo.save wrote")
    p.add_argument("--format", required=True, metavar="|".join(exporter.FORMATS),
                   help="onnx (checked in onnxruntime), torchscript, or exported-program (a .pt2 file)")
    p.add_argument("--out", required=True, metavar="FILE", help="the file to write")
    batch = p.add_mutually_exclusive_group()
    batch.add_argument("--dynamic-batch", action="store_true",
                       help="the file takes any batch size (the default)")
    batch.add_argument("--batch", type=_positive_int, metavar="N", help="fix the batch size at N instead")
    p.add_argument("--opset", type=_positive_int, metavar="N", help="ONNX opset (default: the exporter's, 20)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing FILE")
    p.set_defaults(run=_export)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    args.command_line = shlex.join(["zoo", *argv])
    return run_command(lambda: args.run(args))
