"""The public entry points: `load`, `info`, `transforms`, `save`, and timm's `create_model`."""
from __future__ import annotations

import hashlib
import json
import math
import os
import urllib.parse
import urllib.request
import warnings
from collections.abc import Callable, Sequence
from enum import Enum
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import safetensors.torch
import torch
import torch.nn as nn
from PIL import Image
from torchvision.transforms import InterpolationMode, v2

from zoo import hf_hub, hub, inference, registry, torchvision_names
from zoo.architectures.features import FeatureExtractor
from zoo.convert import StateDict, adapt_input_conv, convert_state_dict
from zoo.deploy import checked_device
from zoo.errors import InvalidArgumentError, WeightsError, WeightsMismatchError, WeightsNotFoundError
from zoo.files import atomic_files
from zoo.hf import ARCHITECTURES as HF_ARCHITECTURES
from zoo.hf import CHECKPOINT_FILES, load_pretrained
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
    weights: str | os.PathLike | Enum | None = None,
    device: torch.device | str | None = None,
    dtype: torch.dtype | None = None,
    features_only: bool = False,
    out_indices: int | Sequence[int] | None = None,
    optimize: str | None = None,
    example_input: Any = None,
    calibration: Any = None,
    **model_kwargs: Any,
) -> nn.Module:
    """Build a model by name (``resnet50``, ``resnet50.tv_in1k``) or from a directory written
    by `save`, with verified pretrained weights unless ``pretrained=False``.

    ``num_classes`` different from the weights' keeps every body weight and puts a fresh head
    of that size on top; ``weights`` (a local file or URL) replaces the entry's source, and
    torchvision's names for weights (``"IMAGENET1K_V2"``, ``"DEFAULT"``,
    ``"ResNet50_Weights.IMAGENET1K_V1"``, or the enum member) pick the entry holding them;
    ``in_chans`` different from the weights' adapts the first convolution (summed or repeated
    RGB filters). ``features_only=True`` returns a model whose output is the list of feature
    maps at ``out_indices`` (timm's meaning: None all levels, an int n the last n, a sequence
    those levels; see its ``feature_info``). The model is returned in eval mode;
    call ``.train()`` to fine-tune it. ``optimize`` (``"auto"``, ``"fp32"``, ``"bf16"``,
    ``"int8"``) returns it through `zoo.optimize` for inference, timed on ``example_input`` and
    checked (int8: calibrated) on ``calibration``.
    """
    if optimize is None and (example_input is not None or calibration is not None):
        raise InvalidArgumentError("example_input= and calibration= are for optimize=...: pass optimize='auto' "
                                   "(or 'fp32', 'bf16', 'int8'), or leave them out")
    if num_classes is not None and (isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes <= 0):
        raise ValueError(f"num_classes must be a positive integer, got {num_classes!r}")
    if device is not None:
        device = checked_device(device)
    saved = None if hf_hub.is_hub_name(name_or_path) else saved_folder(name_or_path)
    registered = saved is None and not hf_hub.is_hub_name(name_or_path)
    entry = torchvision_names.weights_entry(str(name_or_path), weights) if registered else None
    if entry is not None:
        name_or_path, weights, pretrained = entry.name, None, True
    if hf_hub.is_hub_name(name_or_path):
        model = _load_hub(hf_hub.parse_hub_name(name_or_path), pretrained, num_classes, head, weights, model_kwargs)
    elif saved is not None:
        model = _load_saved(saved, pretrained, head, weights, model_kwargs)
    elif weights is not None and (Path(weights) / CONFIG_FILE).is_file():  # a Hugging Face checkpoint directory
        model = load_pretrained(str(name_or_path), weights, head=head, num_classes=num_classes, dtype=dtype, **model_kwargs)
    elif hf_hub.is_repo_reference(weights) and registry.resolve(str(name_or_path))[0] in HF_ARCHITECTURES:
        repo = hf_hub.parse_repo(weights, f"weights={weights!r}")
        folder = hf_hub.download_snapshot(repo, CHECKPOINT_FILES)
        model = load_pretrained(str(name_or_path), folder, head=head, num_classes=num_classes, dtype=dtype, **model_kwargs)
        model.pretrained_cfg["weights"] = f"{repo.repo_id}@{folder.name}"
    else:
        model = _load_registered(str(name_or_path), pretrained, num_classes, head, weights, model_kwargs)
    if num_classes is not None and num_classes != model.num_classes:
        model.reset_classifier(num_classes)
        model.pretrained_cfg = {**model.pretrained_cfg, "num_classes": num_classes, "categories": None}
    model.pretrained_cfg = {**model.pretrained_cfg, **timm_pretrained_cfg(model, str(name_or_path))}
    if features_only:
        model = _feature_extractor(model, num_classes, out_indices)
    model = model.to(device=device, dtype=dtype).eval()
    if optimize is not None:
        return inference.optimize(model, example_input, optimize, calibration)
    return model


