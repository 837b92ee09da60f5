"""MkDocs hook: a line `<!-- models -->` in a page becomes the catalogue of every weight entry of
the registry (`zoo.list_models(pretrained=True)`), one row each, like torchvision's weights
tables, so the Models page cannot fall behind the registry: a section per data set (`SECTIONS`),
its rows grouped by family, then architecture and name (numbers as numbers: a stable order); the metric columns
that section's entries have, each with one precision (`METRICS`); names that never wrap.

Parameters and GMACs are counted here, not copied from the entries: each architecture is built
without weights (on the meta device; on the CPU where mixture-of-experts routing needs values),
parameters are the sum of ``numel()``, multiply-accumulates are PyTorch's ``FlopCounterMode``
FLOPs / 2 on one sample of the entry's input size (`zoo.deploy.exporter.example_input_for`:
images at the preprocessing crop, text for `TEXT_TOKENS` tokens); graph models have none.
The figures are cached in ``build/.cache/models_table.json`` under a fingerprint of torch's
version, this file and every source file of zoo and its architectures: an unchanged rebuild
counts nothing again.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from zoo.deploy.bench import TEXT_TOKENS  # text models are counted for one sequence this long

MARKER = re.compile(r"^<!--\s*models\s*-->[ \t]*$", re.MULTILINE)
ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / "build" / ".cache" / "models_table.json"
SOURCES = ("zoo", "architectures", "training")  # the code the figures depend on (builders, counting, inputs)
HEADINGS = ("family", "weights")  # then "data set" where a section holds several, its metrics, then FIGURES
FIGURES = ("params", "GMACs", "file (MiB)", "source", "licence")
# The metrics a table may show, in column order: heading and format (one precision per column).
METRICS = {
    "top1": ("top-1 (%)", ".2f"),
    "top5": ("top-5 (%)", ".2f"),
    "loss": ("loss", ".4f"),
    "mae": ("MAE", ".3f"),
    "rmse": ("RMSE", ".3f"),
    "r2": ("R²", ".3f"),
    "nmse": ("NMSE", ".1e"),
    "bits_per_byte": ("bits per byte", ".3f"),
}
# Each data set's section (title, order); keys not named here get a section of their own, after these.
SECTIONS = {
    "imagenet-1k": ("ImageNet-1K", 0),
    "fashion-mnist": ("Fashion-MNIST", 1),
    "fashion-mnist-pixels": ("Fashion-MNIST", 1),
    "fashion-mnist-graphs": ("Fashion-MNIST", 1),
    "digits-nudged": ("Digits (scikit-learn, nudged)", 2),
    "chembl2321810": ("Molecules", 3),
    "freesolv": ("Molecules", 3),
    "nci-tpsa": ("Molecules", 3),
    "solubility": ("Molecules", 3),
    "triangles-er": ("Triangle counting", 4),
    "stdlib-bytes": ("Python's standard library (bytes)", 5),
}
FAMILIES = {  # an architecture's module -> its family's name
    "resnet": "ResNet",
    "densenet": "DenseNet",
    "mobilenet": "MobileNet",
    "moe.moe_transformer": "MoE transformer",
    "dbn": "Deep belief net",
    "graph": "GIN (graph)",
}


def fingerprint() -> str:
    """What the cached figures were computed from: torch's version, this hook and zoo's sources."""
    import torch

    digest = hashlib.sha256(torch.__version__.encode())
    paths = [Path(__file__).resolve(), *(p for folder in SOURCES for p in sorted((ROOT / folder).rglob("*.py")))]
    for path in paths:
        digest.update(path.relative_to(ROOT).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def entry_key(info: Any) -> str:
    """What an entry's figures depend on: its architecture, build arguments and input size."""
    parts = [info.arch, info.model_kwargs, info.num_classes, info.preprocess]
    return json.dumps(parts, sort_keys=True, default=str)


