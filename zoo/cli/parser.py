"""The ``zoo`` command line's parser and `main`.

Light on purpose: ``zoo --help`` answers without importing torch. `COMMANDS` lists every
command once (help, options, handler); only the chosen command's options are built (some come
from modules that import torch), and its handler imports its module (`zoo.cli.commands`,
`zoo.cli.catalog` for ``list``/``info``, `zoo.cli.serving` for ``serve``, `zoo.cli.bench_command`,
`zoo.cli.export_command`, `zoo.cli.shards_command`) only to run it.
"""

from __future__ import annotations

import argparse
import importlib
import shlex
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from zoo.bounds import (
    SEED,
    TEMPERATURE,
    TOP_K,
    TOP_P,
    WORKERS,
    OneLineParser,
    add_renamed,
    count,
    cpu_level,
    show_defaults,
)
from zoo.errors import run_command

PREDICT_BATCH_SIZE = 64


# The numeric options' bounds, declared once here (those of finetune, demo and serve live with the
# fields they set): each option's ``type=`` is its `Bounds.parse`, so a value out of range stops the
# command when it is parsed, before anything loads or runs.
BATCH_SIZE = count(1, 65_536)  # images per forward pass, samples of an exported file's fixed batch
MAX_NEW_TOKENS = count(0, 1_000_000)
EVAL_LIMIT = count(1, 100_000_000)  # test samples
REPEATS = count(1, 100_000)  # timed forward passes per measurement
OPSET = count(1, 100)  # ONNX opsets are numbered from 1 (20 today)
PORT = count(0, 65_535)  # 0: any free port
# --device in every command that runs a model (finetune's and tune's from TrainConfig.device, demo's
# passed on to finetune: the same words); left out, `zoo.devices.resolve_device` chooses
DEVICE_HELP = "where the model runs: cpu, cuda or cuda:N (default: cuda if available, else cpu)"


def _list_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("pattern", nargs="?", default="*", help="fnmatch pattern, e.g. 'resnet*'")
    p.add_argument("--pretrained", action="store_true", help="list weight names (arch.tag)")


def _info_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", help="arch.tag, or an architecture for its default weights")
    p.add_argument("--json", action="store_true", help="print the entry as JSON")


def _predict_arguments(p: argparse.ArgumentParser) -> None:
    from zoo.deploy.optimize_report import PRECISIONS  # light: the optimizer itself loads only with --optimize

    p.add_argument("name", help="arch.tag, a run folder, or an architecture for its default weights")
    p.add_argument("images", nargs="*", metavar="INPUT", help="image files; SMILES strings for a molecule model")
    p.add_argument(
        "--input",
        metavar="FILE",
        help="read the inputs from a file instead: a .csv/.jsonl with a smiles, text or file_name column (an id "
        "column is kept), a .txt of one SMILES, text or image path a line, or a folder of images",
    )
    p.add_argument("--format", choices=("csv", "jsonl"), help="with --input: the format of the file --out writes (or "
                   "of the rows on stdout): csv or jsonl (default: --out's suffix, else jsonl)")  # fmt: skip
    p.add_argument("--out", metavar="FILE", help="with --input: write the rows to FILE instead of stdout")
    add_renamed(
        p,
        "--topk",
        p.add_argument("--top-k", type=TOP_K.parse, default=5, help="the k most likely classes, shown per input"),
    )
    p.add_argument(
        "--batch-size",
        type=BATCH_SIZE.parse,
        default=PREDICT_BATCH_SIZE,
        help=f"inputs per forward pass (default: {PREDICT_BATCH_SIZE})",
    )
    p.add_argument("--num-workers", type=WORKERS.parse, default=0, help="processes decoding image files (default: 0)")
    p.add_argument("--device", help=DEVICE_HELP)
    p.add_argument("--no-progress", action="store_true", help="no progress bar (for logs and redirected output)")
    p.add_argument(
        "--optimize",
        choices=PRECISIONS,
        help="run through zoo.optimize at this precision (auto: the fastest measured here)",
    )


