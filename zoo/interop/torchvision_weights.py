"""torchvision's names for weights, resolved to zoo's entries, so that code written for
torchvision (``weights="IMAGENET1K_V2"``, ``"DEFAULT"``, ``"ResNet50_Weights.IMAGENET1K_V1"`` or
the enum member ``ResNet50_Weights.IMAGENET1K_V2`` itself) loads the same file through zoo.

The mapping is data: an entry that republishes torchvision's weights names them in its
``torchvision_weights`` field. Every entry also gets a member name of its own (torchvision's, else
its tag in capitals: ``resnet20.fmnist`` -> ``FMNIST``), so `zoo.get_model_weights` covers all."""

from __future__ import annotations

import os
import re
from enum import Enum
from typing import Any

from zoo.errors import InvalidArgumentError, UnknownModelError
from zoo.store import weight_entries
from zoo.store.weight_entries import WeightInfo

DEFAULT = "DEFAULT"
_MEMBER = re.compile(r"[A-Z][A-Z0-9_]*")
_QUALIFIED = re.compile(r"([A-Za-z][A-Za-z0-9_]*_Weights)\.([A-Z][A-Z0-9_]*)")


def enum_name(arch: str) -> str:
    """The class name of an architecture's weights enum: torchvision's where its entries name one
    (``ResNet50_Weights``), else one made from the architecture (``Resnet20_Weights``)."""
    named = sorted(
        {w.torchvision_weights.split(".")[0] for w in weight_entries.weights_for(arch) if w.torchvision_weights}
    )
    return named[0] if named else f"{arch.title().replace('_', '')}_Weights"


def member_name(info: WeightInfo) -> str:
    """The entry's member name: torchvision's (``IMAGENET1K_V2``), else its tag in capitals."""
    return info.torchvision_weights.split(".")[1] if info.torchvision_weights else info.tag.upper()


def members(arch: str) -> dict[str, WeightInfo]:
    """Every entry of an architecture under its member name, sorted by name as torchvision lists them."""
    named: dict[str, WeightInfo] = {}
    for info in weight_entries.weights_for(arch):
        other = named.setdefault(member_name(info), info)
        if other is not info:
            raise InvalidArgumentError(
                f"weights {other.name} and {info.name} both answer to {member_name(info)}: "
                "give one of them another tag or torchvision_weights"
            )
    return dict(sorted(named.items()))


def default_entry(arch: str) -> WeightInfo:
    """What ``DEFAULT`` means: torchvision's DEFAULT for an architecture whose entries come from
    torchvision (zoo may choose another default entry), zoo's default entry for the others."""
    entries = members(arch)
    if not entries:
        raise weight_entries.no_pretrained_weights(arch)
    published = _torchvision_enum(enum_name(arch)) if any(w.torchvision_weights for w in entries.values()) else None
    if published is None:
        return weight_entries.weights_for(arch)[0]
    chosen = published.DEFAULT.name
    if chosen not in entries:
        raise UnknownModelError(
            f"torchvision's {enum_name(arch)}.DEFAULT is {chosen}, which zoo has no entry for; "
            f"zoo has {_listing(arch)}: pass one of these as weights="
        )
    return entries[chosen]


def weights_entry(name: str, arch: str, weights: Any) -> WeightInfo | None:
    """The entry that ``weights=`` names in torchvision's terms for the model ``name`` (``arch``
    or ``arch.tag``, of the architecture ``arch``), or None when ``weights`` is a file, a URL or nothing of the kind.

    A torchvision name zoo has no entry for, or weights of another architecture, raise an error
    that lists the names this architecture has."""
    wanted = _torchvision_name(weights)
    if wanted is None:
        return None
    enum_class, member = wanted
    own_class = enum_name(arch)
    if enum_class not in (None, own_class):
        owners = [
            a for a in weight_entries.list_models() if weight_entries.weights_for(a) and enum_name(a) == enum_class
        ]
        if owners:
            problem = f"are {' and '.join(owners)}'s weights, not {arch}'s: load {owners[0]!r} with them"
        elif _torchvision_enum(enum_class) is not None:
            problem = "are torchvision's weights of a model that zoo has no entries for"
        else:
            problem = "is not a file, a URL, or weights that zoo or torchvision knows"
        raise InvalidArgumentError(
            f"weights={_shown(weights)} {problem}; {arch}'s weights are {_listing(arch) or 'none'}"
        )
    entry = default_entry(arch) if member == DEFAULT else members(arch).get(member)
    if entry is None:
        published = _torchvision_enum(own_class)
        where = (
            "torchvision has it but zoo has no entry for it"
            if published is not None and member in published.__members__
            else "it is not a file, a URL or a weights name of this architecture"
        )
        options = _listing(arch)
        raise UnknownModelError(
            f"weights={_shown(weights)} for {arch!r}: {where}. "
            + (f"zoo has {options}." if options else f"{arch!r} has no pretrained weights; use pretrained=False.")
        )
    if "." in name and entry.name != name:
        raise InvalidArgumentError(
            f"{name!r} and weights={_shown(weights)} ({entry.name}) name different weights: "
            f"pass zoo.load({arch!r}, weights=...) or zoo.load({entry.name!r})"
        )
    return entry


def _torchvision_name(weights: Any) -> tuple[str | None, str] | None:
    """(enum class or None, member) for a torchvision-style name or enum member, else None."""
    if weights is None or isinstance(weights, os.PathLike):
        return None
    if isinstance(weights, Enum):  # torchvision's WeightsEnum members, or zoo's own
        cls = type(weights).__name__
        return (cls, weights.name) if cls.endswith("_Weights") else None
    if not isinstance(weights, str) or "://" in weights or os.path.exists(weights):
        return None
    qualified = _QUALIFIED.fullmatch(weights)
    if qualified:
        return qualified.group(1), qualified.group(2)
    return (None, weights) if _MEMBER.fullmatch(weights) else None


def _torchvision_enum(enum_class: str) -> type[Enum] | None:
    """torchvision's weights enum of that name, or None where this torchvision has none."""
    import torchvision.models  # only here: resolving names needs torchvision's model weight_entries, loading does not

    found = getattr(torchvision.models, enum_class, None)
    return found if isinstance(found, type) and issubclass(found, Enum) else None


def _listing(arch: str) -> str:
    """``ResNet50_Weights.IMAGENET1K_V1 (resnet50.tv_in1k), ...`` for an error message."""
    return ", ".join(f"{enum_name(arch)}.{member} ({w.name})" for member, w in members(arch).items())


def _shown(weights: Any) -> str:
    return repr(weights) if isinstance(weights, str) else f"{type(weights).__name__}.{weights.name}"
