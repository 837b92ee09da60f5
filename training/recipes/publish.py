"""Turn a recipe's trained model into a bundled weight entry: ``weights/<arch>.<tag>.safetensors``,
its model card ``.md``, its training-curve ``.png`` and its registry entry ``.json``.

The entry is data (`zoo.store.weight_entries.WeightInfo`): the file's full sha256, the architecture
options, preprocessing, class names, the measured metrics keyed by evaluation task (see
`zoo.training.recipes.evaluate`) and the recipe command, so `zoo.load(name)` verifies the file and
`zoo eval name` re-measures the card's numbers.
"""

from __future__ import annotations

import datetime
import hashlib
import inspect
import json
import os
import platform
import shlex
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import safetensors.torch
import torch
import torch.nn as nn

from zoo.bounds import OneLineParser, count
from zoo.deploy.bench import gmacs
from zoo.errors import InvalidArgumentError, run_command
from zoo.loading.build import load
from zoo.store.files import write_bytes_atomic
from zoo.training.loop.records.curves import plot_curves
from zoo.training.loop.train_config import MAX_WORKERS

WEIGHTS_DIR = Path(__file__).resolve().parents[2] / "weights"  # the repository's weights/ (training/recipes/publish.py)


@dataclass
class Provenance:
    """How a weight file was made: what the card records besides the metrics."""

    data: str  # the data set, its split and any subset used
    command: str  # the one command that reruns the recipe
    seed: int
    epochs: float
    wall_time_s: float
    hyperparameters: dict[str, Any] = field(default_factory=dict)
    hardware: str = field(default_factory=lambda: hardware_description())
    notes: Sequence[str] = ()


def architecture_gmacs(
    arch: str,
    model_kwargs: dict[str, Any],
    num_classes: int,
    preprocess: dict[str, Any],
    attention: bool = True,
) -> float | None:
    """GMACs per sample of ``arch`` built with ``model_kwargs``, at its weights' input size
    (``attention=False``: as torchvision's ``_ops``, `zoo.deploy.bench.count_macs`). Built on
    the meta device (shapes only, nothing computed) except models with mixture-of-experts
    routing, whose expert batches depend on the data."""
    with torch.device("meta"):
        model = load(arch, pretrained=False, num_classes=num_classes, **model_kwargs)
    if "return_aux" in inspect.signature(model.forward).parameters:  # routed: rebuild with real tensors
        model = load(arch, pretrained=False, num_classes=num_classes, **model_kwargs)
    return gmacs(model, preprocess, attention)


def _macs_fields(arch: str, model_kwargs: dict[str, Any], num_classes: int, preprocess: dict[str, Any]) -> dict:
    """An entry's ``gmacs``, and its ``torchvision_ops`` where torchvision's counter sees fewer (attention)."""
    counted = architecture_gmacs(arch, model_kwargs, num_classes, preprocess)
    seen = architecture_gmacs(arch, model_kwargs, num_classes, preprocess, attention=False)
    return {"gmacs": counted} if seen == counted else {"gmacs": counted, "torchvision_ops": seen}


def hardware_description() -> str:
    """CPU model and core count (and the GPU, when one was used) of this machine."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    threads = torch.get_num_threads()
    plural = "s" if threads != 1 else ""
    text = f"{cpu}, {os.cpu_count()} cores, torch {torch.__version__} with {threads} thread{plural}"
    if torch.cuda.is_available():
        text += f", GPU {torch.cuda.get_device_name()}"
    return text


class Stopwatch:
    """Wall time of a recipe, for its card."""

    def __init__(self) -> None:
        self.start = time.perf_counter()

    @property
    def seconds(self) -> float:
        return time.perf_counter() - self.start


def publish(
    model: nn.Module,
    name: str,
    *,
    title: str,
    task: str,
    metrics: Mapping[str, Mapping[str, float]],
    provenance: Provenance,
    history: Sequence[Mapping[str, float]] = (),
    curve_x: str = "epoch",
    model_kwargs: Mapping[str, Any] | None = None,
    preprocess: Mapping[str, Any] | None = None,
    categories: str | None = None,
    default: bool = True,
    root: str | os.PathLike = WEIGHTS_DIR,
    entry_fields: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Write the weights, card, curves and entry of ``name`` (``arch.tag``) into ``root``;
    returns the entry. ``metrics`` maps an evaluation task (``task`` and its slices, such as
    ``"fashion-mnist[:1000]"``) to what was measured on it; ``entry_fields`` are more
    `zoo.store.weight_entries.WeightInfo` fields (a molecule model's ``input_format`` and ``target``)."""
    arch, _, tag = name.partition(".")
    if not tag:
        raise InvalidArgumentError(f"weight names are arch.tag, e.g. {arch}.fmnist; got {name!r}")
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    # one metadata key: safetensors writes them in hash-map order, and equal weights must hash equal
    blob = safetensors.torch.save(tensors, metadata={"name": name})
    weights_file, card_file, curves_file = f"{name}.safetensors", f"{name}.md", f"{name}.png"
    write_bytes_atomic(root / weights_file, blob)
    sha256 = hashlib.sha256(blob).hexdigest()
    if history:
        plot_curves(list(history), root / curves_file, x=curve_x)
    entry = {
        "name": name,
        "file": weights_file,
        "sha256": sha256,
        "num_classes": int(getattr(model, "num_classes", 0)),
        "model_kwargs": dict(model_kwargs or {}),
        "preprocess": dict(preprocess or {}),
        "categories": categories,
        "metrics": {k: {m: float(f"{v:.6g}") for m, v in task_metrics.items()} for k, task_metrics in metrics.items()},
        "eval_task": task,
        "num_params": sum(p.numel() for p in model.parameters()),
        **_macs_fields(arch, dict(model_kwargs or {}), int(getattr(model, "num_classes", 0)), dict(preprocess or {})),
        "file_size": len(blob),
        "recipe": provenance.command,
        "license": "Apache-2.0",
        "card": card_file,
        "default": default,
        **(entry_fields or {}),
    }
    date = datetime.date.today().isoformat()
    card = _card(title, entry, provenance, date, curves_file if history else None)
    write_bytes_atomic(root / card_file, card.encode())
    write_bytes_atomic(root / f"{name}.json", (json.dumps([entry], indent=2) + "\n").encode())
    return entry


