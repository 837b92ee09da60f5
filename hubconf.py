"""torch.hub entry points for zoo, one per registered architecture, made from zoo's registry
when torch.hub imports this file::

    torch.hub.list("path/to/zoo", source="local")
    torch.hub.help("path/to/zoo", "resnet50", source="local")
    model = torch.hub.load("path/to/zoo", "resnet20", source="local", pretrained=True)
    model = torch.hub.load("path/to/zoo", "resnet50", source="local", weights="IMAGENET1K_V2")

Each entry point is ``zoo.load(arch, pretrained=pretrained, **kwargs)``: verified weights,
``weights=`` in torchvision's names, ``num_classes=``, ``in_chans=``, ``features_only=``...

zoo need not be installed. A checkout keeps zoo's subpackages in folders at the repository root
(``architectures/`` is ``zoo.architectures``, as pyproject.toml's package-dir maps them), so
this file tells Python that mapping, then imports zoo from this checkout. A zoo imported
earlier in the same process is used as it is.
"""

from __future__ import annotations

import importlib.abc as _importlib_abc
import importlib.machinery as _importlib_machinery
import importlib.util as _importlib_util
import sys as _sys
import tomllib as _tomllib
from collections.abc import Callable as _Callable
from pathlib import Path as _Path

# Import names (torch.hub checks them with find_spec) of what importing zoo and loading need.
dependencies = [
    "torch",
    "torchvision",
    "torch_geometric",
    "safetensors",
    "filelock",
    "tqdm",
    "PIL",
    "numpy",
    "huggingface_hub",
]

_ROOT = _Path(__file__).resolve().parent


class _CheckoutFinder(_importlib_abc.MetaPathFinder):
    """Finds zoo's packages in their checkout folders (pyproject.toml's package-dir)."""

    def __init__(self, folders: dict[str, _Path]) -> None:
        self.folders = folders

    def find_spec(
        self, fullname: str, path: object = None, target: object = None
    ) -> _importlib_machinery.ModuleSpec | None:
        folder = self.folders.get(fullname)
        if folder is None:
            return None
        return _importlib_util.spec_from_file_location(
            fullname, folder / "__init__.py", submodule_search_locations=[str(folder)]
        )


def _import_zoo_from_checkout() -> None:
    missing = [name for name in dependencies if _importlib_util.find_spec(name) is None]
    if missing:
        raise ImportError(
            f"zoo's torch.hub entry points need {', '.join(missing)}, which this Python lacks: "
            f"install zoo with its dependencies (pip install {_ROOT}), then call torch.hub again"
        )
    package_dir = _tomllib.loads((_ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    _sys.meta_path.insert(0, _CheckoutFinder({name: _ROOT / folder for name, folder in package_dir.items()}))


if "zoo" not in _sys.modules:
    _import_zoo_from_checkout()

import torch.nn as _nn  # noqa: E402

import zoo  # noqa: E402  (after the checkout's packages are findable)
from zoo.interop import torchvision_weights as _torchvision_names  # noqa: E402
from zoo.store import weight_entries as _weight_entries  # noqa: E402


def _describe(arch: str) -> str:
    """The entry point's help: what the architecture is, and the weights it can load."""
    summary = (_weight_entries.get_builder(arch).__doc__ or arch).strip()
    entries = _weight_entries.weights_for(arch)
    if not entries:
        weights = "No pretrained weights yet: pretrained=True raises, pass weights=FILE for your own."
    else:
        names = ", ".join(f"{member} ({info.name})" for member, info in _torchvision_names.members(arch).items())
        weights = (
            f"pretrained=True loads {entries[0].name}; weights= takes {names}, DEFAULT, or a file or URL of your own."
        )
    return (
        f"{summary}\n\n{weights}\nOther keyword arguments go to zoo.load "
        f"(num_classes=, in_chans=, features_only=, device=, dtype=, ...); see help(zoo.load)."
    )


def _entry_point(arch: str) -> _Callable[..., _nn.Module]:
    def entry(pretrained: bool = False, **kwargs: object) -> _nn.Module:
        return zoo.load(arch, pretrained=pretrained, **kwargs)

    entry.__name__ = entry.__qualname__ = arch
    entry.__doc__ = _describe(arch)
    return entry


for _arch in zoo.list_models():
    globals()[_arch] = _entry_point(_arch)
