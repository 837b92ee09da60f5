"""Tensor files (``.pt``, ``.npz``, ``.npy``) and in-memory tensors (Fashion-MNIST) as a
`DataSource`: uint8 [N, H, W] or [N, C, H, W] samples are images, anything else feature rows;
every way such a file can be wrong is a `DataError` naming the fix."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from zoo.errors import DataError
from zoo.store.files import check_zip_inflation
from zoo.store.state_dict_files import read_torch_file
from zoo.training.data.source import (
    MAX_CLASS_INDEX,
    DataSource,
    check_class_names,
    check_classes,
    class_counts,
    first_line,
)
from zoo.training.data.targets import read_targets
from zoo.training.data.text.text_rows import plural

_FEATURE_KEYS = (("x", "y"), ("images", "labels"), ("data", "targets"), ("features", "labels"))


class _TensorSamples(Dataset):
    """Rows of a tensor (images as uint8 [C, H, W], or feature vectors), with labels if given."""

    def __init__(
        self, x: torch.Tensor, y: torch.Tensor | None, indices: Sequence[int], transform: Callable[[Any], Any] | None
    ) -> None:
        self.x, self.y, self.indices, self.transform = x, y, list(indices), transform

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, index: int) -> Any:
        i = self.indices[index]
        sample = self.transform(self.x[i]) if self.transform else self.x[i]
        return (sample, self.y[i]) if self.y is not None else sample


_UNSIGNED = {np.dtype(np.uint16), np.dtype(np.uint32), np.dtype(np.uint64)}


def _as_tensor(value: Any, where: str, name: str) -> torch.Tensor:
    """A numeric tensor from a tensor, a numpy array or nested lists of numbers."""
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in "biuf":
            raise DataError(f"{where}: {name} holds {value.dtype} values; expected numbers")
        value = torch.from_numpy(value.astype(np.int64) if value.dtype in _UNSIGNED else value)
    try:
        tensor = torch.as_tensor(value)
    except (TypeError, ValueError, RuntimeError) as error:
        raise DataError(f"{where}: {name} is not a tensor of numbers ({first_line(error)})") from error
    if tensor.is_complex():
        raise DataError(f"{where}: {name} holds complex numbers; expected real numbers")
    return tensor


def tensor_source(
    x: Any,
    y: Any,
    class_names: Any,
    description: str,
    x_name: str = "the samples",
    y_name: str = "the labels",
    task: str = "auto",
) -> DataSource:
    """Samples ``x`` (uint8 [N, H, W] or [N, C, H, W] are images, anything else feature rows)
    with targets ``y`` (or none), checked: one per sample, finite inputs. Classes (``task``
    auto or classification): integer indices 0..K-1, at least two classes; ``regression``:
    finite numbers [N] (standardised for training); ``multi-label``: 0/1 rows [N, K]."""
    x, images = _checked_samples(x, description, x_name)
    counts, fields = None, {}
    if y is not None and task in ("regression", "multi-label"):
        fields = _target_fields(y, class_names, description, len(x), (x_name, y_name), task)
    elif y is not None:
        y, class_names = _checked_labels(y, class_names, description, len(x), (x_name, y_name))
        counts = class_counts(y, class_names)
        check_classes(description, counts, f"the file needs labels of at least two classes under {y_name}")
        fields = {"num_classes": len(class_names), "class_names": class_names, "class_counts": counts, "labels": y}
    if "values" in fields:  # a regression's or multi-label's float targets
        y = fields.pop("values")

    def make_subset(indices: Sequence[int], transform: Callable[[Any], Any] | None) -> Dataset:
        return _TensorSamples(x, y, indices, transform if images else None)

    return DataSource(
        kind="images" if images else "tensors",
        description=f"{description} ({len(x)} samples of shape {tuple(x.shape[1:])})",
        num_samples=len(x),
        make_subset=make_subset,
        in_chans=x.shape[1] if images else None,
        image_size=tuple(x.shape[-2:]) if images else None,
        **({"num_classes": None, "class_names": None} | fields),
    )


def _target_fields(
    y: Any, class_names: Any, description: str, num_samples: int, names: tuple[str, str], task: str
) -> dict[str, Any]:
    """The `DataSource` fields of a regression's values [N] (or [N, 1]) or a multi-label's 0/1
    rows [N, K] (``values``: the float targets per sample), read by `zoo.training.data.targets`."""
    x_name, y_name = names
    y = _as_tensor(y, description, y_name)
    if len(y) != num_samples:
        raise DataError(
            f"{description}: {plural(num_samples, 'sample')} under {x_name} but {plural(len(y), 'label')} under "
            f"{y_name}; they must pair up one to one"
        )
    if task == "regression":
        if y.ndim == 2 and y.shape[1] == 1:
            y = y[:, 0]
        if y.ndim != 1:
            raise DataError(
                f"{description}: {y_name} has shape {tuple(y.shape)}; a regression takes one value per sample"
            )
        rows = [(f"sample {i}", value) for i, value in enumerate(y.double().tolist())]
        targets = read_targets(description, rows, y_name.strip("'"), "regression")
    else:
        if y.ndim != 2 or y.shape[1] < 1:
            raise DataError(
                f"{description}: {y_name} has shape {tuple(y.shape)}; multi-label takes one 0/1 row per sample, [N, labels]"
            )
        names_given = _class_name_list(class_names, description) if class_names is not None else None
        columns = names_given or [str(i) for i in range(y.shape[1])]
        if len(columns) != y.shape[1]:
            raise DataError(
                f"{description}: 'classes' names {len(columns)} labels, and {y_name} has {y.shape[1]} columns"
            )
        rows = [(f"sample {i}", row) for i, row in enumerate(y.tolist())]
        targets = read_targets(description, rows, y_name.strip("'"), "multi-label", columns=columns)
    return {**targets.source_fields(), "values": targets.values, "task_note": targets.note}


def _checked_samples(x: Any, description: str, x_name: str) -> tuple[torch.Tensor, bool]:
    """``x`` as a tensor of samples (grayscale images [N, H, W] get their channel axis), and
    whether they are images; no samples, NaN or infinite values, or channels-last images
    are refused."""
    x = _as_tensor(x, description, x_name)
    if x.ndim == 0 or x.numel() == 0:
        raise DataError(
            f"{description}: {x_name} holds no samples (shape {tuple(x.shape)}); expected one row per sample"
        )
    if x.is_floating_point():
        bad = ~torch.isfinite(x.reshape(len(x), -1)).all(dim=1)
        if bad.any():
            first = int(bad.nonzero()[0])
            raise DataError(
                f"{description}: {x_name} holds NaN or infinite values in {plural(int(bad.sum()), 'sample')} "
                f"(the first is sample {first}); drop or fill them before training"
            )
    images = x.dtype == torch.uint8 and x.ndim in (3, 4)
    if images and x.ndim == 3:
        x = x.unsqueeze(1)  # [N, H, W] grayscale
    if images and x.shape[1] not in (1, 3, 4) and x.shape[-1] in (1, 3, 4):
        raise DataError(
            f"{description}: {x_name} has shape {tuple(x.shape)}, channels last; images are [N, C, H, W]: "
            "save x.permute(0, 3, 1, 2)"
        )
    return x, images


def _checked_labels(
    y: Any, class_names: Any, description: str, num_samples: int, names: tuple[str, str]
) -> tuple[torch.Tensor, list[str]]:
    """``y`` as class indices (long, one per sample, 0..K-1) and the class names: the given
    ones, checked to name every index, or the indices as strings. ``names`` are what the
    samples and the labels are called in the file, for the errors."""
    x_name, y_name = names
    y = _as_tensor(y, description, y_name)
    if y.ndim != 1:
        hint = _matrix_hint(y) if y.ndim == 2 else ""
        raise DataError(
            f"{description}: {y_name} has shape {tuple(y.shape)}; expected a 1-D tensor of class indices, "
            f"one per sample{hint}"
        )
    if len(y) != num_samples:
        raise DataError(
            f"{description}: {plural(num_samples, 'sample')} under {x_name} but {plural(len(y), 'label')} under "
            f"{y_name}; they must pair up one to one"
        )
    if y.is_floating_point():
        raise DataError(
            f"{description}: {y_name} are {y.dtype} numbers; expected integer class indices 0, 1, ... "
            "(save them with .long() / .astype(int))"
        )
    y = y.long()
    if int(y.min()) < 0:
        first = int((y < 0).nonzero()[0])
        raise DataError(f"{description}: {y_name} must be class indices >= 0; sample {first} has {int(y[first])}")
    if int(y.max()) >= MAX_CLASS_INDEX:
        raise DataError(
            f"{description}: {y_name} go up to {int(y.max())}; expected class indices 0..K-1 (renumber them)"
        )
    if class_names is None:
        return y, [str(i) for i in range(int(y.max()) + 1)]
    class_names = _class_name_list(class_names, description)
    if int(y.max()) >= len(class_names):
        raise DataError(
            f"{description}: {y_name} go up to {int(y.max())} but 'classes' names "
            f"{plural(len(class_names), 'class')}; name one class per index 0..{int(y.max())}"
        )
    return y, class_names


def _matrix_hint(y: torch.Tensor) -> str:
    """What a [N, K] target looks like, and its fix: 0/1 rows with one 1 each are one-hot classes
    (save ``y.argmax(1)``), other 0/1 rows multi-hot labels (``--task multi-label``), rows of
    probabilities that sum to 1 soft classes (``y.argmax(1)``); anything else gets no guess."""
    if y.numel() == 0 or y.is_complex():
        return ""
    values = y.double()
    if bool(((values == 0) | (values == 1)).all()):
        if bool((values.sum(1) == 1).all()):
            return " (one-hot rows: save y.argmax(1), the class of each)"
        return " (rows of 0s and 1s, several 1s or none in a row: one 0/1 column per label; pass --task multi-label)"
    if bool((values >= 0).all()) and torch.allclose(values.sum(1), torch.ones(len(values), dtype=torch.float64)):
        return " (rows of class probabilities? save y.argmax(1), the most probable class of each)"
    return ""


def _class_name_list(names: Any, where: str) -> list[str]:
    """The class names a file gives under 'classes': distinct printable strings, bounded."""
    if isinstance(names, np.ndarray):
        names = names.tolist()
    return check_class_names(where, names)


def _load_tensor_file(path: Path) -> Any:
    """What a tensor file holds: ``.pt`` through zoo's one torch file reader (weights only:
    tensors, lists, dicts; no arbitrary objects), ``.npz``/``.npy`` through numpy without pickles."""
    suffix = path.suffix.lower()
    if not path.is_file():
        raise DataError(f"{path} is not a file (a folder, a FIFO or a device); expected a {suffix} file")
    if path.stat().st_size == 0:
        raise DataError(f"{path} is empty (0 bytes); expected a {suffix} file of samples and labels")
    if suffix not in (".npz", ".npy"):
        fix = "write it with torch.save({'x': ..., 'y': ...}, path)"
        return read_torch_file(path, DataError, fix, kind=f"{suffix} tensor file")
    if suffix == ".npz":
        check_zip_inflation(path, DataError, "save it uncompressed with numpy.savez(path, x=..., y=...)")
    try:
        loaded = np.load(path, allow_pickle=False)
        if isinstance(loaded, np.lib.npyio.NpzFile):
            with loaded:
                return {name: loaded[name] for name in loaded.files}
        return loaded
    except Exception as error:  # zip, pickle and format errors of all kinds
        raise DataError(
            f"{path} cannot be read as a {suffix} tensor file ({first_line(error).split('. ')[0]}); "
            "write it with numpy.savez(path, x=..., y=...)"
        ) from error


def tensor_file_source(path: Path, task: str = "auto") -> DataSource:
    """``.pt``: a tensor, an (x, y) pair or a dict with x/y (images/labels, data/targets,
    features/labels, plus optional class names under ``classes``); ``.npz``: arrays under
    those names; ``.npy``: one array of unlabelled samples."""
    content = _load_tensor_file(path)
    class_names = None
    if isinstance(content, (torch.Tensor, np.ndarray)):
        x, y, x_name, y_name = content, None, "the samples", "the labels"
    elif isinstance(content, (tuple, list)) and len(content) == 2:
        (x, y), x_name, y_name = content, "the samples (first item)", "the labels (second item)"
    elif isinstance(content, dict):
        pairs = ", ".join(f"{a}/{b}" for a, b in _FEATURE_KEYS)
        keys = next((k for k in _FEATURE_KEYS if k[0] in content), None)
        if keys is None:
            raise DataError(
                f"{path}: expected the samples and labels under one of the key pairs {pairs}, "
                f"found {sorted(map(str, content))}"
            )
        x, y = content[keys[0]], content.get(keys[1])
        x_name, y_name = repr(keys[0]), repr(keys[1])
        unused = sorted(map(str, set(content) - {*keys, "classes"}))
        if y is None and unused:
            raise DataError(
                f"{path}: samples under {keys[0]!r} but no labels under {keys[1]!r}, and {unused} are not read; "
                f"save the labels under {keys[1]!r} (the key pairs are {pairs})"
            )
        class_names = content.get("classes")
    else:
        kind = f"a list of {len(content)} items" if isinstance(content, (tuple, list)) else type(content).__name__
        raise DataError(f"{path}: expected a tensor, an (x, y) pair or a dict of tensors, got {kind}")
    return tensor_source(x, y, class_names, str(path), x_name, y_name, task)
