"""One resolution: what a name or path (and ``weights=``) means, decided once, as a typed source.

`resolve` tells apart a Hugging Face Hub repository (``hf-hub:ORG/REPO``), a folder written by
`zoo.save`, a Hugging Face checkpoint given as ``weights=`` (a folder with ``config.json``, or
a Hub repository for the MoE architectures), and the registry (an architecture or ``arch.tag``,
with torchvision's names for weights and a file or URL as ``weights=``). `zoo.load` and the
commands take the source it returns, so nothing resolves the same name twice.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from zoo.errors import InvalidArgumentError
from zoo.interop import hub_names, torchvision_weights
from zoo.loading.saved import CARD_FILE, CONFIG_FILE, WEIGHTS_FILE, read_saved_config, saved_folder
from zoo.store import weight_entries
from zoo.store.weight_entries import WeightInfo

MAX_NAME_CHARS = 4096  # Linux's PATH_MAX: a longer name is no model's and no path


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


def resolve(name_or_path: str | os.PathLike | Source, weights: str | os.PathLike | Enum | None = None) -> Source:
    """The source that ``name_or_path`` (with ``weights=``) means; a source passes through."""
    if isinstance(name_or_path, Registered | SavedFolder | HubRepository | HFCheckpoint):
        return name_or_path
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
