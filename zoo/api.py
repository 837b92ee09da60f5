"""The public entry points: `load`, `info`, `transforms`, `save`."""
from __future__ import annotations

import hashlib
import json
import os
import urllib.parse
from collections.abc import Callable, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import safetensors.torch
import torch
import torch.nn as nn
from torchvision.transforms import InterpolationMode, v2

from zoo import hub, registry
from zoo.architectures.features import FeatureExtractor
from zoo.convert import StateDict, adapt_input_conv, convert_state_dict
from zoo.errors import WeightsMismatchError
from zoo.files import atomic_files
from zoo.hf import load_pretrained
from zoo.registry import WeightInfo

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
CARD_FILE = "README.md"


def info(name: str) -> WeightInfo:
    """Metadata of ``arch.tag`` (or of an architecture's default weights)."""
    return registry.weight_info(name)


def load(
    name_or_path: str | os.PathLike,
    *,
    pretrained: bool = True,
    num_classes: int | None = None,
    head: str | None = None,
    weights: str | os.PathLike | None = None,
    device: torch.device | str | None = None,
    dtype: torch.dtype | None = None,
    features_only: bool = False,
    out_indices: Sequence[int] | None = None,
    **model_kwargs: Any,
) -> nn.Module:
    """Build a model by name (``resnet50``, ``resnet50.tv_in1k``) or from a directory written
    by `save`, with verified pretrained weights unless ``pretrained=False``.

    ``num_classes`` different from the weights' keeps every body weight and puts a fresh head
    of that size on top; ``weights`` (a local file or URL) replaces the entry's source;
    ``in_chans`` different from the weights' adapts the first convolution (summed or repeated
    RGB filters). ``features_only=True`` returns a model whose output is the list of feature
    maps at ``out_indices`` (see its ``feature_info``). The model is returned in eval mode;
    call ``.train()`` to fine-tune it.
    """
    if num_classes is not None and (isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes <= 0):
        raise ValueError(f"num_classes must be a positive integer, got {num_classes!r}")
    path = Path(name_or_path)
    if (path / CONFIG_FILE).is_file():
        model = _load_saved(path)
    elif weights is not None and (Path(weights) / CONFIG_FILE).is_file():  # a Hugging Face checkpoint directory
        model = load_pretrained(str(name_or_path), weights, head=head, num_classes=num_classes, dtype=dtype, **model_kwargs)
    else:
        model = _load_registered(str(name_or_path), pretrained, num_classes, head, weights, model_kwargs)
    if num_classes is not None and num_classes != model.num_classes:
        model.reset_classifier(num_classes)
        model.pretrained_cfg = {**model.pretrained_cfg, "num_classes": num_classes, "categories": None}
    if features_only:
        model = _feature_extractor(model, num_classes, out_indices)
    return model.to(device=device, dtype=dtype).eval()


def _feature_extractor(model: nn.Module, num_classes: int | None, out_indices: Sequence[int] | None) -> nn.Module:
    arch = model.pretrained_cfg["architecture"]
    if num_classes is not None:
        raise ValueError("features_only=True returns feature maps and takes no num_classes")
    if not hasattr(model, "forward_intermediates"):
        raise ValueError(f"{arch} has no feature levels; features_only works for the vision models")
    cfg = model.pretrained_cfg
    extractor = FeatureExtractor(model, out_indices)
    extractor.pretrained_cfg = {
        **cfg, "features_only": True, "out_indices": extractor.out_indices, "num_classes": 0, "categories": None,
    }
    return extractor


def _load_registered(
    name: str,
    pretrained: bool,
    num_classes: int | None,
    head: str | None,
    weights: str | os.PathLike | None,
    model_kwargs: dict[str, Any],
) -> nn.Module:
    arch, entry = registry.resolve(name)
    heads = registry.supported_heads(arch)
    entry_head = entry.model_kwargs.get("head") if entry is not None and pretrained else None
    head = head or entry_head or heads[0]
    if head not in heads:
        raise ValueError(f"{arch} has no head {head!r}; choose one of: {', '.join(heads)}")
    if "." in name and not pretrained and weights is None:
        entry = None  # "arch.tag" with pretrained=False: the architecture only
    use_weights = weights is not None or (pretrained and entry is not None)
    if pretrained and weights is None and entry is None:
        raise registry.no_pretrained_weights(arch)
    kwargs = {**(entry.model_kwargs if entry and use_weights else {}), **model_kwargs}
    if use_weights and weights is None:
        kwargs["num_classes"] = entry.num_classes
    elif num_classes is not None:
        kwargs["num_classes"] = num_classes
    if len(heads) > 1:
        kwargs["head"] = head
    cfg = {
        "architecture": arch,
        "head": head,
        "model_kwargs": {k: v for k, v in kwargs.items() if k != "num_classes"},
        "weights": None,
        "num_classes": None,
        "preprocess": {},
        "categories": None,
    }
    builder = registry.get_builder(arch)
    if not use_weights:
        model = builder(**kwargs)
    else:
        state_dict = _read_weights(entry, weights)
        model = _build_with_state_dict(builder, kwargs, state_dict, num_classes)
        source = str(weights) if weights is not None else entry.name
        cfg |= {"weights": source}
        if entry is not None:
            preprocess = _adapt_preprocess(entry.preprocess, getattr(model, "in_chans", None))
            cfg |= {"preprocess": preprocess, "categories": entry.categories}
    cfg["num_classes"] = model.num_classes
    model.pretrained_cfg = cfg
    return model


