"""The weight entries (data files in `zoo.weights`, named ``arch.tag``) and their lookups over the
architectures' one registry (`zoo.architectures._registry`, where a decorator next to each builder
registers it): `list_models`, `info`, `arch_and_weights`. Resolving what a name means (a saved
folder, a Hub repository, an entry) is `zoo.loading.resolve.resolve`'s, the one path every load takes."""

from __future__ import annotations

import dataclasses
import difflib
import fnmatch
import importlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from zoo.architectures import ARCHS, ArchSpec, model_builders, register_model, registered_specs
from zoo.architectures._registry import ModelBuilder
from zoo.errors import ConfigFileError, InvalidArgumentError, UnknownModelError, WeightsError

__all__ = [
    "ArchSpec",
    "ModelBuilder",
    "UnknownModelError",
    "WeightInfo",
    "list_models",
    "register_model",
    "arch_and_weights",
    "info",
]

# ImageNet's channel statistics: the preprocessing of published ImageNet weights and of models without weights
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

# why graph models have no GMACs figure (zoo info, zoo bench)
GRAPH_SKIP_REASON = "graph model: its compute grows with each graph's nodes, so no one figure describes it"

_weights: dict[str, WeightInfo] = {}
_loaded = False


@dataclass(frozen=True)
class WeightInfo:
    """Everything known about one set of weights: where they come from, how to check and
    convert them, how to preprocess inputs for them and what they measured."""

    name: str  # "arch.tag"
    url: str | None = None  # published source (http(s)://...)
    file: str | None = None  # file shipped in the `weights` package
    hf_hub: str | None = None  # Hugging Face Hub repository "ORG/REPO" holding `hf_file` at `revision`
    revision: str | None = None  # the Hub commit (or branch) of `hf_hub`
    hf_file: str = "model.safetensors"
    sha256_policy: str | None = None  # "recorded-at-first-download": sha256 unknown, pinned by the first download
    sha256: str | None = None  # full digest, or the publisher's hash prefix (>= 8 hex)
    converter: str = "identity"  # key converter from the source layout, see zoo.store.convert
    num_classes: int = 1000
    model_kwargs: dict[str, Any] = field(default_factory=dict)
    preprocess: dict[str, Any] = field(default_factory=dict)
    categories: str | None = None  # name of a list in weights/categories/
    input_format: str | None = None  # what the model reads besides images and tokens: "smiles/onehot-v1"
    target: dict[str, Any] | None = None  # regression: the target's name, mean and std (folded into the head)
    metrics: dict[str, dict[str, float]] = field(default_factory=dict)  # by evaluation task
    eval_task: str | None = None  # training.evaluate task that re-measures `metrics` (zoo eval)
    num_params: int | None = None
    gmacs: float | None = None  # multiply-accumulates per sample at the entry's input size, zoo.deploy.bench.count_macs
    torchvision_ops: float | None = None  # GMACs as torchvision's FLOP counter sees them, where not gmacs
    file_size: int | None = None
    recipe: str | None = None
    license: str | None = None
    card: str | None = None  # model card (markdown file in the `weights` package, or a URL)
    default: bool = False  # the weights `zoo.load(arch)` picks
    torchvision_weights: str | None = None  # torchvision's name for the same file: "ResNet50_Weights.IMAGENET1K_V2"

    @property
    def arch(self) -> str:
        return self.name.split(".", 1)[0]

    @property
    def tag(self) -> str:
        return self.name.split(".", 1)[1]

    @property
    def source(self) -> str:
        if self.hf_hub is not None and self.url is None:
            return f"hf-hub:{self.hf_hub}@{self.revision}/{self.hf_file}"
        return self.url or f"weights/{self.file}"

    def category_names(self) -> list[str] | None:
        """The class names, in output order, or None when the weights carry none."""
        return None if self.categories is None else load_categories(self.categories)

    def card_text(self) -> str | None:
        if self.card is None or "://" in self.card:
            return None
        return resources.files("zoo.weights").joinpath(self.card).read_text()

    def to_dict(self) -> dict[str, Any]:
        return {"arch": self.arch, "tag": self.tag, **dataclasses.asdict(self)}


def load_categories(name: str) -> list[str]:
    """A class-name list shipped in ``weights/categories/<name>.txt``, one name per line. The
    name comes from files (entries, saved configs): it never reaches outside that folder."""
    folder = resources.files("zoo.weights").joinpath("categories")
    shipped = {entry.name.removesuffix(".txt") for entry in folder.iterdir() if entry.name.endswith(".txt")}
    if name not in shipped:
        raise WeightsError(
            f"categories={str(name)[:80]!r} names no class list shipped with zoo "
            f"(there are: {', '.join(sorted(shipped))})"
        )
    return folder.joinpath(f"{name}.txt").read_text().splitlines()


def register_weights(info: WeightInfo) -> None:
    """Add (or replace) a weight entry; entries normally come from the `weights` package's JSON."""
    _weights[info.name] = info


