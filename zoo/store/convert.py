"""Key converters: each turns a publisher's state dict into zoo's layout for one family.
Weight entries name their converter; families with a foreign layout register one here."""

from __future__ import annotations

import re
from collections.abc import Callable

import torch

from zoo.errors import ConfigFileError, InvalidArgumentError

StateDict = dict[str, torch.Tensor]
Converter = Callable[[StateDict], StateDict]

_converters: dict[str, Converter] = {}


def register_converter(name: str) -> Callable[[Converter], Converter]:
    def register(fn: Converter) -> Converter:
        if name in _converters:
            raise InvalidArgumentError(f"converter {name!r} is registered twice")
        _converters[name] = fn
        return fn

    return register


def convert_state_dict(converter: str, state_dict: StateDict) -> StateDict:
    """Apply the named converter; converters must leave already-converted keys alone."""
    if converter not in _converters:
        raise ConfigFileError(f"unknown converter {converter!r}; known: {', '.join(sorted(_converters))}")
    return _converters[converter](state_dict)


def adapt_input_conv(weight: torch.Tensor, in_chans: int) -> torch.Tensor:
    """Fit a first convolution's [out, in, k, k] filters to ``in_chans`` inputs (timm's rule):
    one channel sums the filters (a gray image then gives the RGB model's output); more
    channels repeat them, scaled so the response keeps its size."""
    old_chans = weight.shape[1]
    if in_chans == 1:
        return weight.sum(dim=1, keepdim=True)
    repeat = -(-in_chans // old_chans)
    return weight.repeat(1, repeat, 1, 1)[:, :in_chans] * (old_chans / in_chans)


@register_converter("identity")
def identity(state_dict: StateDict) -> StateDict:
    """The publisher's layout is zoo's (torchvision and timm ResNets)."""
    return state_dict


_LEGACY_DENSELAYER_KEY = re.compile(
    r"^(.*denselayer\d+\.(?:norm|relu|conv))\.([12]\.(?:weight|bias|running_mean|running_var))$"
)


@register_converter("torchvision_densenet")
def torchvision_densenet(state_dict: StateDict) -> StateDict:
    """torchvision's published DenseNets (2017) predate the ban on dots in module names:
    rename ``denselayerN.norm.1.weight`` to ``denselayerN.norm1.weight`` (the regex of
    torchvision's ``_load_state_dict``). Current keys pass unchanged."""
    return {_LEGACY_DENSELAYER_KEY.sub(r"\1\2", k): v for k, v in state_dict.items()}