def _generate_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", help="weight name, e.g. moe_lm.stdlib")
    p.add_argument("prompt", help="the text to continue, e.g. 'def fib('")
    p.add_argument(
        "--max-new-tokens",
        type=MAX_NEW_TOKENS.parse,
        default=200,
        help="bytes to generate at most (stops at end of file); printed as they come",
    )
    p.add_argument("--temperature", type=TEMPERATURE.parse, default=0.8, help="0 for greedy decoding")
    p.add_argument("--top-k", type=TOP_K.parse, help="the k most likely bytes, the only ones sampled (default: all)")
    p.add_argument("--top-p", type=TOP_P.parse, default=0.95, help="nucleus sampling threshold")
    p.add_argument("--seed", type=SEED.parse, default=0, help="the sampling's seed: the same seed, the same text")
    p.add_argument("--device", help=DEVICE_HELP)


def _finetune_arguments(p: argparse.ArgumentParser) -> None:
    from zoo.training import finetune

    finetune.add_arguments(p)


def _tune_arguments(p: argparse.ArgumentParser) -> None:
    from zoo.training.tuning import tune

    tune.add_arguments(p)


def _shards_arguments(p: argparse.ArgumentParser) -> None:
    from zoo.training.data.shards import shard_writer

    shard_writer.add_arguments(p)


def _eval_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", help="weight name (resnet20.fmnist), or with --data a run folder zoo finetune wrote")
    p.add_argument("--limit", type=EVAL_LIMIT.parse, help="only the first N test samples (the card's slice, e.g. 1000)")
    p.add_argument(
        "--data",
        metavar="FILE",
        help="score on this labelled data instead of the card's test set: anything zoo finetune --data takes "
        "(image folder or list, text rows, tensors, shards, molecules)",
    )
    p.add_argument("--out", metavar="FILE", help="with --data: also write the metrics to FILE (JSON)")
    p.add_argument("--images", metavar="DIR", help="with --data LIST: the folder the list's paths are under")
    p.add_argument(
        "--label-field", help="with --data: the label's column when there are several (default: the target's name)"
    )
    p.add_argument(
        "--smiles-field",
        default="smiles",
        metavar="NAME",
        help="with --data molecules: the SMILES column (default smiles)",
    )
    p.add_argument(
        "--label-delimiter", default=" ", metavar="TEXT", help="multi-label: what separates a CSV field's tags"
    )
    p.add_argument(
        "--skip-bad-rows", action="store_true", help="with --data: skip (and count) molecules RDKit cannot read"
    )
    p.add_argument(
        "--batch-size",
        type=BATCH_SIZE.parse,
        default=PREDICT_BATCH_SIZE,
        help=f"with --data: samples per forward pass (default: {PREDICT_BATCH_SIZE})",
    )
    p.add_argument(
        "--device", help=DEVICE_HELP + "; with --data (the card's evaluation runs on the cpu, whatever the default)"
    )
    p.add_argument("--no-progress", action="store_true", help="with --data: no progress bar (for logs)")
    p.add_argument(
        "--num-workers", type=WORKERS.parse, default=0, help="with --data: data-loading processes (default: 0)"
    )


def _demo_arguments(p: argparse.ArgumentParser) -> None:
    from zoo.training import demo

    demo.add_arguments(p)


def _bench_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "patterns",
        nargs="*",
        metavar="PATTERN",
        help="weight names or fnmatch patterns ('resnet*'), or architectures (random weights); "
        "default: every entry whose weights are on this machine",
    )
    batch_size = p.add_argument(
        "--batch-size",
        type=BATCH_SIZE.parse_list,
        default=[1],
        help="batch sizes separated by commas, e.g. 1,16 (default: 1)",
    )
    add_renamed(p, "--batch", batch_size)
    p.add_argument(
        "--repeats", type=REPEATS.parse, default=10, help="timed forward passes per measurement (default: 10)"
    )
    out = p.add_argument("--out", metavar="FILE", help="also write the table as CSV (timm's column names) to this file")
    add_renamed(p, "--csv", out)
    p.add_argument("--device", help=DEVICE_HELP + "; the models are timed there")
    p.add_argument(
        "--seed",
        type=SEED.parse,
        default=0,
        help="seeds what is random: the weights of an architecture without weights, the example inputs",
    )
    p.add_argument("--no-optimize", action="store_true", help="time fp32 eager only, not zoo.optimize's choice")
    p.add_argument(
        "--peers",
        action="store_true",
        help="also print every candidate zoo.optimize measured, ONNX Runtime and OpenVINO (fp32, int8) "
        "among them where installed: ms, speed-up over fp32 eager, top-1 agreement",
    )


