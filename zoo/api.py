"""The public entry points: `load`, `info`, `transforms`, `save`."""
from __future__ import annotations

import hashlib
import json
import os
import urllib.parse
import urllib.request
import warnings
from collections.abc import Callable, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import safetensors.torch
import torch
import torch.nn as nn
from PIL import Image
from torchvision.transforms import InterpolationMode, v2

from zoo import hub, registry
from zoo.architectures.features import FeatureExtractor
from zoo.convert import StateDict, adapt_input_conv, convert_state_dict
from zoo.errors import InvalidArgumentError, WeightsError, WeightsMismatchError, WeightsNotFoundError
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
    saved = saved_folder(name_or_path)
    if saved is not None:
        model = _load_saved(saved, pretrained, head, weights, model_kwargs)
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
    """Write ``config.json`` + ``model.safetensors`` (+ the weights' card as README.md) so that
    ``zoo.load(directory)`` restores the model exactly. Files appear whole or not at all; the
    card of a model saved there before goes when this one has none."""
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
        elif (directory / CONFIG_FILE).is_file():  # the folder held another model: its card is not this one's
            (directory / CARD_FILE).unlink(missing_ok=True)
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
    model.pretrained_cfg = {k: v for k, v in config.items() if k != "format"}
    if "in_chans" in model_kwargs:
        preprocess = _adapt_preprocess(config.get("preprocess") or {}, model_kwargs["in_chans"])
        model.pretrained_cfg["preprocess"] = preprocess
    if model_kwargs:
        model.pretrained_cfg["model_kwargs"] = {k: v for k, v in kwargs.items() if k not in ("num_classes", "head")}
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

