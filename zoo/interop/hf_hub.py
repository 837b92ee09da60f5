"""The Hugging Face Hub as a weight source, through huggingface_hub and its cache.

``hf-hub:ORG/REPO[@REVISION]`` names a repository (a timm-format one, or a folder `zoo.save`
wrote and someone uploaded); ``ORG/REPO[@REVISION]`` as ``weights=`` names a Mixtral-format
checkpoint. Files land in the Hub's own cache (``HF_HUB_CACHE``, else ``$HF_HOME/hub``), read at
call time, so other Hugging Face tools share them. ``HF_HUB_OFFLINE`` or zoo's ``ZOO_OFFLINE``
turns downloads off: cached files still load. ``HF_ENDPOINT`` picks a mirror.

Weight files are checked against the sha256 the Hub publishes for LFS files (huggingface_hub
caches them under that name, and the Hub sends it as ``X-Linked-Etag``). Registered entries pin
a commit and a sha256, or record the digest of their first verified download and refuse any other
file afterwards (``sha256_policy: recorded-at-first-download``).
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import huggingface_hub
from huggingface_hub.errors import (
    EntryNotFoundError,
    GatedRepoError,
    HfHubHTTPError,
    LocalEntryNotFoundError,
    OfflineModeIsEnabled,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)

from zoo.architectures import ARCHS
from zoo.errors import ChecksumError, DownloadError, InvalidArgumentError, WeightsError, WeightsNotFoundError
from zoo.interop.hub_names import WEIGHT_SUFFIXES, HubRepo, endpoint
from zoo.store import download, weight_entries
from zoo.store.files import read_json, write_json
from zoo.store.weight_entries import IMAGENET_MEAN, IMAGENET_STD, WeightInfo

RECORDED_AT_FIRST_DOWNLOAD = "recorded-at-first-download"
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")  # in the order timm looks for them
_COMMIT = re.compile(r"[0-9a-f]{40}")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_TIMM_MODEL_ARGS = ("in_chans",)  # timm model_args zoo's builders take under the same name
_TIMM_ZOO_DEFAULTS = {"global_pool": "avg"}  # timm model_args whose value is what zoo's models always do


def cache_dir() -> Path:
    """The Hub's cache folder, from the environment as it is now (huggingface_hub reads it once,
    at import): ``HF_HUB_CACHE``, ``HUGGINGFACE_HUB_CACHE``, ``$HF_HOME/hub``, then the default."""
    explicit = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE")
    if explicit:
        return Path(os.path.expandvars(explicit)).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join(os.environ.get("XDG_CACHE_HOME", "~/.cache"), "huggingface")
    return Path(os.path.expandvars(home)).expanduser() / "hub"


def download_file(repo: HubRepo, filename: str, *, sha256: str | None = None) -> Path:
    """``filename`` of ``repo`` from the Hub's cache, downloaded there if missing (unless offline),
    checked against ``sha256`` or else the Hub's LFS sha256 of the file."""
    offline = download.is_hf_offline()
    with _hub_errors(repo, filename, offline):
        path = Path(
            huggingface_hub.hf_hub_download(
                repo.repo_id,
                filename,
                revision=repo.revision,
                cache_dir=cache_dir(),
                endpoint=endpoint(),
                local_files_only=offline,
            )
        )
    _verify(path, repo, filename, sha256)
    return path


def download_weights(repo: HubRepo) -> Path:
    """The weight file of a timm-style repository: model.safetensors, else pytorch_model.bin."""
    for filename in WEIGHT_FILES[:-1]:
        try:
            return download_file(repo, filename)
        except WeightsNotFoundError as error:
            if not isinstance(error.__cause__, EntryNotFoundError):
                raise
    return download_file(repo, WEIGHT_FILES[-1])


def download_snapshot(repo: HubRepo, allow_patterns: Sequence[str]) -> Path:
    """The files of ``repo`` matching ``allow_patterns``, as one folder of the Hub's cache (the
    commit's snapshot), downloaded if missing (unless offline); weight files are checked
    against the Hub's LFS sha256."""
    offline = download.is_hf_offline()
    with _hub_errors(repo, None, offline):
        folder = Path(
            huggingface_hub.snapshot_download(
                repo.repo_id,
                revision=repo.revision,
                cache_dir=cache_dir(),
                endpoint=endpoint(),
                allow_patterns=list(allow_patterns),
                local_files_only=offline,
            )
        )
    for path in sorted(folder.rglob("*")):
        if path.suffix in WEIGHT_SUFFIXES:
            _verify(path, HubRepo(repo.repo_id, folder.name), path.relative_to(folder).as_posix(), None)
    return folder


