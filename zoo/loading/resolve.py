"""One resolution: what a name or path (and ``weights=``) means, decided once, as a typed source.

`resolve` tells apart a Hugging Face Hub repository (``hf-hub:ORG/REPO``), a folder written by
`zoo.save`, a Hugging Face checkpoint given as ``weights=`` (a folder with ``config.json``, or
a Hub repository for the MoE architectures), and the registry (an architecture or ``arch.tag``,
or torchvision's name of the weights, ``ResNet50_Weights.IMAGENET1K_V2`` or the enum member; with
torchvision's names for weights and a file or URL as ``weights=``). `zoo.load` and the
commands take the source it returns, so nothing resolves the same name twice.
"""

from __future__ import annotations

import errno
import os
import re
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from zoo.errors import InvalidArgumentError, UnknownModelError
from zoo.interop import hub_names, torchvision_weights
from zoo.loading.saved import CARD_FILE, CONFIG_FILE, WEIGHTS_FILE, read_saved_config, saved_folder
from zoo.store import weight_entries
from zoo.store.weight_entries import WeightInfo

MAX_NAME_CHARS = 4096  # Linux's PATH_MAX: a longer name is no model's and no path
TORCHVISION_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*_Weights\.[A-Z][A-Z0-9_]*")  # ResNet50_Weights.IMAGENET1K_V2


@dataclass(frozen=True)
class Registered:
    """An architecture of the registry and its weight entry (the default one for a bare name;
    None when it has none). ``weights`` is a file or URL that replaces the entry's source;
    ``named_by_weights`` marks an entry chosen by torchvision's name for it (it loads)."""

    name: str
    arch: str
    entry: WeightInfo | None
    weights: str | None = None
    named_by_weights: bool = False


@dataclass(frozen=True)
class SavedFolder:
    """A folder written by `zoo.save` (or `zoo finetune`)."""

    path: Path


@dataclass(frozen=True)
class HubRepository:
    """A Hub repository holding a saved folder or a timm model: ``hf-hub:ORG/REPO[@REVISION]``."""

    repo: hub_names.HubRepo


@dataclass(frozen=True)
class HFCheckpoint:
    """A Hugging Face (Mixtral-format) MoE checkpoint for ``arch``: a local folder, or a Hub repository."""

    arch: str
    folder: Path | None = None
    repo: hub_names.HubRepo | None = None


Source = Registered | SavedFolder | HubRepository | HFCheckpoint


def resolve(name_or_path: str | os.PathLike | Enum | Source, weights: str | os.PathLike | Enum | None = None) -> Source:
    """The source that ``name_or_path`` (with ``weights=``) means; a source passes through."""
    if isinstance(name_or_path, Registered | SavedFolder | HubRepository | HFCheckpoint):
        return name_or_path
    if isinstance(name_or_path, Enum):  # a weights enum's member, torchvision's or zoo's: its entry
        return _named_weights(name_or_path, weights)
    if not isinstance(name_or_path, str | os.PathLike):
        raise InvalidArgumentError(
            f"a model is named by a string such as 'resnet20.fmnist' or a folder's path, got {name_or_path!r}"
        )
    if isinstance(name_or_path, str) and name_or_path.startswith(hub_names.HUB_PREFIX):
        return HubRepository(hub_names.parse_hub_name(name_or_path))
    if len(os.fspath(name_or_path)) > MAX_NAME_CHARS:
        raise InvalidArgumentError(_too_long(os.fspath(name_or_path)))
    if not isinstance(name_or_path, str) or _is_dir(name_or_path) or not weight_entries.is_registered(name_or_path):
        try:
            saved = saved_folder(name_or_path)  # a folder, or the error that names what is wrong with it
        except OSError as error:
            if error.errno != errno.ENAMETOOLONG:
                raise
            raise InvalidArgumentError(_too_long(os.fspath(name_or_path))) from None
        if saved is not None:
            return SavedFolder(saved)
    name = str(name_or_path)
    if TORCHVISION_NAME.fullmatch(name) and not weight_entries.is_registered(name):
        return _named_weights(name, weights)
    arch, entry = weight_entries.arch_and_weights(name)
    if weights is None:
        return Registered(name, arch, entry)
    named = torchvision_weights.weights_entry(name, arch, weights)
    if named is not None:
        return Registered(named.name, arch, named, named_by_weights=True)
    if (Path(weights) / CONFIG_FILE).is_file():
        return HFCheckpoint(arch, folder=Path(weights))
    if hub_names.is_repo_reference(weights) and weight_entries.arch_spec(arch).hf_checkpoints:
        return HFCheckpoint(arch, repo=hub_names.parse_repo(weights, f"weights={weights!r}"))
    return Registered(name, arch, entry, weights=str(weights))


def _named_weights(name: str | Enum, weights: str | os.PathLike | Enum | None) -> Registered:
    """The entry that torchvision's name of weights (``ResNet50_Weights.IMAGENET1K_V2``, as
    torchvision's ``get_weight`` takes it, or the enum member) means as a model's name: that of
    the architecture whose weights enum has that class name (`zoo.get_model_weights`)."""
    shown = name if isinstance(name, str) else f"{type(name).__name__}.{name.name}"
    if weights is not None:
        raise InvalidArgumentError(
            f"{shown} names its weights: leave out weights={weights!r}, or name the architecture "
            f"(zoo.load('resnet50', weights=...))"
        )
    class_name = shown.partition(".")[0]
    arch = next((a for a in weight_entries.list_models() if torchvision_weights.enum_name(a) == class_name), None)
    if arch is None or not class_name.endswith("_Weights"):
        raise UnknownModelError(
            f"{shown}: no architecture of zoo's has weights called {class_name}; name weights as "
            "'arch.tag' (zoo list --pretrained) or torchvision's 'ResNet50_Weights.IMAGENET1K_V2'"
        )
    entry = torchvision_weights.weights_entry(arch, arch, name)
    assert entry is not None  # internal: a name of the enum's form is one of its members or refused
    return Registered(entry.name, arch, entry)


def _is_dir(path: str | os.PathLike) -> bool:
    try:
        return os.path.isdir(path)
    except (OSError, ValueError):
        return False


def _too_long(text: str | bytes) -> str:
    """The one line for a name too long to be a model name or a path this system opens."""
    shown = repr(text[:40]) + ("..." if len(text) > 40 else "")
    return (
        f"{shown} ({len(text):,} characters) is neither a model name nor a path this system can open (at most "
        f"{MAX_NAME_CHARS:,} characters, 255 a folder name); name a model such as 'resnet20.fmnist' or a saved folder"
    )


def folder_info(path: Path) -> WeightInfo:
    """What a saved or fine-tuned folder's ``config.json`` records, as a `WeightInfo` named
    ``ARCH.FOLDER`` (its file, classes count, options, preprocessing, target and card): `zoo.info`'s
    answer for a folder."""
    config = read_saved_config(path)
    card = path / CARD_FILE
    return WeightInfo(
        name=f"{config['architecture']}.{path.name}",
        file=str(path / WEIGHTS_FILE),
        num_classes=config["num_classes"],
        model_kwargs=dict(config.get("model_kwargs") or {}),
        preprocess=dict(config.get("preprocess") or {}),
        input_format=config.get("input_format"),
        target=config.get("target"),
        card=str(card) if card.is_file() else None,
    )


def architecture(arch: str) -> Registered:
    """The source of ``arch`` itself (its default entry for preprocessing), for a model built
    without weights from a name already resolved (a saved folder's architecture)."""
    entries = weight_entries.weights_for(arch)
    return Registered(arch, arch, entries[0] if entries else None)
