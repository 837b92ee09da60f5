"""Building an architecture and filling it from a state dict: on the meta device, with the
first convolution adapted to ``in_chans``, a head replaced on request, and a mismatch named key by key."""

from __future__ import annotations

import hashlib
import os
import urllib.parse
import urllib.request
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn

from zoo.errors import InvalidArgumentError, WeightsMismatchError, WeightsNotFoundError
from zoo.store import download
from zoo.store.convert import StateDict, adapt_input_conv, convert_state_dict
from zoo.store.state_dict_files import load_state_dict_file
from zoo.store.weight_entries import WeightInfo

CONFIG_FILE = "config.json"  # what marks a folder written by zoo.save


def read_weights(entry: WeightInfo | None, weights: str | os.PathLike | None) -> StateDict:
    """The state dict from the entry's verified source, or from the ``weights`` override."""
    if weights is not None:
        source = str(weights)
        if source.startswith(("http://", "https://")):
            url_id = hashlib.sha256(source.encode()).hexdigest()[:12]
            path = download.fetch_state_dict(source, sha256=None, filename=f"{url_id}-{_url_basename(source)}")
        else:
            path = _local_weights_path(source)
    elif entry.url is not None:
        suffix = Path(_url_basename(entry.url)).suffix
        path = download.fetch_state_dict(entry.url, sha256=entry.sha256, filename=f"{entry.name}{suffix}")
    elif entry.hf_hub is not None:
        from zoo.interop import hf_hub  # huggingface_hub only for the entries it serves

        path = hf_hub.fetch_entry_file(entry)
    else:
        path = Path(str(resources.files("zoo.weights").joinpath(entry.file)))
        download.verify_file(path, entry.sha256)
    state_dict = load_state_dict_file(path)
    if entry is None or entry.converter == "identity":
        return state_dict
    return convert_state_dict(entry.converter, state_dict)


def _local_weights_path(source: str) -> Path:
    """The file named by ``weights=``: a path or a ``file://`` URL."""
    scheme = urllib.parse.urlsplit(source).scheme
    if len(scheme) > 1 and scheme != "file":  # one letter is a Windows drive
        raise InvalidArgumentError(
            f"weights={source!r}: zoo fetches http://, https:// and file:// URLs, not {scheme}://; "
            "download the file and pass its path"
        )
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


def classifier_keys(model: nn.Module) -> set[str]:
    classifier = model.get_classifier()
    for prefix, module in model.named_modules():
        if module is classifier:
            return {f"{prefix}.{k}" for k in module.state_dict()}
    return set()


def build_with_state_dict(
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
        model = build_architecture(builder, kwargs, builder.__name__)
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
    mismatched = sorted(k for k in expected.keys() & state_dict.keys() if expected[k].shape != state_dict[k].shape)
    head_keys = classifier_keys(model)
    if fresh_head or (num_classes is not None and mismatched and set(mismatched) <= head_keys):
        model.reset_classifier(num_classes)
        state_dict = {k: v for k, v in state_dict.items() if k not in head_keys}
        missing, mismatched = sorted(set(missing) - head_keys), []
        expected = {k: v for k, v in expected.items() if k not in head_keys}
    if missing or unexpected or mismatched:
        raise WeightsMismatchError(mismatch_message(missing, unexpected, mismatched, expected, state_dict))
    _check_finite(model, state_dict)
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


def _check_finite(model: nn.Module, state_dict: StateDict) -> None:
    """Refuse weights whose parameters hold NaN or infinity: such a model would answer NaN."""
    parameters = {name for name, _ in model.named_parameters(remove_duplicate=False)}
    bad = sorted(
        k
        for k in parameters & state_dict.keys()
        if state_dict[k].is_floating_point() and not torch.isfinite(state_dict[k]).all()
    )
    if bad:
        more = f" and {len(bad) - 5} more" if len(bad) > 5 else ""
        raise WeightsMismatchError(
            f"the weights hold NaN or infinite values in {', '.join(bad[:5])}{more}: the "
            "file is corrupt or training diverged; use another checkpoint"
        )


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


def mismatch_message(
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


def build_architecture(builder: Callable[..., nn.Module], kwargs: dict[str, Any], arch: str) -> nn.Module:
    """``builder(**kwargs)``, with an option the architecture does not take refused by name."""
    try:
        return builder(**kwargs)
    except TypeError as error:
        if "unexpected keyword argument" not in str(error):
            raise
        name = str(error).rsplit("argument", 1)[-1].strip(" '\"")
        raise InvalidArgumentError(
            f"{arch} takes no option {name!r}: remove {name}=... from the call "
            f"(its options: help(zoo.store.weight_entries.get_builder({arch!r})))"
        ) from None