def _ensure_loaded() -> None:
    """Read the weight entries, once."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    root = Path(str(resources.files("zoo.weights")))
    for path in sorted(root.rglob("*.json")):
        entries = json.loads(path.read_text())
        for entry in entries if isinstance(entries, list) else [entries]:
            info = WeightInfo(**entry)
            if info.arch not in ARCHS and info.arch not in registered_specs:
                raise ConfigFileError(f"{path}: weights {info.name!r} name an unregistered architecture")
            register_weights(info)
    defaults: dict[str, list[str]] = {}
    for info in _weights.values():
        if info.default:
            defaults.setdefault(info.arch, []).append(info.name)
    for arch, names in defaults.items():
        if len(names) > 1:
            raise ConfigFileError(
                f"{arch} has {len(names)} default weight entries ({', '.join(sorted(names))}); "
                'set "default": false in all but one'
            )


def _as_patterns(pattern: str | Iterable[str] | None) -> list[str]:
    if pattern is None:
        return []
    return [pattern] if isinstance(pattern, str) else list(pattern)


def list_models(
    pattern: str | Iterable[str] = "*",
    *,
    pretrained: bool = False,
    exclude: str | Iterable[str] | None = None,
) -> list[str]:
    """Architecture names (``resnet50``), or weight names (``resnet50.tv_in1k``) with
    ``pretrained=True``, that match any fnmatch ``pattern`` and no ``exclude`` pattern."""
    _ensure_loaded()
    names = sorted(_weights) if pretrained else _architectures()
    include, skip = _as_patterns(pattern), _as_patterns(exclude)
    return [
        n
        for n in names
        if any(fnmatch.fnmatchcase(n, p) for p in include) and not any(fnmatch.fnmatchcase(n, p) for p in skip)
    ]


def _unknown(kind: str, name: str, known: Iterable[str]) -> UnknownModelError:
    """The error for a name the registry does not know, with close names (a long name is cut)."""
    close = difflib.get_close_matches(name, list(known), n=5, cutoff=0.6) if len(name) <= 200 else []
    hint = f" Did you mean: {', '.join(close)}?" if close else ""
    shown = repr(name) if len(name) <= 100 else f"{name[:60]!r}... ({len(name):,} characters)"
    return UnknownModelError(f"unknown {kind} {shown}.{hint} See zoo.list_models() for every name.")


def _architectures() -> list[str]:
    """Every architecture name: zoo's declared ones and any registered at run time."""
    return sorted({*ARCHS, *registered_specs})


def arch_spec(arch: str) -> ArchSpec:
    """What ``arch`` reads, builds and can do, without importing its family module."""
    _ensure_loaded()
    spec = find_spec(arch)
    if spec is None:
        raise _unknown("model", arch, [*_architectures(), *_weights])
    return spec


def find_spec(arch: str) -> ArchSpec | None:
    """`arch_spec`, or None for a name zoo does not know (timm's, a plain ``nn.Module``'s class).
    zoo's own architectures are read from their declaration in ``ARCHS`` (what registering them
    records lacks their traits: int8, timm and Hugging Face twins...); a user's model from what
    `register_model` recorded, also one registered under a zoo name before zoo's module was."""
    declared, registered = ARCHS.get(arch), registered_specs.get(arch)
    if registered is not None and (declared is None or registered.module != declared.module):
        return registered
    return declared


def get_builder(arch: str) -> ModelBuilder:
    """The builder of ``arch``, importing its family module the first time."""
    spec = arch_spec(arch)
    if arch not in model_builders:
        importlib.import_module(f"zoo.architectures.{spec.module}")
    return model_builders[arch]


def input_kind(arch: str) -> str:
    """What the architecture reads: "images", "text", "graphs" or "vectors"."""
    return arch_spec(arch).inputs


def supported_heads(arch: str) -> tuple[str, ...]:
    return arch_spec(arch).heads


def weights_for(arch: str) -> list[WeightInfo]:
    """Every weight entry of an architecture, its default first."""
    arch_spec(arch)
    entries = [w for w in _weights.values() if w.arch == arch]
    return sorted(entries, key=lambda w: (not w.default, w.name))


def no_pretrained_weights(arch: str) -> UnknownModelError:
    """The error for an architecture that has no weight entry yet."""
    return UnknownModelError(f"{arch!r} has no pretrained weights yet; use zoo.load({arch!r}, pretrained=False).")


def arch_and_weights(name: str) -> tuple[str, WeightInfo | None]:
    """Split ``arch`` or ``arch.tag`` into the architecture and its weight entry
    (the default entry for a bare architecture name; None when it has none)."""
    if not isinstance(name, str):
        raise InvalidArgumentError(f"a model name is a string such as 'resnet20.fmnist', got {name!r}")
    if not _loaded:
        _ensure_loaded()
    arch, _, tag = name.partition(".")
    if arch not in ARCHS and arch not in registered_specs:
        raise _unknown("model", name, [*_architectures(), *_weights])
    if not tag:
        entries = weights_for(arch)
        return arch, entries[0] if entries else None
    if name not in _weights:
        tags = [w.name for w in weights_for(arch)]
        raise _unknown("weights", name, tags) if tags else no_pretrained_weights(arch)
    return arch, _weights[name]


def is_registered(name: str) -> bool:
    """Whether ``name`` is an architecture or a weight entry (``arch`` or ``arch.tag``)."""
    if not _loaded:
        _ensure_loaded()
    return name in ARCHS or name in registered_specs or name in _weights


def info(name: str) -> WeightInfo:
    """The weight entry of ``arch.tag``, or of an architecture's default weights: `zoo.info`."""
    arch, entry = arch_and_weights(name)
    if entry is None:
        raise no_pretrained_weights(arch)
    return entry


def find_weights(name: object) -> WeightInfo | None:
    """The weight entry named exactly ``name`` (``arch.tag``), or None: a lookup, not a resolution."""
    _ensure_loaded()
    return _weights.get(name) if isinstance(name, str) else None
