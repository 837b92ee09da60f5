"""timm's `create_model` for zoo's models, and timm's names for those zoo spells differently."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch.nn as nn

from zoo.architectures import ARCHS
from zoo.errors import InvalidArgumentError, WeightsMismatchError
from zoo.loading.build import features_only_model, load
from zoo.loading.resolve import Registered, Source, resolve
from zoo.loading.state_dicts import mismatch_message
from zoo.store import weight_entries
from zoo.store.convert import convert_state_dict
from zoo.store.model_config import update_config
from zoo.store.state_dict_files import load_state_dict_file

# timm's names of architectures that zoo registers under another name, with the options that
# make them (same parameters and feature levels), from the specs' ``timm_names``; other widths
# of timm's MobileNetV3 round channels differently and have no zoo counterpart.
TIMM_NAMES: dict[str, tuple[str, dict[str, Any]]] = {
    timm_name: (arch, options) for arch, spec in ARCHS.items() for timm_name, options in spec.timm_names.items()
}


def create_model(
    model_name: str,
    pretrained: bool = False,
    pretrained_cfg_overlay: dict[str, Any] | None = None,
    checkpoint_path: str | os.PathLike | None = None,
    num_classes: int | None = None,
    in_chans: int | None = None,
    features_only: bool = False,
    out_indices: int | Sequence[int] | None = None,
    **kwargs: Any,
) -> nn.Module:
    """``timm.create_model``'s call for zoo's models, for code written against timm: timm's
    names (`TIMM_NAMES` maps those zoo spells differently), no weights unless ``pretrained``
    (then zoo's default weights of the architecture, or those of ``arch.tag``), ``num_classes``
    (0: no classifier), ``in_chans``, ``features_only`` with ``out_indices`` (an int n: the
    last n levels) and ``feature_cls`` ("getter", "hook" or "fx"; also as timm's
    ``feature_cfg=dict(feature_cls=..., out_indices=...)``), other options (``global_pool``,
    ``drop_rate``...) to the architecture; ``num_classes=0, global_pool=""`` gives the unpooled
    maps, as timm's.
    ``model_name`` may also be any name `zoo.load` takes (a saved folder, ``hf-hub:ORG/REPO``).
    ``checkpoint_path`` loads a local state dict, safetensors file or timm/torchvision
    checkpoint (pickles only with ``weights_only=True``) after the head is set, strictly, as
    timm does; ``pretrained_cfg_overlay`` updates ``pretrained_cfg``. The model is returned in
    training mode, as timm returns it."""
    source, options = _resolved(model_name)
    options = {**options, **kwargs}
    feature_cls, out_indices = _feature_options(options, features_only, out_indices)
    if in_chans is not None:
        options["in_chans"] = in_chans
    # Without a classifier any pooling goes, "" included: set after loading (the weights' head may need one)
    spec = ARCHS.get(source.arch) if isinstance(source, Registered) else None  # a folder's: its builder takes it
    pool = options.pop("global_pool", None) if num_classes == 0 and spec and spec.inputs == "images" else None
    model = load(source, pretrained=pretrained, num_classes=num_classes or None, **options)
    if num_classes == 0:
        _remove_classifier(model, pool)
    if checkpoint_path is not None:
        _load_checkpoint(model, Path(checkpoint_path).expanduser(), model.pretrained_cfg["architecture"])
    if pretrained_cfg_overlay:
        model.pretrained_cfg = {**model.pretrained_cfg, **pretrained_cfg_overlay}
    if features_only:
        model = features_only_model(model, out_indices, feature_cls)
    return model.train()


def _resolved(model_name: str) -> tuple[Source, dict[str, Any]]:
    """timm's name of a model zoo spells differently (`TIMM_NAMES`: zoo's architecture and the
    options that make it), or any name `zoo.load` takes, resolved once."""
    arch, dot, tag = model_name.partition(".") if isinstance(model_name, str) else ("", "", "")
    if arch in TIMM_NAMES:
        arch, options = TIMM_NAMES[arch]
        return resolve(f"{arch}{dot}{tag}"), dict(options)
    return resolve(model_name), {}


def _feature_options(
    options: dict[str, Any], features_only: bool, out_indices: int | Sequence[int] | None
) -> tuple[str | None, int | Sequence[int] | None]:
    """``feature_cls`` and ``out_indices`` from timm's ``feature_cls=`` and ``feature_cfg=``
    (taken out of ``options``); each refused by name without ``features_only``."""
    feature_cfg = dict(options.pop("feature_cfg", None) or {})
    feature_cls = options.pop("feature_cls", None) or feature_cfg.pop("feature_cls", None)
    out_indices = feature_cfg.pop("out_indices", out_indices) if out_indices is None else out_indices
    if feature_cfg:
        raise InvalidArgumentError(
            f"feature_cfg takes feature_cls and out_indices in zoo, not {', '.join(sorted(feature_cfg))}"
        )
    if feature_cls is not None and not features_only:
        raise InvalidArgumentError(
            f"feature_cls={feature_cls!r} says how to extract feature maps: pass features_only=True"
        )
    return feature_cls, out_indices


def _remove_classifier(model: nn.Module, pool: str | None) -> None:
    """timm's ``num_classes=0``: no final Linear, and the pooling ``global_pool`` asked for (""
    keeps the maps), recorded in the model's options so that `zoo.save` restores it."""
    if pool is None:
        model.reset_classifier(0)
        update_config(model, num_classes=0, categories=None)
        return
    model.reset_classifier(0, global_pool=pool)
    model_kwargs = {**model.pretrained_cfg.get("model_kwargs", {}), "global_pool": pool}
    update_config(model, num_classes=0, categories=None, model_kwargs=model_kwargs)


def _load_checkpoint(model: nn.Module, path: Path, arch: str) -> None:
    """Load every tensor of the checkpoint at ``path`` into ``model`` (timm's ``load_checkpoint``:
    no key left over or missing), after the key converter of the architecture's weights."""
    entries = weight_entries.weights_for(arch)
    state_dict = convert_state_dict(entries[0].converter if entries else "identity", load_state_dict_file(path))
    expected = model.state_dict()
    missing = sorted(expected.keys() - state_dict.keys())
    unexpected = sorted(state_dict.keys() - expected.keys())
    mismatched = sorted(k for k in expected.keys() & state_dict.keys() if expected[k].shape != state_dict[k].shape)
    if missing or unexpected or mismatched:
        message = mismatch_message(missing, unexpected, mismatched, expected, state_dict)
        raise WeightsMismatchError(f"{message}\n  (checkpoint_path={str(path)!r})")
    model.load_state_dict(state_dict)
    update_config(model, weights=str(path))