def _adapt_preprocess(preprocess: dict[str, Any], in_chans: int | None) -> dict[str, Any]:
    """The weights' preprocessing for a model whose first convolution was adapted to
    ``in_chans``: grayscale input and averaged statistics for 1 channel, repeated otherwise."""
    if not preprocess or in_chans is None or in_chans == len(preprocess["mean"]):
        return dict(preprocess)
    if in_chans == 1:
        mean, std = [sum(preprocess["mean"]) / 3], [sum(preprocess["std"]) / 3]
        return {**preprocess, "channels": 1, "mean": mean, "std": std}
    repeat = -(-in_chans // 3)
    return {**preprocess, "mean": (preprocess["mean"] * repeat)[:in_chans], "std": (preprocess["std"] * repeat)[:in_chans]}


def _read_weights(entry: WeightInfo | None, weights: str | os.PathLike | None) -> StateDict:
    """The state dict from the entry's verified source, or from the ``weights`` override."""
    if weights is not None:
        source = str(weights)
        if source.startswith(("http://", "https://")):
            url_id = hashlib.sha256(source.encode()).hexdigest()[:12]
            path = hub.fetch_state_dict(source, sha256=None, filename=f"{url_id}-{_url_basename(source)}")
        else:
            path = Path(source).expanduser()
            if not path.is_file():
                raise FileNotFoundError(f"weights file {path} does not exist")
    elif entry.url is not None:
        suffix = Path(_url_basename(entry.url)).suffix
        path = hub.fetch_state_dict(entry.url, sha256=entry.sha256, filename=f"{entry.name}{suffix}")
    else:
        path = Path(str(resources.files("zoo.weights").joinpath(entry.file)))
        hub.verify_file(path, entry.sha256)
    state_dict = hub.load_state_dict_file(path)
    return convert_state_dict(entry.converter if entry else "identity", state_dict)


def _url_basename(url: str) -> str:
    return Path(urllib.parse.urlsplit(url).path).name


def _classifier_keys(model: nn.Module) -> set[str]:
    classifier = model.get_classifier()
    for prefix, module in model.named_modules():
        if module is classifier:
            return {f"{prefix}.{k}" for k in module.state_dict()}
    return set()


def _build_with_state_dict(
    builder: Callable[..., nn.Module], kwargs: dict[str, Any], state_dict: StateDict, num_classes: int | None
) -> nn.Module:
    """Build on the meta device (no wasted random init) and take the tensors of ``state_dict``.

    A checkpoint whose classifier differs in size loads its body when the caller asked for
    ``num_classes``: the head is then replaced by a fresh one anyway.
    """
    with torch.device("meta"):
        model = builder(**kwargs)
    expected = model.state_dict()
    first_conv = f"{getattr(model, 'first_conv', '')}.weight"
    if first_conv in expected and first_conv in state_dict:
        in_chans = expected[first_conv].shape[1]
        if state_dict[first_conv].shape[1] != in_chans:
            state_dict = {**state_dict, first_conv: adapt_input_conv(state_dict[first_conv], in_chans)}
    for key in expected.keys() - state_dict.keys():
        if key.endswith(".num_batches_tracked"):  # checkpoints from before PyTorch 0.4.1 lack it
            state_dict = {**state_dict, key: torch.tensor(0)}
    missing = sorted(expected.keys() - state_dict.keys())
    unexpected = sorted(state_dict.keys() - expected.keys())
    mismatched = sorted(
        k for k in expected.keys() & state_dict.keys() if expected[k].shape != state_dict[k].shape
    )
    head_keys = _classifier_keys(model)
    if num_classes is not None and mismatched and set(mismatched) <= head_keys:
        model.reset_classifier(num_classes)
        state_dict = {k: v for k, v in state_dict.items() if k not in head_keys}
        missing, mismatched = sorted(set(missing) - head_keys), []
        expected = {k: v for k, v in expected.items() if k not in head_keys}
    if missing or unexpected or mismatched:
        raise WeightsMismatchError(_mismatch_message(missing, unexpected, mismatched, expected, state_dict))
    model.load_state_dict(state_dict, strict=False, assign=True)
    meta = [n for n, t in [*model.named_parameters(), *model.named_buffers()] if t.is_meta]
    if meta:
        raise WeightsMismatchError(f"weights leave these tensors uninitialised: {', '.join(meta[:10])}")
    return model


def _mismatch_message(
    missing: list[str], unexpected: list[str], mismatched: list[str], expected: StateDict, given: StateDict
) -> str:
    def listing(keys: list[str]) -> str:
        more = f" … and {len(keys) - 10} more" if len(keys) > 10 else ""
        return ", ".join(keys[:10]) + more

    lines = ["the weights don't fit the model:"]
    if missing:
        lines.append(f"  missing keys ({len(missing)}): {listing(missing)}")
    if unexpected:
        lines.append(f"  unexpected keys ({len(unexpected)}): {listing(unexpected)}")
    if mismatched:
        shapes = [f"{k} {tuple(given[k].shape)} vs model {tuple(expected[k].shape)}" for k in mismatched]
        lines.append(f"  shape mismatches ({len(mismatched)}): {listing(shapes)}")
    lines.append(
        "  Check that the file belongs to this architecture and its options (num_classes, in_chans, ...);"
        " pass num_classes=N to replace a classifier of another size."
    )
    return "\n".join(lines)


def transforms(name_or_model: str | nn.Module) -> Callable[[Any], torch.Tensor]:
    """The preprocessing the weights were evaluated with (torchvision transforms v2):
    PIL images or uint8 tensors in, a normalised float tensor out."""
    if isinstance(name_or_model, nn.Module):
        preprocess = name_or_model.pretrained_cfg.get("preprocess") or {}
    else:
        preprocess = info(name_or_model).preprocess
    if not preprocess:
        raise ValueError("these weights record no image preprocessing")
    return build_transforms(preprocess)


def build_transforms(preprocess: dict[str, Any]) -> v2.Compose:
    """Resize and crop first (on PIL images this uses PIL's resampling, as torchvision's
    weight transforms do), then convert to a float tensor and normalise."""
    steps: list[nn.Module] = []
    if preprocess.get("channels") == 1:
        steps.append(v2.Grayscale(num_output_channels=1))
    if "resize" in preprocess:
        interpolation = InterpolationMode(preprocess.get("interpolation", "bilinear"))
        steps.append(v2.Resize(preprocess["resize"], interpolation=interpolation, antialias=True))
    if "crop" in preprocess:
        steps.append(v2.CenterCrop(preprocess["crop"]))
    steps += [
        v2.ToImage(),
        v2.ToDtype(torch.float32, scale=True),
        v2.Normalize(mean=preprocess["mean"], std=preprocess["std"]),
    ]
    return v2.Compose(steps)


def save(model: nn.Module, directory: str | os.PathLike) -> Path:
    """Write ``config.json`` + ``model.safetensors`` (+ the weights' card as README.md) so that
    ``zoo.load(directory)`` restores the model exactly. Files appear whole or not at all."""
    cfg = getattr(model, "pretrained_cfg", None)
    if not cfg or "architecture" not in cfg:
        raise ValueError("zoo.save needs a model made by zoo.load (it records the architecture to rebuild)")
    directory = Path(directory)
    config = {**cfg, "num_classes": model.num_classes, "format": "zoo/1"}
    card = None
    if cfg.get("weights") in registry.list_models(pretrained=True):
        card = registry.weight_info(cfg["weights"]).card_text()
    with atomic_files(directory, last=(CONFIG_FILE,)) as staging:  # config last: it marks a complete save
        safetensors.torch.save_model(model, staging / WEIGHTS_FILE)
        (staging / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n")
        if card:
            (staging / CARD_FILE).write_text(card)
    return directory


def _load_saved(directory: Path) -> nn.Module:
    config = json.loads((directory / CONFIG_FILE).read_text())
    kwargs = {**config["model_kwargs"], "num_classes": config["num_classes"]}
    if len(registry.supported_heads(config["architecture"])) > 1:
        kwargs["head"] = config["head"]
    model = registry.get_builder(config["architecture"])(**kwargs)
    if config.get("features_only"):
        model = FeatureExtractor(model, config["out_indices"])
    missing, unexpected = safetensors.torch.load_model(model, directory / WEIGHTS_FILE, strict=False)
    if missing or unexpected:
        raise WeightsMismatchError(
            _mismatch_message(sorted(missing), sorted(unexpected), [], {}, {}) + f"\n  (in {directory})"
        )
    model.pretrained_cfg = {k: v for k, v in config.items() if k != "format"}
    return model