def count(info: Any) -> tuple[int, float | None]:
    """(parameters, GMACs per sample or None for a graph model) of the entry's architecture,
    built without weights on the meta device, GMACs counted as the recipes record them
    (`zoo.training.recipes.publish.architecture_gmacs`, through `zoo.deploy.bench.count_macs`)."""
    import torch

    import zoo
    from zoo.training.recipes.publish import architecture_gmacs

    with torch.device("meta"):
        model = zoo.load(info.arch, pretrained=False, num_classes=info.num_classes, **info.model_kwargs)
    params = sum(p.numel() for p in model.parameters())
    return params, architecture_gmacs(info.arch, info.model_kwargs, info.num_classes, info.preprocess)


def figures(names: list[str], cache: Path | None = CACHE) -> dict[str, tuple[int, float | None]]:
    """(parameters, GMACs) of each weight entry, from ``cache`` where it holds them for this code."""
    import zoo

    stamp = fingerprint()
    known: dict[str, list[Any]] = {}
    if cache is not None and cache.is_file():
        saved = json.loads(cache.read_text())
        known = saved.get("figures", {}) if saved.get("fingerprint") == stamp else {}
    result, fresh = {}, False
    for name in names:
        key = entry_key(zoo.info(name))
        if key not in known:
            known[key], fresh = list(count(zoo.info(name))), True
        result[name] = (int(known[key][0]), known[key][1])
    if cache is not None and fresh:
        cache.parent.mkdir(parents=True, exist_ok=True)
        partial = cache.with_name(f"{cache.name}.{os.getpid()}.tmp")
        partial.write_text(json.dumps({"fingerprint": stamp, "figures": known}, indent=1, sort_keys=True))
        partial.replace(cache)  # atomic: a build and a test may write it at once
    return result


def main_task(info: Any) -> str | None:
    """The entry's headline metrics key: its eval task, else its first key that is not a slice."""
    if info.eval_task in info.metrics:
        return info.eval_task
    return next((key for key in info.metrics if "[" not in key), None)


def nowrap(name: str) -> str:
    """A name that never breaks across lines in the table (``resnet50.tv_in1k`` stays whole)."""
    return f'<code style="white-space: nowrap">{name}</code>'


def gmacs_text(gmacs: float | None) -> str:
    """4 significant digits and at least 3 decimals (torchvision's ``_ops`` has 3), as entries
    record, written out (0.00008448, not 8.448e-05)."""
    if gmacs is None:
        return "–"
    return f"{gmacs:.{max(3, 3 - math.floor(math.log10(gmacs)))}f}" if gmacs > 0 else "0"


def file_mib(info: Any) -> str:
    """The entry's recorded file size, else the bundled file's, in MiB; "–" when unknown."""
    size = info.file_size
    if size is None and info.file is not None:
        size = (ROOT / "weights" / info.file).stat().st_size
    return "–" if size is None else f"{size / 2**20:.2f}"


def source(info: Any) -> str:
    """Where the file comes from: bundled, a Hugging Face repository or a URL's host."""
    if info.file is not None and info.url is None and info.hf_hub is None:
        return "bundled"
    if info.hf_hub is not None and info.url is None:
        return f"[Hugging Face](https://huggingface.co/{info.hf_hub})"
    return urlparse(info.url).netloc


def family(arch: str) -> str:
    from zoo.store.weight_entries import arch_spec

    module = arch_spec(arch).module
    return FAMILIES.get(module, module)


def section(task: str | None) -> tuple[int, str]:
    """(order, title) of the section a data set's entries are listed in."""
    title, order = SECTIONS.get(task or "", (task or "other", len(SECTIONS)))
    return order, title


