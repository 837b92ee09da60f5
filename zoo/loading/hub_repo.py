"""Models in a Hugging Face Hub repository (``hf-hub:ORG/REPO[@REVISION]``): a folder `zoo.save`
wrote, or a timm model."""

from __future__ import annotations

import os
from typing import Any

import torch.nn as nn

from zoo.errors import InvalidArgumentError, WeightsError, WeightsMismatchError
from zoo.interop import hf_hub
from zoo.loading.pretrained_cfg import adapt_preprocess
from zoo.loading.saved import CONFIG_FILE, MAX_CONFIG_BYTES, WEIGHTS_FILE, load_saved
from zoo.loading.state_dicts import build_architecture, build_with_state_dict
from zoo.store import weight_entries
from zoo.store.files import read_json
from zoo.store.model_config import ModelConfig, set_config
from zoo.store.state_dict_files import load_state_dict_file


def load_hub(
    repo: hf_hub.HubRepo,
    pretrained: bool,
    num_classes: int | None,
    head: str | None,
    weights: str | os.PathLike | None,
    model_kwargs: dict[str, Any],
) -> nn.Module:
    """The model of a Hub repository (``hf-hub:ORG/REPO[@REVISION]``): a folder `save` wrote
    (loaded as that folder), or a timm one (timm's ``architecture``, ``num_classes``,
    ``pretrained_cfg``, ``label_names``). Every file comes from the commit the config came from;
    ``pretrained=False`` fetches the config only."""
    name = f"hf-hub:{repo}"
    if weights is not None:
        raise InvalidArgumentError(
            f"weights={str(weights)!r} does not apply to {name}: the repository holds its weights"
        )
    config_path = hf_hub.download_file(repo, CONFIG_FILE)
    pinned = hf_hub.HubRepo(repo.repo_id, hf_hub.commit_of(config_path))
    config = read_json(
        config_path, MAX_CONFIG_BYTES, name=f"{CONFIG_FILE} of {pinned}", fix="it is not a model zoo can load"
    )
    if isinstance(config, dict) and str(config.get("format", "")).startswith("zoo/"):
        if pretrained:
            hf_hub.download_file(pinned, WEIGHTS_FILE)  # next to the config, in the commit's snapshot folder
        return load_saved(config_path.parent, pretrained, head, None, model_kwargs)
    if not isinstance(config, dict) or not hf_hub.is_timm_config(config):
        raise WeightsError(
            f"{name} is neither a timm model (config.json with architecture and pretrained_cfg) nor a folder "
            f"written by zoo.save; for a Mixtral-format checkpoint use zoo.load('moe_lm', weights={repo.repo_id!r})"
        )
    spec = hf_hub.timm_model(config, name)
    if head not in (None, "classification"):
        raise InvalidArgumentError(
            f"head={head!r} does not apply to {name}, an image classifier (head 'classification')"
        )
    kwargs = {**spec.model_kwargs, **model_kwargs, "num_classes": spec.num_classes}
    builder = weight_entries.get_builder(spec.arch)
    if not pretrained:
        model = build_architecture(builder, kwargs, spec.arch)
    else:
        path = hf_hub.download_weights(pinned)
        try:
            model = build_with_state_dict(builder, kwargs, load_state_dict_file(path), None)
        except WeightsMismatchError as error:
            raise WeightsMismatchError(f"{error}\n  (in {path.name} of {pinned})") from None
    keeps_head = num_classes in (None, spec.num_classes)
    config = ModelConfig(
        spec.arch,
        "classification",
        {k: v for k, v in kwargs.items() if k != "num_classes"},
        weights=f"hf-hub:{pinned}" if pretrained else None,
        num_classes=model.num_classes,
        preprocess=adapt_preprocess(spec.preprocess, getattr(model, "in_chans", None)),
        class_names=spec.class_names if spec.class_names and keeps_head else None,
    )
    return set_config(model, config)
