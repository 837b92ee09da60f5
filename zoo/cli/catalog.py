"""``zoo list`` and ``zoo info``: read the registry only (no model family, no torch)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import zoo
from zoo.store import weight_entries


def run_list(args: argparse.Namespace) -> int:
    names = zoo.list_models(args.pattern, pretrained=args.pretrained)
    for name in names:
        print(name)
    if not names:
        kind = "weights" if args.pretrained else "architecture"
        print(
            f"zoo: no {kind} matches {args.pattern!r}; `zoo list{'' if args.pretrained else ' --pretrained'}` "
            "shows every name",
            file=sys.stderr,
        )
    return 0


def format_size(num_bytes: int | None) -> str:
    return "unknown" if num_bytes is None else f"{num_bytes / 2**20:.1f} MiB"


def run_info(args: argparse.Namespace) -> int:
    if not weight_entries.is_registered(args.name) and (Path(args.name).expanduser() / "config.json").is_file():
        return _saved_info(Path(args.name).expanduser(), args.json)
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
        ("GMACs", info.gmacs if info.gmacs is not None else _uncounted(info.arch)),
        ("file size", format_size(info.file_size)),
        ("outputs (regression)", info.num_classes) if info.target else ("classes", info.num_classes),
        ("preprocess", json.dumps(info.preprocess)),
        ("recipe", info.recipe or "-"),
        ("license", info.license or "-"),
        ("card", info.card or "-"),
    ]
    for dataset, values in info.metrics.items():
        rows.append((f"metrics [{dataset}]", ", ".join(f"{k}={v}" for k, v in values.items())))
    _print_rows(rows)
    return 0


def _print_rows(rows: list[tuple[str, object]]) -> None:
    width = max(len(key) for key, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  {value}")


def _saved_info(folder: Path, as_json: bool) -> int:
    """``zoo info DIR`` for a folder `zoo.save` or `zoo finetune` wrote: its checked config."""
    from zoo.loading.saved import WEIGHTS_FILE, read_saved_config  # loads torch: only for a folder

    config = read_saved_config(folder)
    if as_json:
        print(json.dumps(config, indent=2))
        return 0
    weights = folder / WEIGHTS_FILE
    rows = [
        ("folder", str(folder)),
        ("architecture", config["architecture"]),
        ("head", config["head"]),
        ("classes", config["num_classes"]),
        ("class names", ", ".join(config.get("class_names") or []) or config.get("categories") or "-"),
        ("weights from", config.get("finetuned_from") or config.get("weights") or "-"),
        ("options", json.dumps(config["model_kwargs"])),
        ("preprocess", json.dumps(config.get("preprocess") or {})),
        ("file size", format_size(weights.stat().st_size if weights.is_file() else None)),
    ]
    _print_rows(rows)
    return 0


def _uncounted(arch: str) -> str:
    """Why an entry has no GMACs figure."""
    if weight_entries.input_kind(arch) != "graphs":
        return "unknown"
    return f"not counted ({weight_entries.GRAPH_SKIP_REASON})"
