"""MkDocs hook: a line `<!-- models -->` in a page becomes the table of every weight entry of the
registry (`zoo.list_models(pretrained=True)`), one row each, like torchvision's weights tables,
so the Models page cannot fall behind the registry.

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
HEADINGS = (
    "weights",
    "architecture",
    "data set",
    "inputs",
    "top-1",
    "top-5",
    "other metrics",
    "params",
    "GMACs",
    "file (MiB)",
    "source",
    "licence",
)


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


def number(value: float) -> str:
    return f"{value:g}"


def gmacs_text(gmacs: float | None) -> str:
    """4 significant digits and at least 3 decimals (torchvision's ``_ops`` has 3), as entries record."""
    if gmacs is None:
        return "–"
    return f"{round(gmacs, max(3, 3 - math.floor(math.log10(gmacs)))):g}" if gmacs > 0 else "0"


def file_mib(info: Any) -> str:
    """The entry's recorded file size, else the bundled file's, in MiB; "–" when unknown."""
    size = info.file_size
    if size is None and info.file is not None:
        size = (ROOT / "weights" / info.file).stat().st_size
    return "–" if size is None else f"{size / 2**20:.2f}" if size < 2**20 else f"{size / 2**20:.1f}"


def source(info: Any) -> str:
    """Where the file comes from: bundled, a Hugging Face repository or a URL's host."""
    if info.file is not None and info.url is None and info.hf_hub is None:
        return "bundled"
    if info.hf_hub is not None and info.url is None:
        return f"[hf-hub: {info.hf_hub}](https://huggingface.co/{info.hf_hub})"
    return urlparse(info.url).netloc


def row(name: str, params: int, gmacs: float | None) -> list[str]:
    """The table cells of one weight entry."""
    import zoo
    from zoo.store.registry import input_kind

    info = zoo.info(name)
    task = main_task(info)
    values = dict(info.metrics.get(task, {})) if task else {}
    top1, top5 = values.pop("top1", None), values.pop("top5", None)
    label = f"[`{name}`]({info.card})" if info.card and "://" in info.card else f"`{name}`"
    return [
        label,
        f"`{info.arch}`",
        f"`{task}`" if task else "–",
        input_kind(info.arch),
        "–" if top1 is None else number(top1),
        "–" if top5 is None else number(top5),
        ", ".join(f"{k} {number(v)}" for k, v in values.items()) or "–",
        f"{params:,}",
        gmacs_text(gmacs),
        file_mib(info),
        source(info),
        info.license or "–",
    ]


def models_table(cache: Path | None = CACHE) -> str:
    """The Markdown table of every weight entry, sorted by data set then name, with its notes."""
    import zoo
    from zoo.store.registry import GRAPH_SKIP_REASON

    names = zoo.list_models(pretrained=True)
    counted = figures(names, cache)
    names.sort(key=lambda n: (main_task(zoo.info(n)) or "", n))
    lines = ["| " + " | ".join(HEADINGS) + " |", "|" + "---|" * len(HEADINGS)]
    for name in names:
        cells = row(name, *counted[name])
        lines.append("| " + " | ".join(c.replace("|", r"\|") for c in cells) + " |")
    notes = [
        "",
        "Metrics are the entry's own, `zoo.info(name).metrics[data set]` (top-1 / top-5 in percent). "
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