def commit_of(path: Path) -> str:
    """The commit a file of the Hub's cache belongs to (its snapshot folder's name)."""
    parts = Path(path).parts
    return parts[parts.index("snapshots") + 1] if "snapshots" in parts else "unknown"


def fetch_entry_file(entry: WeightInfo) -> Path:
    """The weight file of a registered entry that points at the Hub, at its pinned revision.

    With ``sha256`` the file must have it. With ``sha256_policy: recorded-at-first-download``
    the first download is checked against the Hub's LFS sha256, its commit and digest are
    recorded in ``$ZOO_HOME/hf-pins/``, and every later load uses that commit and refuses a
    file with another digest."""
    if entry.sha256 is None and entry.sha256_policy != RECORDED_AT_FIRST_DOWNLOAD:
        raise WeightsError(
            f'weight entry {entry.name} names no sha256 for {entry.hf_hub}: add its "sha256", or '
            f'"sha256_policy": "{RECORDED_AT_FIRST_DOWNLOAD}" to record the first verified download'
        )
    record_path = download.zoo_home() / "hf-pins" / f"{entry.name}.json"
    record = _read_pin(record_path, entry)
    repo = HubRepo(entry.hf_hub, record["commit"] if record else entry.revision)
    expected = entry.sha256 or (record["sha256"] if record else None)
    path = download_file(repo, entry.hf_file, sha256=expected)
    if entry.sha256 is None and record is None:
        digest = download.verify_file(path, None)
        write_json(
            {
                "repo": entry.hf_hub,
                "revision": entry.revision,
                "commit": commit_of(path),
                "file": entry.hf_file,
                "sha256": digest,
            },
            record_path,
        )
    return path


def _read_pin(path: Path, entry: WeightInfo) -> dict[str, str] | None:
    """The recorded first download of ``entry``, or None before it; a record for another source
    (the entry was edited) is ignored."""
    if not path.exists():
        return None
    record = read_json(path, download.MAX_RECORD_BYTES, fix="delete it to record the download again")
    if not isinstance(record, dict):
        raise WeightsError(f"{path} is not a download record (a JSON object); delete it to record the download again")
    same_source = (record.get("repo"), record.get("revision"), record.get("file")) == (
        entry.hf_hub,
        entry.revision,
        entry.hf_file,
    )
    valid = isinstance(record.get("commit"), str) and _SHA256.fullmatch(str(record.get("sha256")))
    return record if same_source and valid else None


def _verify(path: Path, repo: HubRepo, filename: str, sha256: str | None) -> None:
    """Check a cached Hub file against ``sha256``, else against the LFS sha256 it is cached under;
    a failing file is removed from the cache so the next call downloads it again."""
    blob = path.resolve()
    lfs_sha256 = blob.name if blob.parent.name == "blobs" and _SHA256.fullmatch(blob.name) else None
    expected = sha256 or lfs_sha256
    if expected is None and path.suffix in WEIGHT_SUFFIXES and not download.is_hf_offline():
        expected = _remote_lfs_sha256(repo, filename, commit_of(path))
    try:
        download.verify_file(path, expected)
    except ChecksumError as error:
        path.unlink(missing_ok=True)
        blob.unlink(missing_ok=True)
        raise ChecksumError(
            f"{filename} of {repo.repo_id} (commit {commit_of(path)}) failed verification: {error} "
            "zoo removed it from the Hugging Face cache; load again to download it again, and if it "
            "fails again the repository's file is not the one expected."
        ) from None


def _remote_lfs_sha256(repo: HubRepo, filename: str, commit: str) -> str | None:
    """The sha256 the Hub publishes for an LFS file (its ETag), or None for a plain git file."""
    url = huggingface_hub.hf_hub_url(repo.repo_id, filename, revision=commit, endpoint=endpoint())
    with _hub_errors(repo, filename, offline=False):
        etag = huggingface_hub.get_hf_file_metadata(url, endpoint=endpoint()).etag
    return etag if etag and _SHA256.fullmatch(etag) else None