def _card(title: str, entry: Mapping[str, Any], provenance: Provenance, date: str, curves: str | None) -> str:
    """The model card: data, recipe command, hyperparameters, measured metrics, file, date."""
    minutes = provenance.wall_time_s / 60
    lines = [
        f"# {entry['name']}: {title}",
        "",
        f"- date: {date}",
        f"- architecture: `{entry['name'].split('.')[0]}` with `{json.dumps(entry['model_kwargs'])}`, "
        f"{entry['num_params']:,} parameters, {entry['num_classes']} output{'s' if entry['num_classes'] != 1 else ''}",
        f"- file: `{entry['file']}`, {entry['file_size']:,} bytes, sha256 `{entry['sha256']}`",
        f"- license: {entry['license']}",
        "",
        "## Data",
        "",
        f"- {provenance.data}",
        f"- preprocessing: `{json.dumps(entry['preprocess'])}`" if entry["preprocess"] else "- preprocessing: none",
        "",
        "## Recipe",
        "",
        f"- command: `{provenance.command}`",
        f"- seed {provenance.seed}, {provenance.epochs:g} epochs, wall time {minutes:.1f} min",
        f"- hardware: {provenance.hardware}",
        *(f"- {key}: {value}" for key, value in provenance.hyperparameters.items()),
        *(f"- {note}" for note in provenance.notes),
        "",
        f"## Metrics (measured on the held-out test split; `zoo eval {entry['name']}` re-measures them)",
        "",
        "| evaluation | metric | value |",
        "| --- | --- | --- |",
        *(
            f"| {task} | {metric} | {value:g} |"
            for task, values in entry["metrics"].items()
            for metric, value in values.items()
        ),
        "",
    ]
    if curves:
        lines += ["## Training curves", "", f"![training curves]({curves})", ""]
    return "\n".join(lines)


def recipe_main(
    module: str,
    doc: str,
    choices: Sequence[str],
    run: Callable[..., dict[str, Any]],
    argv: Sequence[str] | None = None,
    *,
    budget: str = "epochs",
    limit: bool = True,
    resumable: bool = False,
    workers: bool = False,
) -> int:
    """The command line every recipe shares: ``python -m MODULE TARGET [--epochs N] [--limit N]
    [--out DIR]`` (``--steps`` instead of ``--epochs`` when ``budget="steps"``); calls
    ``run(TARGET, epochs= or steps=, out=, command=[, limit=][, run_dir=])`` with the command
    that reruns it, and prints the test metrics of the entry (or entries) it published.
    ``resumable`` recipes take ``--run-dir DIR``: checkpoints go there, and a rerun with the
    same arguments continues from the last one (a long run may span several sessions).
    ``workers`` recipes take ``--num-workers N``: data-loading processes (a GPU needs several
    to be kept busy; each worker draws its own augmentations, so it is part of the command)."""
    summary = " ".join(doc.split("\n\n")[0].split())  # the docstring's first paragraph
    parser = OneLineParser(prog=f"python -m {module}", description=summary)
    parser.add_argument("target", choices=sorted(choices), help="the weights to train")
    parser.add_argument(f"--{budget}", type=count().parse, help=f"fewer {budget} than the recipe's (smoke tests)")
    if limit:
        parser.add_argument("--limit", type=count().parse, help="train on this many samples only (smoke tests)")
    parser.add_argument("--out", default=str(WEIGHTS_DIR), help="where the weights, card and entry go")
    if resumable:
        parser.add_argument(
            "--run-dir", help="keep checkpoints here and resume from them (default: a temporary directory)"
        )
    if workers:
        parser.add_argument(
            "--num-workers", type=count(0, MAX_WORKERS).parse, default=0, help="data-loading processes (default: none)"
        )
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    options = {"limit": args.limit} if limit else {}
    options[budget] = getattr(args, budget)
    if resumable:
        options["run_dir"] = args.run_dir
    if workers:
        options["num_workers"] = args.num_workers
    command = shlex.join(["python", "-m", module, *_without_run_dir(argv)])

    def train_and_publish() -> int:
        published = run(args.target, out=args.out, command=command, **options)
        for entry in published if isinstance(published, list) else [published]:
            print(f"{entry['name']}: test {entry['metrics']}")
        return 0

    return run_command(train_and_publish, prog=parser.prog)


def _without_run_dir(argv: Sequence[str]) -> list[str]:
    """``argv`` less ``--run-dir DIR``: where checkpoints were kept is not part of the recipe."""
    kept: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--run-dir":
            skip = True
        elif not arg.startswith("--run-dir="):
            kept.append(arg)
    return kept
