"""Names of Hugging Face Hub repositories, without importing huggingface_hub: ``hf-hub:ORG/REPO
[@REVISION]`` as a model name, ``ORG/REPO[@REVISION]`` as ``weights=``, and the endpoint a
repository's page is on. Resolving a name reads these; `zoo.interop.hf_hub` downloads."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from zoo.errors import InvalidArgumentError

HUB_PREFIX = "hf-hub:"
_REPO_REF = re.compile(r"(?P<repo>[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*)(?:@(?P<revision>[\w./-]+))?")
WEIGHT_SUFFIXES = (".safetensors", ".pth", ".pt", ".bin", ".ckpt")


def endpoint() -> str | None:
    """``HF_ENDPOINT`` as it is now (None: huggingface_hub's default)."""
    return (os.environ.get("HF_ENDPOINT") or "").rstrip("/") or None


@dataclass(frozen=True)
class HubRepo:
    """A model repository on the Hub at a revision (branch, tag or commit)."""

    repo_id: str
    revision: str = "main"

    def __str__(self) -> str:
        return f"{self.repo_id}@{self.revision}"

    @property
    def page(self) -> str:
        return f"{endpoint() or 'https://huggingface.co'}/{self.repo_id}"


def is_hub_name(name: object) -> bool:
    """Whether ``name`` is an ``hf-hub:`` model name."""
    return isinstance(name, str) and name.startswith(HUB_PREFIX)


def parse_hub_name(name: str) -> HubRepo:
    """``hf-hub:ORG/REPO[@REVISION]`` as a HubRepo."""
    return parse_repo(name.removeprefix(HUB_PREFIX), f"model name {name!r}")


def parse_repo(text: str, what: str) -> HubRepo:
    """``ORG/REPO[@REVISION]`` as a HubRepo; ``what`` names the argument in the error."""
    match = _REPO_REF.fullmatch(text)
    if match is None:
        raise InvalidArgumentError(
            f"{what} is not a Hugging Face Hub repository: write ORG/REPO or ORG/REPO@REVISION "
            "(e.g. hf-hub:timm/resnet50.a1_in1k@main)"
        )
    return HubRepo(match["repo"], match["revision"] or "main")


def is_repo_reference(weights: object) -> bool:
    """Whether ``weights=`` means a Hub repository: shaped ``ORG/REPO[@REVISION]``, not an existing
    path, not a URL and not a weight file name (a missing file keeps its own error)."""
    if not isinstance(weights, str) or "://" in weights or Path(weights).expanduser().exists():
        return False
    return _REPO_REF.fullmatch(weights) is not None and not weights.endswith(WEIGHT_SUFFIXES)
