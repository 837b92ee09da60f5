"""Griffe extension: the subpackages that pyproject.toml maps to folders outside zoo/ through
setuptools' package-dir (``zoo.architectures`` is architectures/, ``zoo.training`` is
training/) are loaded where Python imports them, as members of the ``zoo`` package.

Griffe finds ``zoo`` itself through the editable install, then walks zoo/ for submodules, so
without this it would not see ``zoo.architectures`` (``register_model``) at all. mkdocs.yml
names this file under the python handler's ``extensions``.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import griffe

ROOT = Path(__file__).resolve().parent.parent


def mapped_subpackages(package: str) -> dict[str, Path]:
    """``{name: folder}`` of the package-dir entries that are direct subpackages of ``package``."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    package_dir = config["tool"]["setuptools"].get("package-dir", {})
    prefix = package + "."
    return {
        name[len(prefix) :]: ROOT / folder
        for name, folder in package_dir.items()
        if name.startswith(prefix) and "." not in name[len(prefix) :] and (ROOT / folder / "__init__.py").is_file()
    }


class PackageDir(griffe.Extension):
    """Load pyproject's package-dir subpackages into their parent package."""

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        for name, folder in mapped_subpackages(pkg.name).items():
            if name in pkg.members:
                continue
            # Loaded as a top-level package from its own folder, then moved under `pkg`:
            # its objects' paths follow their parent (zoo.architectures.register_model).
            sub = griffe.load(
                folder.name,
                search_paths=[str(folder.parent)],
                docstring_parser=loader.docstring_parser,
                docstring_options=loader.docstring_options,
                allow_inspection=False,
            )
            sub.name = name
            pkg.set_member(name, sub)