def _export_arguments(p: argparse.ArgumentParser) -> None:
    from zoo.deploy.exporter import FORMAT_SUFFIXES, FORMATS

    suffixes = ", ".join(f"{suffix}: {name}" for name, suffix in FORMAT_SUFFIXES.items())
    p.add_argument("name", metavar="NAME_OR_DIR", help="weight name (resnet20.fmnist) or a folder zoo.save wrote")
    p.add_argument(
        "--format",
        metavar="|".join(FORMATS),
        help="the format of the file --out writes: onnx (checked in onnxruntime), torchscript or exported-program "
        f"(default: --out's suffix, {suffixes})",
    )
    p.add_argument("--out", required=True, metavar="FILE", help="the file to write")
    batch = p.add_mutually_exclusive_group()
    batch.add_argument("--dynamic-batch", action="store_true", help="the file takes any batch size (the default)")
    add_renamed(
        batch,
        "--batch",
        batch.add_argument("--batch-size", type=BATCH_SIZE.parse, metavar="N", help="fix the batch size at N instead"),
    )
    p.add_argument("--opset", type=OPSET.parse, metavar="N", help="ONNX opset (default: the exporter's, 20)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing FILE")
    p.add_argument(
        "--device",
        help=DEVICE_HELP + "; torchscript and exported-program files are traced there, an onnx file is exported "
        "and checked on the cpu, whatever the default",
    )


def _serve_arguments(p: argparse.ArgumentParser) -> None:
    from zoo.deploy.optimize_report import PRECISIONS  # the one list, as zoo predict's
    from zoo.serve.serve_options import MAX_BODY_MB, REPLICAS, flag_type  # the bounds ServeConfig checks

    p.add_argument(
        "models",
        nargs="+",
        metavar="NAME_OR_DIR",
        help="weight names (resnet20.fmnist, moe_lm.stdlib) or folders zoo.save / zoo finetune wrote",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1, this machine only)")
    p.add_argument("--port", type=PORT.parse, default=8000, help="port to listen on (default: 8000)")
    p.add_argument(
        "--optimize",
        choices=PRECISIONS,
        help="run classifiers through zoo.optimize at this precision (compiles at start; default: eager)",
    )
    p.add_argument(
        "--max-batch",
        type=flag_type("max_batch"),
        default=32,
        help="rows per forward at most (default: 32; 1 serves one request at a time)",
    )
    p.add_argument(
        "--max-wait-ms",
        type=flag_type("max_wait_ms"),
        default=5.0,
        help="how long a request waits for others to share its forward (default: 5)",
    )
    p.add_argument("--device", help=DEVICE_HELP)
    p.add_argument(
        "--api-key",
        help="require 'Authorization: Bearer KEY' on every route but health (default: $ZOO_API_KEY, else none)",
    )
    p.add_argument(
        "--max-body-mb", type=MAX_BODY_MB.parse, default=8.0, help="largest request body in MiB (default: 8)"
    )
    p.add_argument(
        "--threads", type=flag_type("threads"), help="torch threads for the forwards (default: one per core)"
    )
    p.add_argument("--ray", action="store_true", help="run as Ray Serve replicas on a local Ray cluster (ray[serve])")
    p.add_argument("--replicas", type=REPLICAS.parse, default=1, help="with --ray: copies of the server (default: 1)")


def _torchrun_arguments(p: argparse.ArgumentParser) -> None:
    from zoo.cli.torchrun_command import arguments  # imports no torch

    arguments(p)


@dataclass(frozen=True)
class Handler:
    """A command's handler, ``module.function``, imported only when the command runs: `zoo list`
    and `zoo info` stay off torch and the model families (`zoo.cli.catalog`), `zoo --help`
    imports none of them."""

    module: str
    function: str

    def __call__(self, args: argparse.Namespace) -> int:
        cpu_level()  # a ZOO_CPU_FEATURES level zoo does not know stops here, before any work
        return getattr(importlib.import_module(self.module), self.function)(args)


@dataclass(frozen=True)
class Command:
    """One ``zoo`` command: its help line, what adds its options, and the handler that runs it
    (its exit code)."""

    help: str
    arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]  # a Handler


