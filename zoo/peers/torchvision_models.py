"""`get_model`, `get_model_weights` and `get_weight`, as torchvision.models has them: code written
against torchvision's model registry runs on zoo's, with zoo's verified entries behind each member.

Each weights enum class is bound in this module under its name as it is made, and a name not made
yet is made on first lookup (the module's ``__getattr__``), so a member pickles, deep-copies and
unpickles in a fresh process as torchvision's do (``pickle.loads(pickle.dumps(w)) is w``)."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from enum import Enum
from typing import Any

import torch
import torch.nn as nn
from torch import Tensor
from torchvision.transforms import InterpolationMode
from torchvision.transforms import functional as F
from torchvision.transforms._presets import ImageClassification

from zoo.errors import InvalidArgumentError, UnknownModelError
from zoo.interop import torchvision_weights
from zoo.loading import build
from zoo.loading.resolve import HubRepository, Registered, resolve
from zoo.loading.transforms import ConvertChannels
from zoo.store import weight_entries
from zoo.store.weight_entries import WeightInfo

# torchvision's names in meta["_metrics"] for the datasets and metrics zoo's entries record
_DATASETS = {"imagenet-1k": "ImageNet-1K"}
_METRICS = {"top1": "acc@1", "top5": "acc@5"}


class ModelWeights(Enum):
    """An architecture's weight entries as an enum, like torchvision's ``ResNet50_Weights``:
    members named as torchvision names them (``IMAGENET1K_V2``; zoo's own weights by their tag,
    ``FMNIST``), ``DEFAULT`` among them; each member's value is its zoo entry name."""

    @property
    def info(self) -> WeightInfo:
        """The zoo entry (sha256, converter, preprocessing, ...)."""
        return weight_entries.info(self.value)

    @property
    def url(self) -> str | None:
        """Where the file is published; None for weights shipped inside zoo."""
        return self.info.url

    @property
    def meta(self) -> dict[str, Any]:
        """torchvision's meta keys with torchvision's meaning, filled from the entry: ``min_size``
        (the smallest input side the architecture runs on; image models only), ``_metrics`` as
        ``{"ImageNet-1K": {"acc@1": ..., "acc@5": ...}}`` (other datasets keep zoo's names),
        ``_ops`` GMACs and ``_file_size`` MiB, both rounded to 3 decimals as torchvision's. ``_ops``
        is what torchvision's FLOP counter measures on the model (a fused attention kernel counts
        nothing there): the entry's ``torchvision_ops`` where that differs from its ``gmacs``."""
        info = self.info
        ops = info.gmacs if info.torchvision_ops is None else info.torchvision_ops
        meta = {
            "categories": info.category_names(),
            "num_params": info.num_params,
            "recipe": info.recipe,
            "license": info.license,
            "_metrics": _torchvision_metrics(info.metrics),
            "_ops": None if ops is None else round(ops, 3),
            "_file_size": None if info.file_size is None else round(info.file_size / 2**20, 3),
            "_docs": info.card,
        }
        min_size = _min_size(info.name)
        return meta if min_size is None else {**meta, "min_size": min_size}

    def transforms(self) -> ImageClassificationPreset:
        """The eval preprocessing of these weights as torchvision's ``ImageClassification`` preset
        (an ``nn.Module`` that ``torch.jit.script`` compiles), images first brought to the model's
        channels; `zoo.transforms` gives the same steps as a transforms-v2 pipeline."""
        if not self.info.preprocess or "mean" not in self.info.preprocess:
            raise InvalidArgumentError(f"{self.value} records no image preprocessing: its model does not read images")
        return ImageClassificationPreset(self.info.preprocess)


