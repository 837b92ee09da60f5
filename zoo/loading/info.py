"""``zoo.info``: what is known of a name before anything loads. A registered name's weight entry
is read without torch (light enough for ``zoo list`` and ``zoo info``); any other name `zoo.load`
takes is resolved once (`zoo.loading.resolve.resolve`) and described by `source_info`: a saved or
fine-tuned folder's ``config.json`` (`zoo.loading.resolve.folder_info`), a Hub repository's
``config.json`` (fetched alone, no weights), the entry torchvision's name of the weights means."""

from __future__ import annotations

import dataclasses
import os
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING

from zoo.errors import InvalidArgumentError, WeightsError
from zoo.store import weight_entries
from zoo.store.weight_entries import WeightInfo

if TYPE_CHECKING:
    from zoo.interop.hub_names import HubRepo
    from zoo.loading.resolve import Source


def info(name: str | os.PathLike | Enum) -> WeightInfo:
    """``zoo.info``: the weight entry of a registered name (`weight_entries.info`); for a saved or
    fine-tuned folder what its ``config.json`` records, as a `WeightInfo` named ``ARCH.FOLDER``
    (its file, classes count, options, preprocessing, target and card); for ``hf-hub:ORG/REPO``
    what the repository's ``config.json`` records, named ``ARCH.hf-hub:ORG/REPO``; for
    torchvision's name of weights (``ResNet50_Weights.IMAGENET1K_V2``, or the member) their entry.
    A registered name that is also a folder here means the registry, as in `zoo.load`."""
    if not isinstance(name, str | os.PathLike | Enum):
        raise InvalidArgumentError(
            f"a model is named by a string such as 'resnet20.fmnist' or a folder's path, got {name!r:.60}"
        )
    if isinstance(name, str) and weight_entries.is_registered(name) and not Path(name).is_dir():
        return weight_entries.info(name)  # the common case, without torch
    from zoo.loading.resolve import resolve  # torch: only for the other kinds of name

    return source_info(resolve(name))


def source_info(source: Source) -> WeightInfo:
    """What a resolved name records, as a `WeightInfo` (see `info`); nothing is loaded."""
    from zoo.loading.resolve import HubRepository, Registered, SavedFolder, folder_info

    if isinstance(source, Registered) and source.weights is None:
        if source.entry is None:
            raise weight_entries.no_pretrained_weights(source.arch)
        return source.entry
    if isinstance(source, SavedFolder):
        return folder_info(source.path)
    if isinstance(source, HubRepository):
        return hub_info(source.repo)
    raise InvalidArgumentError(  # internal: a name alone resolves to none of the others
        f"weights given as weights= ({source}) record no entry: load the model and read its pretrained_cfg"
    )


def hub_info(repo: HubRepo) -> WeightInfo:
    """A Hub repository's ``config.json`` (fetched alone, from the commit it names; no weights), as
    `zoo.load` reads it: a folder `zoo.save` wrote as `folder_info` describes it, or a timm model
    (its architecture, classes, options and preprocessing)."""
    from zoo.interop import hf_hub
    from zoo.loading.pretrained_cfg import adapt_preprocess
    from zoo.loading.resolve import folder_info
    from zoo.loading.saved import CONFIG_FILE, MAX_CONFIG_BYTES
    from zoo.store.files import read_json

    path = hf_hub.download_file(repo, CONFIG_FILE)
    pinned = hf_hub.HubRepo(repo.repo_id, hf_hub.commit_of(path))
    config = read_json(path, MAX_CONFIG_BYTES, name=f"{CONFIG_FILE} of {pinned}", fix="it is not a model zoo can load")
    source = {"hf_hub": repo.repo_id, "revision": pinned.revision, "file": None}
    if isinstance(config, dict) and str(config.get("format", "")).startswith("zoo/"):
        saved = folder_info(path.parent)
        return dataclasses.replace(saved, name=f"{saved.arch}.hf-hub:{repo.repo_id}", **source)
    if not isinstance(config, dict) or not hf_hub.is_timm_config(config):
        raise WeightsError(
            f"hf-hub:{pinned} is neither a timm model (config.json with architecture and pretrained_cfg) nor a "
            "folder written by zoo.save"
        )
    spec = hf_hub.timm_model(config, f"hf-hub:{repo.repo_id}")
    return WeightInfo(
        name=f"{spec.arch}.hf-hub:{repo.repo_id}",
        num_classes=spec.num_classes,
        model_kwargs=dict(spec.model_kwargs),
        preprocess=adapt_preprocess(spec.preprocess, spec.model_kwargs.get("in_chans")),
        **source,
    )