def _feature_extractor(
    model: nn.Module, num_classes: int | None, out_indices: int | Sequence[int] | None
) -> nn.Module:
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


# timm's names of architectures that zoo registers under another name, with the options that
# make them (same parameters and feature levels); other widths of timm's MobileNetV3 round
# channels differently and have no zoo counterpart.
TIMM_NAMES: dict[str, tuple[str, dict[str, Any]]] = {
    "mobilenetv1_100": ("mobilenet_v1", {}),
    "mobilenetv2_050": ("mobilenet_v2", {"width_mult": 0.5}),
    "mobilenetv2_100": ("mobilenet_v2", {}),
    "mobilenetv2_140": ("mobilenet_v2", {"width_mult": 1.4}),
    "mobilenetv3_large_100": ("mobilenet_v3_large", {}),
    "mobilenetv3_small_100": ("mobilenet_v3_small", {}),
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
    last n levels), other options (``global_pool``, ``drop_rate``...) to the architecture.
    ``checkpoint_path`` loads a local state dict, safetensors file or timm/torchvision
    checkpoint (pickles only with ``weights_only=True``) after the head is set, strictly, as
    timm does; ``pretrained_cfg_overlay`` updates ``pretrained_cfg``. The model is returned in
    training mode, as timm returns it."""
    arch, _, tag = model_name.partition(".")
    arch, options = TIMM_NAMES.get(arch, (arch, {}))
    options = {**options, **kwargs}
    if in_chans is not None:
        options["in_chans"] = in_chans
    name = f"{arch}.{tag}" if tag else arch
    model = load(name, pretrained=pretrained, num_classes=num_classes or None, **options)
    if num_classes == 0:
        model.reset_classifier(0)
        model.pretrained_cfg = {**model.pretrained_cfg, "num_classes": 0, "categories": None}
    if checkpoint_path is not None:
        _load_checkpoint(model, Path(checkpoint_path).expanduser(), arch)
    if pretrained_cfg_overlay:
        model.pretrained_cfg = {**model.pretrained_cfg, **pretrained_cfg_overlay}
    if features_only:
        model = _feature_extractor(model, None, out_indices)
    return model.train()


def _load_checkpoint(model: nn.Module, path: Path, arch: str) -> None:
    """Load every tensor of the checkpoint at ``path`` into ``model`` (timm's ``load_checkpoint``:
    no key left over or missing), after the key converter of the architecture's weights."""
    entries = registry.weights_for(arch)
    state_dict = convert_state_dict(entries[0].converter if entries else "identity", hub.load_state_dict_file(path))
    expected = model.state_dict()
    missing = sorted(expected.keys() - state_dict.keys())
    unexpected = sorted(state_dict.keys() - expected.keys())
    mismatched = sorted(k for k in expected.keys() & state_dict.keys() if expected[k].shape != state_dict[k].shape)
    if missing or unexpected or mismatched:
        message = _mismatch_message(missing, unexpected, mismatched, expected, state_dict)
        raise WeightsMismatchError(f"{message}\n  (checkpoint_path={str(path)!r})")
    model.load_state_dict(state_dict)
    model.pretrained_cfg = {**model.pretrained_cfg, "weights": str(path)}


IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def timm_pretrained_cfg(model: nn.Module, name: str) -> dict[str, Any]:
    """timm's ``pretrained_cfg`` keys, with timm's meaning, for a vision model (other models get
    none), so that ``timm.data.resolve_model_data_config(model)`` and ``create_transform``
    reproduce `transforms`: input_size (C, H, W), interpolation, mean, std, crop_pct (crop /
    resize), crop_mode, num_classes, first_conv, classifier, fixed_input_size, pool_size (the
    final map at input_size, for conv nets whose total stride divides it), and for registered
    weights their tag and license. They follow zoo's ``preprocess``; a model without weights gets those of
    ``name`` (`_default_preprocess`)."""
    if not hasattr(model, "first_conv") or not hasattr(model, "feature_info"):
        return {}
    cfg = model.pretrained_cfg
    preprocess = cfg.get("preprocess") or _default_preprocess(model, name)
    # Without a recorded size (trained from scratch at the data's own size), the architecture's default geometry.
    geometry = preprocess if "crop" in preprocess or "resize" in preprocess else _default_preprocess(model, name)
    crop = geometry.get("crop", geometry.get("resize"))
    height, width = (crop, crop) if isinstance(crop, int) else crop
    resize = geometry.get("resize", min(height, width))
    resize = resize if isinstance(resize, int) else min(resize)  # an exact (H, W) resize: its short side
    crop_pct = min(height, width) / resize
    while math.floor(min(height, width) / crop_pct) < resize:  # timm resizes to floor(crop / crop_pct)
        crop_pct = math.nextafter(crop_pct, 0.0)
    classifier = model.get_classifier()
    weights = cfg.get("weights")
    entry = registry.weight_info(weights) if weights in registry.list_models(pretrained=True) else None
    timm_cfg = {
        "input_size": (len(preprocess["mean"]), height, width),
        "interpolation": preprocess.get("interpolation", "bilinear"),
        "mean": tuple(preprocess["mean"]),
        "std": tuple(preprocess["std"]),
        "crop_pct": crop_pct,
        "crop_mode": "center",
        "num_classes": model.num_classes,
        "first_conv": model.first_conv,
        "classifier": next(prefix for prefix, module in model.named_modules() if module is classifier),
        "fixed_input_size": False,
    }
    if entry is not None:
        timm_cfg |= {"tag": entry.tag, "license": entry.license}
    reduction = model.feature_info[-1]["reduction"]
    if getattr(model.global_pool, "dims", None) == (2, 3) and height % reduction == 0 and width % reduction == 0:
        timm_cfg["pool_size"] = (height // reduction, width // reduction)
    return timm_cfg


def _default_preprocess(model: nn.Module, name: str) -> dict[str, Any]:
    """The preprocessing of a model built without weights, for its channels: that of the
    weights ``name`` names (``arch.tag``, or the architecture's default weights), as timm's
    cfg follows the tag whether or not weights load; for an architecture without weights,
    ImageNet's statistics at 224 px (resized to 256) for the nets of total stride 32, and at
    32 px (no resize) for the small-image ones."""
    entry = registry.resolve(name)[1] if registry.is_registered(name) else None
    if entry is None or not entry.preprocess:
        size = 224 if model.feature_info[-1]["reduction"] >= 32 else 32
        resize = 256 if size == 224 else size
        imagenet = {"resize": resize, "crop": size, "interpolation": "bilinear", "mean": list(IMAGENET_MEAN),
                    "std": list(IMAGENET_STD)}
        return _adapt_preprocess(imagenet, model.in_chans)
    return _adapt_preprocess(entry.preprocess, model.in_chans)


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
    entry_head = entry.model_kwargs.get("head", heads[0]) if entry is not None and pretrained else None
    head = head or model_kwargs.pop("head", None) or entry_head or heads[0]
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
        model = _build(builder, kwargs, arch)
    else:
        state_dict = _read_weights(entry, weights)
        new_head = entry_head is not None and head != entry_head and weights is None
        if new_head:  # the body of the weights under another head: their own head is left out
            if num_classes is None:
                raise InvalidArgumentError(f"{name} under head={head!r} needs num_classes=N for its new head")
            kwargs["num_classes"] = num_classes
            with torch.device("meta"):  # what only the weights' own head uses (its classifier, a pooling)
                own = _build(builder, {**kwargs, "head": entry_head, "num_classes": entry.num_classes}, arch)
                target = _build(builder, kwargs, arch)
            dropped = _classifier_keys(own) | (own.state_dict().keys() - target.state_dict().keys())
            state_dict = {k: v for k, v in state_dict.items() if k not in dropped}
        model = _build_with_state_dict(builder, kwargs, state_dict, num_classes, fresh_head=new_head)
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
    ``in_chans``: images converted to that many channels (gray, RGB, RGBA), with averaged
    statistics for 1 channel and the weights' statistics repeated for more."""
    if not preprocess or in_chans is None or in_chans == len(preprocess["mean"]):
        return dict(preprocess)
    if in_chans == 1:
        mean, std = [sum(preprocess["mean"]) / len(preprocess["mean"])], [sum(preprocess["std"]) / len(preprocess["std"])]
        return {**preprocess, "channels": 1, "mean": mean, "std": std}
    repeat = -(-in_chans // len(preprocess["mean"]))
    mean, std = (preprocess["mean"] * repeat)[:in_chans], (preprocess["std"] * repeat)[:in_chans]
    return {**preprocess, "channels": in_chans, "mean": mean, "std": std}


def _read_weights(entry: WeightInfo | None, weights: str | os.PathLike | None) -> StateDict:
    """The state dict from the entry's verified source, or from the ``weights`` override."""
    if weights is not None:
        source = str(weights)
        if source.startswith(("http://", "https://")):
            url_id = hashlib.sha256(source.encode()).hexdigest()[:12]
            path = hub.fetch_state_dict(source, sha256=None, filename=f"{url_id}-{_url_basename(source)}")
        else:
            path = _local_weights_path(source)
    elif entry.url is not None:
        suffix = Path(_url_basename(entry.url)).suffix
        path = hub.fetch_state_dict(entry.url, sha256=entry.sha256, filename=f"{entry.name}{suffix}")
    elif entry.hf_hub is not None:
        path = hf_hub.fetch_entry_file(entry)
    else:
        path = Path(str(resources.files("zoo.weights").joinpath(entry.file)))
        hub.verify_file(path, entry.sha256)
    state_dict = hub.load_state_dict_file(path)
    return convert_state_dict(entry.converter if entry else "identity", state_dict)


def _local_weights_path(source: str) -> Path:
    """The file named by ``weights=``: a path or a ``file://`` URL."""
    if source.startswith("file://"):
        source = urllib.request.url2pathname(urllib.parse.urlsplit(source).path)
    path = Path(source).expanduser()
    if path.is_dir():
        raise WeightsNotFoundError(
            f"weights={source!r} is a folder without {CONFIG_FILE}: pass the weight file inside it "
            "(.safetensors, .pth, .bin), or the folder itself as the model name if zoo.save wrote it"
        )
    if not path.is_file():
        raise WeightsNotFoundError(f"weights file {path} does not exist")
    return path


def _url_basename(url: str) -> str:
    return Path(urllib.parse.urlsplit(url).path).name


def _classifier_keys(model: nn.Module) -> set[str]:
    classifier = model.get_classifier()
    for prefix, module in model.named_modules():
        if module is classifier:
            return {f"{prefix}.{k}" for k in module.state_dict()}
    return set()


def _build_with_state_dict(
    builder: Callable[..., nn.Module],
    kwargs: dict[str, Any],
    state_dict: StateDict,
    num_classes: int | None,
    fresh_head: bool = False,
) -> nn.Module:
    """Build on the meta device (no wasted random init) and take the tensors of ``state_dict``.

    A checkpoint whose classifier differs in size loads its body when the caller asked for
    ``num_classes``: the head is then replaced by a fresh one anyway; ``fresh_head`` does the
    same for a state dict that has no head for this model (another head's weights).
    """
    with torch.device("meta"):
        model = _build(builder, kwargs, builder.__name__)
    expected = model.state_dict()
    tied = _tied_parameters(model)
    for alias, canonical in tied.items():  # safetensors stores a shared tensor once
        if alias not in state_dict and canonical in state_dict:
            state_dict = {**state_dict, alias: state_dict[canonical]}
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
    if fresh_head or (num_classes is not None and mismatched and set(mismatched) <= head_keys):
        model.reset_classifier(num_classes)
        state_dict = {k: v for k, v in state_dict.items() if k not in head_keys}
        missing, mismatched = sorted(set(missing) - head_keys), []
        expected = {k: v for k, v in expected.items() if k not in head_keys}
    if missing or unexpected or mismatched:
        raise WeightsMismatchError(_mismatch_message(missing, unexpected, mismatched, expected, state_dict))
    state_dict = {  # a checkpoint stored in fp16 (or with an fp64 tensor) loads in the model's own dtype
        k: v.to(expected[k].dtype) if v.is_floating_point() and expected[k].is_floating_point() else v
        for k, v in state_dict.items()
    }
    model.load_state_dict(state_dict, strict=False, assign=True)
    for alias, canonical in tied.items():  # assign=True made two parameters of one: share it again
        owner, _, attr = alias.rpartition(".")
        setattr(model.get_submodule(owner), attr, model.get_parameter(canonical))
    meta = [n for n, t in [*model.named_parameters(), *model.named_buffers()] if t.is_meta]
    if meta:
        raise WeightsMismatchError(f"weights leave these tensors uninitialised: {', '.join(meta[:10])}")
    return model


def _tied_parameters(model: nn.Module) -> dict[str, str]:
    """Parameter names that share one tensor with an earlier name (tied embeddings): alias -> first name."""
    first: dict[int, str] = {}
    tied = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        if id(param) in first:
            tied[name] = first[id(param)]
        else:
            first[id(param)] = name
    return tied


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
    """Convert to the model's channel count, resize and crop (on PIL images this uses PIL's
    resampling, as torchvision's weight transforms do), then convert to a float tensor and
    normalise."""
    steps: list[nn.Module] = [ConvertChannels(len(preprocess["mean"]))]
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


class ConvertChannels(nn.Module):
    """Bring an image of any mode to ``channels`` channels: 1 (gray), 3 (RGB) or 4 (RGBA).
    PIL images are converted by mode (palette, gray+alpha, CMYK, 16-bit included); tensors
    (..., C, H, W) with 1, 3 or 4 channels by luminance, repetition, or dropping/adding alpha."""

    _MODES = {1: "L", 3: "RGB", 4: "RGBA"}

    def __init__(self, channels: int) -> None:
        super().__init__()
        if channels not in self._MODES:
            raise ValueError(f"images convert to 1, 3 or 4 channels, not {channels}")
        self.channels = channels

    def forward(self, image: Any) -> Any:
        if isinstance(image, Image.Image):
            if image.mode.startswith("I;16") or image.mode == "I":  # 16/32-bit gray: scale to 8 bits first
                image = Image.fromarray((np.asarray(image, dtype=np.float64) / 257).clip(0, 255).astype(np.uint8))
            return image if image.mode == self._MODES[self.channels] else image.convert(self._MODES[self.channels])
        have = image.shape[-3]
        if have == self.channels:
            return image
        rgb = image[..., :3, :, :] if have == 4 else image.expand(*image.shape[:-3], 3, *image.shape[-2:]) if have == 1 else image
        if self.channels == 1:
            return v2.functional.rgb_to_grayscale(rgb)
        if self.channels == 3:
            return rgb
        opaque = torch.full_like(rgb[..., :1, :, :], 255 if rgb.dtype == torch.uint8 else 1)
        return torch.cat([rgb, opaque], dim=-3)

    def extra_repr(self) -> str:
        return f"channels={self.channels}"


def save(model: nn.Module, directory: str | os.PathLike) -> Path:
    """Write ``config.json`` + ``model.safetensors`` + a README.md model card so that
    ``zoo.load(directory)`` restores the model exactly. The folder is a Hugging Face Hub
    repository as it stands: ``huggingface_hub.upload_folder`` publishes it, the Hub renders the
    card's metadata, ``zoo.load("hf-hub:ORG/REPO")`` loads it back, and for timm's architectures
    config.json also carries timm's keys. Files appear whole or not at all."""
    cfg = getattr(model, "pretrained_cfg", None)
    if not cfg or "architecture" not in cfg:
        raise ValueError("zoo.save needs a model made by zoo.load (it records the architecture to rebuild)")
    directory = Path(directory)
    config = {**cfg, "num_classes": model.num_classes, "format": "zoo/1"}
    config |= hf_hub.timm_config(config, getattr(model, "num_features", 0))
    entry = registry.weight_info(cfg["weights"]) if cfg.get("weights") in registry.list_models(pretrained=True) else None
    card = hf_hub.model_card(config, entry)
    with atomic_files(directory, last=(CONFIG_FILE,)) as staging:  # config last: it marks a complete save
        safetensors.torch.save_model(model, staging / WEIGHTS_FILE)
        (staging / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n")
        (staging / CARD_FILE).write_text(card)
    return directory


def saved_folder(name_or_path: str | os.PathLike) -> Path | None:
    """The folder `save` wrote that ``name_or_path`` means, or None for a registry name. A
    string is a path when it is written as one (``./name``, ``a/b``, ``~/x``, absolute), or
    when no architecture or weight entry has that name; a registered name that is also a
    folder here means the registry, with a warning saying how to name the folder."""
    path = Path(name_or_path).expanduser()
    written_as_path = not isinstance(name_or_path, str) or os.sep in name_or_path or "/" in name_or_path \
        or name_or_path.startswith(("~", "."))
    is_folder = (path / CONFIG_FILE).is_file()
    if written_as_path:
        if path.is_dir() and not is_folder:
            raise WeightsNotFoundError(f"{path} has no {CONFIG_FILE}: it is not a folder written by zoo.save")
        if not path.exists():
            raise WeightsNotFoundError(f"{path} does not exist (a folder written by zoo.save was expected)")
        return path
    if not registry.is_registered(name_or_path):
        return path if is_folder else None
    if is_folder:
        warnings.warn(f"{name_or_path!r} names registered weights and also a folder here; using the registered "
                      f"weights. Write ./{name_or_path} for the folder.", stacklevel=3)
    return None


def _load_saved(
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
    if len(registry.supported_heads(arch)) > 1:
        kwargs["head"] = config["head"]
    builder = registry.get_builder(arch)
    if not pretrained:
        model = _build(builder, kwargs, arch)
    else:
        state_dict = hub.load_state_dict_file(directory / WEIGHTS_FILE)
        if config.get("features_only"):
            state_dict = {k.removeprefix("model."): v for k, v in state_dict.items()}
        try:
            model = _build_with_state_dict(builder, kwargs, state_dict, None)
        except WeightsMismatchError as error:
            raise WeightsMismatchError(f"{error}\n  (in {directory / WEIGHTS_FILE})") from None
    if config.get("features_only"):
        model = FeatureExtractor(model, config["out_indices"])
    model.pretrained_cfg = {k: v for k, v in config.items() if k not in ("format", *hf_hub.TIMM_CONFIG_KEYS)}
    if "in_chans" in model_kwargs:
        preprocess = _adapt_preprocess(config.get("preprocess") or {}, model_kwargs["in_chans"])
        model.pretrained_cfg["preprocess"] = preprocess
    if model_kwargs:
        model.pretrained_cfg["model_kwargs"] = {k: v for k, v in kwargs.items() if k not in ("num_classes", "head")}
    return model


def _load_hub(
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
        raise InvalidArgumentError(f"weights={str(weights)!r} does not apply to {name}: the repository holds its weights")
    config_path = hf_hub.download_file(repo, CONFIG_FILE)
    pinned = hf_hub.HubRepo(repo.repo_id, hf_hub.commit_of(config_path))
    try:
        config = json.loads(config_path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise WeightsError(f"{CONFIG_FILE} of {pinned} is not readable JSON ({error}): it is not a model zoo can load") from None
    if isinstance(config, dict) and str(config.get("format", "")).startswith("zoo/"):
        if pretrained:
            hf_hub.download_file(pinned, WEIGHTS_FILE)  # next to the config, in the commit's snapshot folder
        return _load_saved(config_path.parent, pretrained, head, None, model_kwargs)
    if not isinstance(config, dict) or not hf_hub.is_timm_config(config):
        raise WeightsError(
            f"{name} is neither a timm model (config.json with architecture and pretrained_cfg) nor a folder "
            f"written by zoo.save; for a Mixtral-format checkpoint use zoo.load('moe_lm', weights={repo.repo_id!r})"
        )
    spec = hf_hub.timm_model(config, name)
    if head not in (None, "classification"):
        raise InvalidArgumentError(f"head={head!r} does not apply to {name}, an image classifier (head 'classification')")
    kwargs = {**spec.model_kwargs, **model_kwargs, "num_classes": spec.num_classes}
    builder = registry.get_builder(spec.arch)
    if not pretrained:
        model = _build(builder, kwargs, spec.arch)
    else:
        path = hf_hub.download_weights(pinned)
        try:
            model = _build_with_state_dict(builder, kwargs, hub.load_state_dict_file(path), None)
        except WeightsMismatchError as error:
            raise WeightsMismatchError(f"{error}\n  (in {path.name} of {pinned})") from None
    keeps_head = num_classes in (None, spec.num_classes)
    model.pretrained_cfg = {
        "architecture": spec.arch,
        "head": "classification",
        "model_kwargs": {k: v for k, v in kwargs.items() if k != "num_classes"},
        "weights": f"hf-hub:{pinned}" if pretrained else None,
        "num_classes": model.num_classes,
        "preprocess": _adapt_preprocess(spec.preprocess, getattr(model, "in_chans", None)),
        "categories": None,
    } | ({"class_names": spec.class_names} if spec.class_names and keeps_head else {})
    return model


_SAVED_KEYS = {"architecture": str, "head": str, "model_kwargs": dict, "num_classes": int}


def read_saved_config(directory: Path) -> dict[str, Any]:
    """The ``config.json`` of a folder `save` wrote, checked: an error names the file and what is wrong."""
    path = directory / CONFIG_FILE
    try:
        config = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise WeightsError(f"{path} is not readable JSON ({error}); save the model again with zoo.save") from None
    missing = [key for key, kind in _SAVED_KEYS.items() if not isinstance(config.get(key) if isinstance(config, dict) else None, kind)]
    if missing:
        raise WeightsError(f"{path} lacks {', '.join(missing)} (or has the wrong type): it was not written by "
                           "zoo.save, or was edited; save the model again with zoo.save")
    return config


def _build(builder: Callable[..., nn.Module], kwargs: dict[str, Any], arch: str) -> nn.Module:
    """``builder(**kwargs)``, with an option the architecture does not take refused by name."""
    try:
        return builder(**kwargs)
    except TypeError as error:
        if "unexpected keyword argument" not in str(error):
            raise
        name = str(error).rsplit("argument", 1)[-1].strip(" '\"")
        raise InvalidArgumentError(
            f"{arch} takes no option {name!r}: remove {name}=... from the call "
            f"(its options: help(zoo.registry.get_builder({arch!r})))"
        ) from None