def _torchvision_metrics(metrics: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    """zoo's ``{"imagenet-1k": {"top1": ...}}`` in torchvision's schema, ``{"ImageNet-1K": {"acc@1": ...}}``."""
    return {
        _DATASETS.get(dataset, dataset): {_METRICS.get(name, name): value for name, value in values.items()}
        for dataset, values in metrics.items()
    }


@functools.cache
def _min_size(entry: str) -> tuple[int, int] | None:
    """(side, side): the smallest input the entry's architecture runs on (torchvision's
    ``min_size``), read from a model built on the meta device; None for models without images."""
    info = weight_entries.info(entry)
    if weight_entries.input_kind(info.arch) != "images":
        return None
    with torch.device("meta"):
        model = weight_entries.get_builder(info.arch)(**{**info.model_kwargs, "num_classes": info.num_classes})
    return (model.min_input_size, model.min_input_size)


class ImageClassificationPreset(ImageClassification):
    """torchvision's ``ImageClassification`` preset (resize, center crop, float, normalize: the
    same module and arithmetic as a torchvision weight's ``transforms()``) for a zoo
    preprocessing record: images are first brought to the model's channel count (gray, RGB),
    and an exact ``(H, W)`` resize or crop is kept as one. It compiles with ``torch.jit.script``
    (tensor inputs), as torchvision's does."""

    def __init__(self, preprocess: dict[str, Any]) -> None:
        crop = preprocess.get("crop", preprocess.get("resize"))
        resize = preprocess.get("resize", crop)
        super().__init__(
            crop_size=224,
            mean=tuple(preprocess["mean"]),
            std=tuple(preprocess["std"]),
            interpolation=InterpolationMode(preprocess.get("interpolation", "bilinear")),
        )
        self.crop_size = list(crop) if isinstance(crop, (list, tuple)) else [crop]
        self.resize_size = list(resize) if isinstance(resize, (list, tuple)) else [resize]
        self.channels = len(preprocess["mean"])

    def forward(self, img: Tensor) -> Tensor:
        if torch.jit.is_scripting():
            img = _tensor_channels(img, self.channels)
        else:
            img = ConvertChannels(self.channels)(img)  # PIL images of any mode too
        img = F.resize(img, self.resize_size, interpolation=self.interpolation, antialias=self.antialias)
        img = F.center_crop(img, self.crop_size)
        if not isinstance(img, Tensor):
            img = F.pil_to_tensor(img)
        img = F.convert_image_dtype(img, torch.float)
        return F.normalize(img, mean=self.mean, std=self.std)


def _tensor_channels(img: Tensor, channels: int) -> Tensor:
    """An image tensor (..., C, H, W) of 1, 3 or 4 channels brought to ``channels``, as
    `ConvertChannels` does (luminance, repetition, alpha dropped or added), for TorchScript."""
    have = img.shape[-3]
    if have == channels:
        return img
    rgb = img[..., :3, :, :] if have == 4 else img
    if have == 1:
        rgb = torch.cat([img, img, img], dim=-3)
    if channels == 1:
        return F.rgb_to_grayscale(rgb)
    if channels == 3:
        return rgb
    opaque = torch.full_like(rgb[..., :1, :, :], 255 if rgb.dtype == torch.uint8 else 1)
    return torch.cat([rgb, opaque], dim=-3)


def get_model_weights(name: str | Callable[..., nn.Module]) -> type[ModelWeights]:
    """The weights enum of an architecture (``zoo.get_model_weights("resnet50").IMAGENET1K_V2``)
    or of its builder, the same class for the same entries on every call; ``DEFAULT`` is
    torchvision's DEFAULT for weights republished from torchvision, else zoo's default entry. An
    architecture without weights has an enum without members, as torchvision's do."""
    arch = _architecture_of(name if isinstance(name, str) else name.__name__)
    members = torchvision_weights.members(arch)
    if not members:
        return _weights_enum(torchvision_weights.enum_name(arch), ())
    default = torchvision_weights.default_entry(arch).name
    pairs = tuple((member, info.name) for member, info in members.items()) + ((torchvision_weights.DEFAULT, default),)
    return _weights_enum(torchvision_weights.enum_name(arch), pairs)


def _architecture_of(name: str) -> str:
    """The architecture whose weights ``name`` asks for (an architecture, ``arch.tag`` or
    torchvision's name of weights), resolved once; a folder or Hub repository holds weights of
    its own, in no enum, and is refused by name."""
    source = resolve(name)
    if isinstance(source, Registered):
        return source.arch
    holder = "the repository's" if isinstance(source, HubRepository) else "the folder's"
    raise InvalidArgumentError(
        f"{name!r}: its weights are {holder} own, in no weights enum; get_model_weights takes an "
        f"architecture or a weight name such as 'resnet50' (zoo.load({name!r}) loads these)"
    )


_ENUMS: dict[tuple[str, tuple[tuple[str, str], ...]], type[ModelWeights]] = {}


def _weights_enum(class_name: str, members: tuple[tuple[str, str], ...]) -> type[ModelWeights]:
    """The enum class, made once per set of members and bound in this module under its name
    (the one `get_model_weights` gave last), where pickle finds it."""
    enum = _ENUMS.get((class_name, members))
    if enum is None:
        enum = ModelWeights(class_name, members, module=__name__, qualname=class_name)  # DEFAULT: an alias
        _ENUMS[class_name, members] = enum
    globals()[class_name] = enum
    return enum


def get_weight(name: str) -> ModelWeights:
    """The member a qualified name means, as torchvision's ``get_weight``:
    ``zoo.get_weight("ResNet50_Weights.IMAGENET1K_V2")`` (``DEFAULT`` included)."""
    class_name, dot, member = name.partition(".") if isinstance(name, str) else ("", "", "")
    if not dot or not class_name.endswith("_Weights"):
        raise InvalidArgumentError(
            f"get_weight takes 'EnumName_Weights.MEMBER' (e.g. 'ResNet50_Weights.DEFAULT'), got {name!r}"
        )
    enum = _enum_named(class_name)
    if member not in enum.__members__:
        known = ", ".join(enum.__members__) or "none"
        raise UnknownModelError(f"{class_name} has no member {member!r}; its members: {known}")
    return enum[member]


def _enum_named(class_name: str) -> type[ModelWeights]:
    """The weights enum of the architecture whose enum is called ``class_name``."""
    for arch in weight_entries.list_models():
        if torchvision_weights.enum_name(arch) == class_name:
            return get_model_weights(arch)
    raise UnknownModelError(f"no architecture of zoo's has weights called {class_name}")


def __getattr__(name: str) -> Any:
    """A weights enum class by name (``ResNet50_Weights``), made on first use: how unpickling
    finds one in a process that has not asked for it yet."""
    if name.endswith("_Weights") and not name.startswith("_"):
        try:
            return _enum_named(name)
        except UnknownModelError:
            pass
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")  # internal: PEP 562's __getattr__ protocol


def get_model(name: str, weights: str | os.PathLike | Enum | None = None, **kwargs: Any) -> nn.Module:
    """The architecture ``name`` (or any name `zoo.load` takes) with ``weights`` (torchvision's
    names, a zoo enum member, a file or a URL), or freshly initialised without; ``kwargs`` go to
    `zoo.load`. Unlike torchvision the model comes back in eval mode; call ``.train()`` to train it."""
    return build.load(name, pretrained=weights is not None, weights=weights, **kwargs)
