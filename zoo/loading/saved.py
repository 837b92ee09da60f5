"""Folders written by `zoo.save` (``config.json`` + ``model.safetensors`` + a model card):
writing them, telling them from registry names, reading their config back."""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Any

import safetensors.torch
import torch.nn as nn

from zoo.architectures.features import FeatureExtractor
from zoo.errors import InvalidArgumentError, WeightsMismatchError, WeightsNotFoundError, ZooError
from zoo.loading.pretrained_cfg import adapt_preprocess
from zoo.loading.schema import validate_saved_config
from zoo.loading.state_dicts import CONFIG_FILE, build_architecture, build_with_state_dict
from zoo.store import weight_entries
from zoo.store.files import atomic_files, read_json, sha256_file
from zoo.store.model_config import ModelConfig, set_config
from zoo.store.state_dict_files import load_state_dict_file

WEIGHTS_FILE = "model.safetensors"
RUN_FILES = "run_files.json"  # a fine-tuning run's manifest: each file it wrote, with its sha256
MAX_RUN_FILES_BYTES = 64 << 20


CARD_FILE = "README.md"
MAX_CONFIG_BYTES = 1 << 20  # a saved config is a few KB; class names of 100,000 classes fit


def save(model: nn.Module, directory: str | os.PathLike, overwrite: bool = False) -> Path:
    """Write ``config.json`` + ``model.safetensors`` + a README.md model card so that
    ``zoo.load(directory)`` restores the model exactly. The folder is a Hugging Face Hub
    repository as it stands: ``huggingface_hub.upload_folder`` publishes it, the Hub renders the
    card's metadata, ``zoo.load("hf-hub:ORG/REPO")`` loads it back, and for timm's architectures
    config.json also carries timm's keys. Files appear whole or not at all. As `zoo.export`
    does, an existing README.md, config.json or model.safetensors is refused unless ``overwrite``."""
    cfg = getattr(model, "pretrained_cfg", None)
    if not cfg or "architecture" not in cfg:
        raise InvalidArgumentError("zoo.save needs a model made by zoo.load (it records the architecture to rebuild)")
    directory = Path(directory)
    _check_folder(directory)
    existing = [name for name in (CONFIG_FILE, WEIGHTS_FILE, CARD_FILE) if os.path.lexists(directory / name)]
    if existing and not overwrite:
        raise InvalidArgumentError(
            f"{directory} already holds {', '.join(existing)}; pass overwrite=True to replace "
            "them, or save to a new folder"
        )
    from zoo.interop import hf_hub  # timm's keys and the Hub's card: huggingface_hub only when saving

    config = {**cfg, "num_classes": model.num_classes, "format": "zoo/1"}
    config |= hf_hub.timm_config(config, getattr(model, "num_features", 0))
    entry = weight_entries.find_weights(cfg.get("weights"))
    card = hf_hub.model_card(config, entry)
    with atomic_files(directory, last=(CONFIG_FILE,)) as staging:  # config last: it marks a complete save
        safetensors.torch.save_model(model, staging / WEIGHTS_FILE)
        (staging / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n")
        (staging / CARD_FILE).write_text(card)
    return directory


def _check_folder(directory: Path) -> None:
    """Refuse a ``directory`` that is a file, or inside one, before anything is written."""
    folder = directory
    while not folder.is_dir():
        if os.path.lexists(folder):
            what = "is a file" if folder == directory else f"is inside {folder}, a file"
            raise InvalidArgumentError(
                f"zoo.save writes a folder, and {directory} {what}: pass a new or existing folder"
            )
        if folder == folder.parent:
            return
        folder = folder.parent


def saved_folder(name_or_path: str | os.PathLike) -> Path | None:
    """The folder `save` wrote that ``name_or_path`` means, or None for a registry name. A
    string is a path when it is written as one (``./name``, ``a/b``, ``~/x``, absolute), or
    when no architecture or weight entry has that name; a registered name that is also a
    folder here means the weight_entries, with a warning saying how to name the folder."""
    path = Path(name_or_path).expanduser()
    written_as_path = (
        not isinstance(name_or_path, str)
        or os.sep in name_or_path
        or "/" in name_or_path
        or name_or_path.startswith(("~", "."))
    )
    is_folder = (path / CONFIG_FILE).is_file()
    if written_as_path:
        if path.is_dir() and not is_folder:
            raise WeightsNotFoundError(f"{path} has no {CONFIG_FILE}: it is not a folder written by zoo.save")
        if not path.exists():
            raise WeightsNotFoundError(f"{path} does not exist (a folder written by zoo.save was expected)")
        return path
    if not weight_entries.is_registered(name_or_path):
        return path if is_folder else None
    if is_folder:
        warnings.warn(
            f"{name_or_path!r} names registered weights and also a folder here; using the registered "
            f"weights. Write ./{name_or_path} for the folder.",
            stacklevel=3,
        )
    return None


def _gin_size_hint(config: dict[str, Any], state_dict: dict[str, Any], directory: Path) -> str:
    """For a GIN folder whose config.json does not state its size: the size its weights hold, and
    where to write it (a run saved before gin3's default became 3 layers of 96, on 2026-11-28, was
    4 of 128 and recorded no size)."""
    options = config["model_kwargs"]
    first = state_dict.get("convs.0.nn.lins.0.weight")
    if not config["architecture"].startswith("gin") or first is None or "num_layers" in options:
        return ""
    layers = len({key.split(".")[1] for key in state_dict if key.startswith("convs.")})
    return (
        f"; its weights hold {layers} layers of {first.shape[0]} channels, and {directory / CONFIG_FILE} states no "
        f'size (a run saved before gin3\'s default became 3 layers of 96): add "num_layers": {layers}, '
        f'"hidden_channels": {first.shape[0]} to its model_kwargs'
    )


def load_saved(
    directory: Path, pretrained: bool, head: str | None, weights: str | os.PathLike | None, model_kwargs: dict[str, Any]
) -> nn.Module:
    """The model `save` wrote to ``directory``; ``model_kwargs`` override its options (``in_chans``
    adapts the first convolution as for registered weights), ``pretrained=False`` keeps the
    architecture only. ``weights`` and another ``head`` do not apply and are refused by name."""
    config = read_saved_config(directory)
    if weights is not None:
        raise InvalidArgumentError(
            f"weights={str(weights)!r} does not apply to the saved folder {directory}: its weights are "
            f"{directory / WEIGHTS_FILE}. To put other weights into this architecture, use "
            f"zoo.load({config['architecture']!r}, weights=...)."
        )
    if head is not None and head != config["head"]:
        raise InvalidArgumentError(
            f"head={head!r} does not apply to the saved folder {directory}, whose model has head {config['head']!r}"
        )
    arch = config["architecture"]
    kwargs = {**config["model_kwargs"], **model_kwargs, "num_classes": config["num_classes"]}
    if len(weight_entries.supported_heads(arch)) > 1:
        kwargs["head"] = config["head"]
    builder = weight_entries.get_builder(arch)
    try:
        if not pretrained:
            model = build_architecture(builder, kwargs, arch)
        else:
            state_dict = load_state_dict_file(directory / WEIGHTS_FILE)
            _warn_if_not_the_runs(directory)
            if config.get("features_only"):
                state_dict = {k.removeprefix("model."): v for k, v in state_dict.items()}
            model = build_with_state_dict(builder, kwargs, state_dict, None)
    except WeightsMismatchError as error:
        size = _gin_size_hint(config, state_dict, directory) if pretrained else ""
        raise WeightsMismatchError(f"{error}\n  (in {directory / WEIGHTS_FILE}){size}") from None
    except InvalidArgumentError as error:  # an option of the file's (or one given over it) the builder refuses
        given = f", or the model_kwargs given over it ({sorted(model_kwargs)})" if model_kwargs else ""
        raise InvalidArgumentError(f"{directory / CONFIG_FILE}, field model_kwargs{given}: {error}") from None
    if config.get("features_only"):
        model = FeatureExtractor(model, config["out_indices"])
    saved = ModelConfig.from_dict(config)
    if "in_chans" in model_kwargs:
        saved = saved.replace(preprocess=adapt_preprocess(saved.preprocess, model_kwargs["in_chans"]))
    if model_kwargs:
        saved = saved.replace(model_kwargs={k: v for k, v in kwargs.items() if k not in ("num_classes", "head")})
    set_config(model, saved)
    return model


def _warn_if_not_the_runs(directory: Path) -> None:
    """Warn when a run folder's weights are not the file the run wrote (their sha256 differs from
    the one its ``run_files.json`` records): weights of the same shape swapped in load silently
    otherwise. A folder without that record (`zoo.save`'s) is not checked."""
    record = directory / RUN_FILES
    if not record.is_file() or record.is_symlink():
        return
    try:
        files = read_json(record, MAX_RUN_FILES_BYTES).get("files") or {}
    except (ZooError, AttributeError):
        return  # a manifest zoo cannot read says nothing of the weights; the run's commands refuse it
    recorded = files.get(WEIGHTS_FILE) if isinstance(files, dict) else None
    if isinstance(recorded, str) and recorded != sha256_file(directory / WEIGHTS_FILE):
        warnings.warn(
            f"{directory / WEIGHTS_FILE} is not the file the run wrote (its sha256 differs from the one "
            f"{record} records); loading it as it is",
            stacklevel=4,
        )


def read_saved_config(directory: Path) -> dict[str, Any]:
    """The ``config.json`` of a folder `save` wrote, checked against its schema
    (`zoo.loading.schema`): an error names the file and the field."""
    path = directory / CONFIG_FILE
    config = read_json(path, MAX_CONFIG_BYTES, fix="save the model again with zoo.save")
    return validate_saved_config(config, path)