def row(name: str, params: int, gmacs: float | None, metrics: dict[str, str], data_set: bool) -> list[str]:
    """The table cells of one weight entry: its values of ``metrics`` (key: format) in their
    columns, its data set's key when ``data_set`` (a section of several)."""
    import zoo

    info = zoo.info(name)
    task = main_task(info)
    values = dict(info.metrics.get(task, {})) if task else {}
    label = f"[{nowrap(name)}]({info.card})" if info.card and "://" in info.card else nowrap(name)
    shown = ["–" if values.get(m) is None else format(values[m], spec) for m, spec in metrics.items()]
    return [
        family(info.arch),
        label,
        *([nowrap(task) if task else "–"] if data_set else []),
        *shown,
        f"{params:,}",
        gmacs_text(gmacs),
        file_mib(info),
        source(info),
        f'<span style="white-space: nowrap">{info.license}</span>' if info.license else "–",
    ]


def natural(name: str) -> list[Any]:
    """A sort key that puts resnet18 before resnet101 (numbers compared as numbers)."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def column_format(metric: str, values: list[float]) -> str:
    """The one format of a metric's column: its own (`METRICS`), or 3 significant digits in
    exponent form for the whole column when that would show one of its values as zero."""
    spec = METRICS[metric][1]
    if any(v != 0 and float(format(v, spec)) == 0 for v in values):
        return ".2e"
    return spec


def table(names: list[str], counted: dict[str, tuple[int, float | None]]) -> list[str]:
    """One section's Markdown table: the metric columns its entries have, rows by family, architecture, name."""
    import zoo

    values = [zoo.info(name).metrics.get(main_task(zoo.info(name)) or "", {}) for name in names]
    metrics = {
        m: column_format(m, [v[m] for v in values if v.get(m) is not None])
        for m in METRICS
        if any(m in v for v in values)
    }
    several = len({main_task(zoo.info(name)) for name in names}) > 1
    headings = [*HEADINGS, *(["data set"] if several else []), *(METRICS[m][0] for m in metrics), *FIGURES]
    lines = ["| " + " | ".join(headings) + " |", "|" + "---|" * len(headings)]
    ordered = sorted(names, key=lambda n: (family(zoo.info(n).arch), natural(zoo.info(n).arch), natural(n)))
    for name in ordered:
        cells = row(name, *counted[name], metrics, several)
        lines.append("| " + " | ".join(c.replace("|", r"\|") for c in cells) + " |")
    return lines


def models_table(cache: Path | None = CACHE) -> str:
    """Every weight entry in Markdown tables, one section per data set (in `SECTIONS`' order),
    its rows grouped by family, with the notes."""
    import zoo
    from zoo.store.weight_entries import GRAPH_SKIP_REASON

    names = zoo.list_models(pretrained=True)
    counted = figures(names, cache)
    sections: dict[tuple[int, str], list[str]] = {}
    for name in names:
        sections.setdefault(section(main_task(zoo.info(name))), []).append(name)
    lines: list[str] = []
    for order, title in sorted(sections):
        members = sections[order, title]
        lines += [f"## {title}", "", *table(members, counted), ""]
    notes = [
        "## About the figures",
        "",
        "Metrics are the entry's own, `zoo.info(name).metrics[data set]`: top-1 / top-5 in percent to 2 "
        "decimals, one precision per column. "
        "Parameters and GMACs are counted when this page is built, on the architecture built without weights. "
        "GMACs: multiply-accumulates of one sample (PyTorch's `FlopCounterMode` FLOPs / 2, torchvision's and "
        "timm's convention: matrix products, convolutions and attention) at the entry's input size: images at "
        f"their preprocessing crop, text for one sequence of {TEXT_TOKENS} tokens, the deep belief net for one "
        f'input vector; graph models have none ("–"): {GRAPH_SKIP_REASON}. '
        'File sizes in MiB (2^20 bytes), "–" where the entry records none.',
    ]
    return "\n".join(lines + notes)


def on_page_markdown(markdown: str, **kwargs: object) -> str:
    if not MARKER.search(markdown):
        return markdown
    return MARKER.sub(lambda _: models_table(), markdown)