@contextmanager
def _hub_errors(repo: HubRepo, filename: str | None, offline: bool) -> Iterator[None]:
    """huggingface_hub's errors as zoo errors that name the repository, revision and fix."""
    what = f"{filename} of {repo}" if filename else str(repo)
    http_log = logging.getLogger("huggingface_hub.utils._http")  # its retries, one line each: the error says it once
    level = http_log.level
    http_log.setLevel(logging.ERROR)
    try:
        yield
    except GatedRepoError as error:
        raise WeightsNotFoundError(
            f"{repo.repo_id} is a gated repository: accept its conditions at {repo.page} and log in "
            "(`hf auth login`, or set HF_TOKEN), then load again"
        ) from error
    except RepositoryNotFoundError as error:
        raise WeightsNotFoundError(
            f"no Hugging Face Hub repository {repo.repo_id} at {repo.page} (or it is private): check the "
            "name, or log in (`hf auth login`, or HF_TOKEN) if it is private"
        ) from error
    except RevisionNotFoundError as error:
        raise WeightsNotFoundError(
            f"{repo.repo_id} has no revision {repo.revision!r}: use a branch, tag or commit listed at {repo.page}/commits/main"
        ) from error
    except LocalEntryNotFoundError as error:
        if offline:
            fetch = (
                f"hf download {repo.repo_id}" + (f" {filename}" if filename else "") + f" --revision {repo.revision}"
            )
            raise WeightsNotFoundError(
                f"{what} is not in the Hugging Face cache ({cache_dir()}) and downloads are off "
                f"(HF_HUB_OFFLINE or ZOO_OFFLINE is set): fetch it once online (`{fetch}`, or the same "
                "zoo.load without the offline setting), or point HF_HUB_CACHE at a cache that has it"
            ) from error
        raise DownloadError(
            f"could not reach the Hub ({endpoint() or 'https://huggingface.co'}) for {what}, and it is not "
            f"in the cache ({cache_dir()}): check the connection (or HF_ENDPOINT) and try again"
        ) from error
    except EntryNotFoundError as error:
        raise WeightsNotFoundError(
            f"{repo} has no file {filename}: see the repository's files at {repo.page}/tree/{repo.revision}"
        ) from error
    except (HfHubHTTPError, OfflineModeIsEnabled, OSError) as error:
        raise DownloadError(f"could not download {what} from the Hub: {error}. Try again later.") from error
    finally:
        http_log.setLevel(level)


@dataclass(frozen=True)
class TimmModel:
    """What a timm-format ``config.json`` says, in zoo's terms."""

    arch: str
    num_classes: int
    model_kwargs: dict[str, Any] = field(default_factory=dict)
    preprocess: dict[str, Any] = field(default_factory=dict)
    class_names: list[str] | None = None


def _is_timm_twin(arch: str) -> bool:
    """Whether timm's model ``arch`` has the state dict of zoo's model of the same name (its
    spec's ``timm_checkpoints``), so that timm's weights load unchanged."""
    spec = weight_entries.find_spec(arch)
    return spec is not None and spec.timm_checkpoints


def is_timm_config(config: dict[str, Any]) -> bool:
    """Whether a repository's config.json is timm's (``architecture`` + ``pretrained_cfg``)."""
    return isinstance(config.get("architecture"), str) and isinstance(config.get("pretrained_cfg"), dict)


def timm_model(config: dict[str, Any], source: str) -> TimmModel:
    """Map timm's config.json (``architecture``, ``num_classes``, ``model_args``,
    ``pretrained_cfg``, ``label_names``) to zoo's architecture, options and preprocessing;
    ``source`` names the file in errors."""
    arch = config["architecture"]
    if not _is_timm_twin(arch):
        twins = [name for name, spec in ARCHS.items() if spec.timm_checkpoints]
        raise InvalidArgumentError(
            f"{source} is a timm {arch!r} model, an architecture zoo cannot load from timm weights; "
            f"zoo loads these timm architectures: {', '.join(twins)}"
        )
    model_args = dict(config.get("model_args") or {})
    num_classes = model_args.pop("num_classes", config.get("num_classes", 1000))
    for key, value in _TIMM_ZOO_DEFAULTS.items():
        if model_args.get(key) == value:
            del model_args[key]
    unknown = sorted(f"{k}={model_args[k]!r}" for k in set(model_args) - set(_TIMM_MODEL_ARGS))
    if unknown:
        raise InvalidArgumentError(
            f"{source} builds {arch} with timm options zoo does not have: {', '.join(unknown)}; "
            f"zoo takes only {', '.join(_TIMM_MODEL_ARGS)} from timm's model_args"
        )
    cfg = config["pretrained_cfg"]
    labels = config.get("label_names") or cfg.get("label_names")
    if isinstance(labels, dict):
        labels = [labels[k] for k in sorted(labels, key=int)]
    return TimmModel(arch, num_classes, model_args, timm_preprocess(cfg), list(labels) if labels else None)


