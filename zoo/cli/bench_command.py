"""``zoo bench``: the weight entries and architectures a user names (and any other name `zoo.load`
takes: a saved or run folder, ``hf-hub:ORG/REPO``, torchvision's name of weights), resolved once,
loaded and measured through `zoo.deploy.bench` (which takes built models, so it sits below
`zoo.loading`); the table printed, and with ``--out`` written as CSV at the end, never over the
weights it loads."""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn as nn
from tqdm import tqdm

from zoo.deploy import bench
from zoo.deploy.bench import BenchRow, BenchTarget, gmacs, measure
from zoo.deploy.optimize_report import OptimizeReport
from zoo.devices import checked_device
from zoo.errors import InvalidArgumentError, UnknownModelError, WeightsNotFoundError
from zoo.loading.build import load
from zoo.loading.info import source_info
from zoo.loading.resolve import Registered, resolve
from zoo.store import weight_entries
from zoo.store.download import weight_folders
from zoo.store.files import check_output
from zoo.store.weight_entries import GRAPH_SKIP_REASON


def run_bench(args: argparse.Namespace) -> int:
    """``zoo bench``: measure the targets, print the table (and every candidate with ``--peers``),
    and write it to ``--out`` (checked before minutes of measuring: writable, not the weights)."""
    if args.out:
        check_output(args.out, folders=weight_folders())
    if args.peers and args.no_optimize:
        raise InvalidArgumentError("--peers shows the candidates zoo.optimize measures: leave out --no-optimize")
    reports: list = []
    targets = select_targets(args.patterns)
    rows, skipped = measure_targets(
        targets, args.batch_size, args.repeats, optimize=not args.no_optimize, reports=reports, device=args.device,
        seed=args.seed,
    )  # fmt: skip
    print("\n".join(bench.machine_header(args.device)))
    print(bench.format_table(rows))
    if args.peers:
        print(f"\nevery candidate zoo.optimize measured\n{bench.format_peers(reports)}")
    for name, reason in skipped:
        print(f"skipped {name}: {reason}")
    if args.out:
        bench.write_csv(rows, args.out)
        print(f"wrote {args.out}")
    return 0


def select_targets(patterns: Sequence[str]) -> list[BenchTarget]:
    """`bench.select`'s weight entries and architectures (fnmatch patterns, registered names; every
    entry without patterns), then each other name `zoo.load` takes, resolved once: a saved or run
    folder or ``hf-hub:ORG/REPO`` measured with its own weights (`source_info` says what it
    records), torchvision's name of weights as the entry it means."""
    registry: list[str] = []
    others: list[BenchTarget] = []
    for pattern in patterns:
        if any(c in pattern for c in "*?[") or weight_entries.is_registered(pattern):
            registry.append(pattern)
            continue
        try:
            source = resolve(pattern)
        except UnknownModelError:
            registry.append(pattern)  # bench.select says it matches nothing, and what does
            continue
        name = source.name if isinstance(source, Registered) else pattern  # the entry a torchvision name means
        others.append(BenchTarget(name, source_info(source)))
    return (bench.select(registry) if registry or not patterns else []) + others


def measure_targets(
    targets: Sequence[BenchTarget],
    batch_sizes: Sequence[int],
    repeats: int,
    optimize: bool = False,
    reports: list[tuple[str, int, OptimizeReport]] | None = None,
    device: str = "cpu",
    seed: int = 0,
) -> tuple[list[BenchRow], list[tuple[str, str]]]:
    """Measure every target at every batch size in fp32 eager and, with ``optimize``, as
    `zoo.optimize` chooses (precision "auto", which compiles and times its candidates
    on this machine, ONNX Runtime and OpenVINO among them where installed); returns the rows and
    the (name, reason) of the targets skipped: graph models, and published weights not in the
    cache. With ``optimize``, ``reports`` (a list) receives each row's (model, batch size,
    `OptimizeReport`): every candidate's time, speed-up and agreement (`format_peers`). The
    models run on ``device`` (checked before the first one loads). ``seed`` seeds torch before each
    target loads: its random weights (an architecture without weights) and example inputs are
    the same in every run, whatever else is measured beside it."""
    if repeats < 1:
        raise InvalidArgumentError(f"--repeats must be 1 or more, got {repeats}")
    device = str(checked_device(device))
    rows: list[BenchRow] = []
    skipped: list[tuple[str, str]] = []
    progress = tqdm(total=len(targets) * len(batch_sizes), desc="zoo bench", unit="run", leave=False)
    for target in targets:
        torch.manual_seed(seed)
        loaded = _load_or_skip(target, skipped, device)
        if loaded is None:
            progress.update(len(batch_sizes))
            continue
        model, preprocess = loaded
        counted = target.info.gmacs if target.info is not None else None  # a folder's is counted here
        model_gmacs = counted if counted is not None else gmacs(model, preprocess)
        for batch_size in batch_sizes:
            progress.set_postfix_str(f"{target.name} batch {batch_size}")
            row, report = measure(target, model, preprocess, model_gmacs, batch_size, repeats, optimize)
            row.weights = _own_weights(target) or row.weights
            rows.append(row)
            if report is not None and reports is not None:
                reports.append((target.name, batch_size, report))
            progress.update(1)
    progress.close()
    return rows, skipped


def _load_or_skip(
    target: BenchTarget, skipped: list[tuple[str, str]], device: str
) -> tuple[nn.Module, dict[str, Any]] | None:
    """The target's model and preprocessing; None, with the reason added to ``skipped``, for a
    graph model or published weights not in the cache."""
    if weight_entries.input_kind(target.info.arch if target.info is not None else target.name) == "graphs":
        skipped.append((target.name, GRAPH_SKIP_REASON))
        return None
    try:
        return _load(target, device)
    except WeightsNotFoundError:
        skipped.append(
            (
                target.name,
                f"published weights not in the cache; `zoo info {target.name}` shows "
                "the source, zoo.load downloads them once",
            )
        )
        return None


@contextmanager
def _offline() -> Iterator[None]:
    """ZOO_OFFLINE=1 for the block: bench measures what is on this machine and downloads nothing."""
    before = os.environ.get("ZOO_OFFLINE")
    os.environ["ZOO_OFFLINE"] = "1"
    try:
        yield
    finally:
        if before is None:
            del os.environ["ZOO_OFFLINE"]
        else:
            os.environ["ZOO_OFFLINE"] = before


def _load(target: BenchTarget, device: str) -> tuple[nn.Module, dict[str, Any]]:
    """The model (eval mode, fp32, on ``device``) and the preprocessing its inputs follow."""
    if target.info is not None:
        with _offline():
            return load(target.name, device=device), target.info.preprocess
    source = resolve(target.name)  # an architecture: random weights, as its default entry builds it
    default = source.entry
    model = load(source, pretrained=False, device=device, **(default.model_kwargs if default else {}))
    return model, default.preprocess if default else {}


def _own_weights(target: BenchTarget) -> str | None:
    """The weights column of a target with weights of its own, not a weight entry's: "hub" for a
    Hub repository, "folder" for a saved or run folder; None for the registry's."""
    info = target.info
    if info is None or weight_entries.find_weights(info.name) is info:
        return None
    return "hub" if info.hf_hub is not None else "folder"
