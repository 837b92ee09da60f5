"""Key converters: each turns a publisher's state dict into zoo's layout for one family.
Weight entries name their converter; families with a foreign layout register one here."""
from __future__ import annotations

from collections.abc import Callable

import torch

StateDict = dict[str, torch.Tensor]
Converter = Callable[[StateDict], StateDict]

_converters: dict[str, Converter] = {}


def register_converter(name: str) -> Callable[[Converter], Converter]:
    def register(fn: Converter) -> Converter:
        if name in _converters:
            raise ValueError(f"converter {name!r} is registered twice")
        _converters[name] = fn
        return fn

    return register


def convert_state_dict(converter: str, state_dict: StateDict) -> StateDict:
    """Apply the named converter; converters must leave already-converted keys alone."""
    if converter not in _converters:
        raise ValueError(f"unknown converter {converter!r}; known: {', '.join(sorted(_converters))}")
    return _converters[converter](state_dict)


@register_converter("identity")
def identity(state_dict: StateDict) -> StateDict:
    """The publisher's layout is zoo's (torchvision and timm ResNets)."""
    return state_dict