def timm_preprocess(cfg: dict[str, Any]) -> dict[str, Any]:
    """zoo's eval preprocessing from timm's pretrained_cfg, as timm's eval transform does it for
    ``crop_mode: center``: resize the short side to ``size / crop_pct`` (floored), centre-crop
    ``size``. Other crop modes (squash, border) have no zoo equivalent: no preprocessing then."""
    if cfg.get("crop_mode", "center") != "center" or "input_size" not in cfg:
        return {}
    channels, height, width = cfg["input_size"]
    crop_pct = cfg.get("crop_pct", 0.875)
    size = height if height == width else [height, width]
    resize = (
        math.floor(height / crop_pct)
        if height == width
        else [math.floor(height / crop_pct), math.floor(width / crop_pct)]
    )
    mean, std = list(cfg.get("mean", IMAGENET_MEAN)), list(cfg.get("std", IMAGENET_STD))
    preprocess = {
        "resize": resize,
        "crop": size,
        "interpolation": cfg.get("interpolation", "bilinear"),
        "mean": mean,
        "std": std,
    }
    return preprocess | ({"channels": channels} if channels != 3 else {})


TIMM_CONFIG_KEYS = ("num_features", "model_args", "pretrained_cfg")  # what `timm_config` adds to zoo's own keys


def timm_config(pretrained_cfg: dict[str, Any], num_features: int) -> dict[str, Any]:
    """timm's config.json keys (``architecture``, ``num_classes``, ``num_features``,
    ``model_args``, ``pretrained_cfg``) for a zoo model, so that timm and the Hub read a folder
    `zoo.save` wrote; {} where timm could not build it (an architecture timm does not share,
    options timm lacks, a feature extractor)."""
    arch, model_kwargs = pretrained_cfg["architecture"], pretrained_cfg.get("model_kwargs") or {}
    if not _is_timm_twin(arch) or set(model_kwargs) - set(_TIMM_MODEL_ARGS) or pretrained_cfg.get("features_only"):
        return {}
    timm_cfg: dict[str, Any] = {"num_classes": pretrained_cfg["num_classes"]}
    preprocess = pretrained_cfg.get("preprocess") or {}
    if "crop" in preprocess and "resize" in preprocess:
        crop, resize = preprocess["crop"], preprocess["resize"]
        height, width = (crop, crop) if isinstance(crop, int) else crop
        timm_cfg |= {
            "input_size": [len(preprocess["mean"]), height, width],
            "crop_pct": height / (resize if isinstance(resize, int) else resize[0]),
            "crop_mode": "center",
            "interpolation": preprocess.get("interpolation", "bilinear"),
            "mean": preprocess["mean"],
            "std": preprocess["std"],
        }
    config = {"architecture": arch, "num_features": num_features, "pretrained_cfg": timm_cfg}
    return config | ({"model_args": dict(model_kwargs)} if model_kwargs else {})


_PIPELINE_TAGS = {  # (input kind, head) -> the Hub's task for the widget and search filters
    ("images", "classification"): "image-classification",
    ("text", "sequence_classification"): "text-classification",
    ("text", "token_classification"): "token-classification",
}


def model_card(pretrained_cfg: dict[str, Any], entry: WeightInfo | None) -> str:
    """A README.md the Hub renders for a folder `zoo.save` wrote: YAML front matter (library,
    tags, license, pipeline, datasets and metrics of the weights' entry) and the entry's card,
    or a short description with the line that loads the model back."""
    arch = pretrained_cfg["architecture"]
    meta: dict[str, Any] = {"library_name": "zoo", "tags": ["zoo", arch]}
    if _is_timm_twin(arch):
        meta["tags"].append("timm")
    if entry is not None and entry.license:
        meta["license"] = entry.license.split(" (")[0].lower()
    task = (
        "text-generation"
        if (arch, pretrained_cfg.get("head")) == ("moe_lm", "lm")
        else _PIPELINE_TAGS.get((weight_entries.input_kind(arch), pretrained_cfg.get("head")))
    )
    if task and not pretrained_cfg.get("features_only"):
        meta["pipeline_tag"] = task
    if entry is not None and entry.metrics:
        meta["datasets"] = sorted({task.split("[")[0] for task in entry.metrics})
        meta["metrics"] = sorted({metric for values in entry.metrics.values() for metric in values})
    front = "\n".join(f"{key}: {json.dumps(value)}" for key, value in meta.items())
    body = entry.card_text() if entry is not None else None
    if body is None:
        weights = pretrained_cfg.get("weights") or "none (random initialisation)"
        body = (
            f"# {arch}\n\nA `{arch}` model saved by zoo: {pretrained_cfg['num_classes']} outputs, "
            f'weights {weights}.\n\n```python\nimport zoo\nmodel = zoo.load("hf-hub:ORG/REPO")  # this repository\n```\n'
        )
    return f"---\n{front}\n---\n{body}"