# The table of the command line: every command once; the parser and `main` read nothing else.
COMMANDS: dict[str, Command] = {
    "list": Command(
        "list architectures, or weights with --pretrained", _list_arguments, Handler("zoo.cli.catalog", "run_list")
    ),
    "info": Command("metadata of a weight entry", _info_arguments, Handler("zoo.cli.catalog", "run_info")),
    "predict": Command(
        "predict with pretrained or fine-tuned weights: top-k classes, labels or values of images, texts or "
        "molecules from SMILES, as arguments or from a file (--input)",
        _predict_arguments,
        Handler("zoo.cli.commands", "run_predict"),
    ),
    "generate": Command(
        "continue a text prompt with a byte-level language model",
        _generate_arguments,
        Handler("zoo.cli.commands", "run_generate"),
    ),
    "finetune": Command(
        "fine-tune a model on image folders, text rows (.csv/.jsonl), image lists (metadata.csv), tensors "
        "(.pt/.npz), WebDataset shards or molecules (SMILES, SDF): classes, multi-label or regression",
        _finetune_arguments,
        Handler("zoo.cli.commands", "run_finetune"),
    ),
    "tune": Command(
        "search zoo finetune's settings with Optuna (zoo[tune]): trials pruned early, resumable, the best saved",
        _tune_arguments,
        Handler("zoo.cli.commands", "run_tune"),
    ),
    "shards": Command(
        "write WebDataset tar shards (and their manifest) from an image folder, text rows or tensors",
        _shards_arguments,
        Handler("zoo.cli.shards_command", "run_shards"),
    ),
    "eval": Command(
        "re-measure a weight entry's card metrics on its test set, or score any model on a labelled file (--data)",
        _eval_arguments,
        Handler("zoo.cli.commands", "run_eval"),
    ),
    "demo": Command(
        "fine-tune a bundled model on handwritten digits against training from scratch",
        _demo_arguments,
        Handler("zoo.cli.commands", "run_demo"),
    ),
    "bench": Command(
        "results table: params, GMACs, top-1 and measured inference speed on this machine (CPU or --device)",
        _bench_arguments,
        Handler("zoo.cli.bench_command", "run_bench"),
    ),
    "export": Command(
        "export a model to ONNX, TorchScript or a torch.export program, checked",
        _export_arguments,
        Handler("zoo.cli.export_command", "run_export"),
    ),
    "serve": Command(
        "serve models over HTTP: Open Inference Protocol v2, OpenAI completions, a page",
        _serve_arguments,
        Handler("zoo.cli.serving", "run_serve"),
    ),
    "torchrun": Command(
        "torchrun with its own options (zoo finetune on many nodes): a lost rendezvous or a dead worker ends in one line",
        _torchrun_arguments,
        Handler("zoo.cli.torchrun_command", "run_torchrun"),
    ),
}

# The commands whose handler resolves --device itself, its default included: finetune and tune (under
# torchrun each process takes its own GPU), export (an ONNX file is exported on the CPU) and eval (a
# card's evaluation runs on the CPU). `main` resolves the others' before their handler runs.
OWN_DEVICE_DEFAULT = frozenset({"finetune", "tune", "export", "eval"})


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser; with ``argv``, only the command it names (if any) gets its options, so that
    ``zoo --help`` imports nothing heavy; without, every command gets them."""
    parser = OneLineParser(
        prog="zoo",
        description="zoo: list models, show weight metadata, predict (images, SMILES), generate text, fine-tune, "
        "search fine-tuning settings, write shards, evaluate, demo, benchmark, export, serve. The same thing has the "
        "same flag in every command (--top-k, --batch-size, --device, --out).",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    chosen = None if argv is None else next((a for a in argv if not a.startswith("-")), "")
    for name, command in COMMANDS.items():
        p = commands.add_parser(name, help=command.help)
        if chosen in (None, name):
            command.arguments(p)
            show_defaults(p)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` and run its command; parsing (which imports the command's modules) runs
    inside `run_command` too, so Ctrl-C at any point is one line and exit 130."""
    argv = list(sys.argv[1:] if argv is None else argv)

    def run() -> int:
        args = build_parser(argv).parse_args(argv)  # a refused option: SystemExit(2), said in one line
        args.command_line = shlex.join(["zoo", *argv])
        if hasattr(args, "device") and args.command not in OWN_DEVICE_DEFAULT:
            from zoo.devices import resolve_device  # torch: only once a command that runs a model is chosen

            args.device = str(resolve_device(args.device))  # checked, or the one default; before any work
        return COMMANDS[args.command].run(args)

    return run_command(run)


__all__ = [
    "COMMANDS",
    "Command",
    "build_parser",
    "main",
]
