"""Users' data on disk, read and checked before any model is built: image folders, text,label
files (.csv, .jsonl), tensor files (.pt, .npz, .npy), Fashion-MNIST and PyG datasets, each as a
`DataSource` (kind, classes and their counts, channels, image size) that `DataSource.split` turns
into seeded training and validation datasets. A file a user can get wrong raises `DataError`
naming the file (and line) and the fix."""
from __future__ import annotations

import math
import os
import re
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from PIL import Image
from torch.utils.data import Dataset
from torchvision.datasets.folder import IMG_EXTENSIONS

from zoo.errors import DataError
from zoo.tokenizer import ByteTokenizer
from zoo.training.data import FASHION_MNIST_CLASSES, load_fashion_mnist
from zoo.training.text_rows import csv_rows, decode_text, jsonl_rows, plural


_FEATURE_KEYS = (("x", "y"), ("images", "labels"), ("data", "targets"), ("features", "labels"))



@dataclass
class DataSource:
    """A labelled (or, for tensors, unlabelled) dataset on disk, described before any model
    is built: what the model must fit (classes, channels, image size) and how to batch it.
    `split` turns it into training and validation datasets; ``class_counts`` (samples per
    class name, in class order) and `describe_classes` are there for the caller to show."""

    kind: Literal["images", "tensors", "text", "graphs"]
    description: str
    num_samples: int
    num_classes: int | None
    class_names: list[str] | None
    make_subset: Callable[[Sequence[int], Callable[[Any], Any] | None], Dataset]
    in_chans: int | None = None  # image channels, or node features of graphs
    image_size: tuple[int, int] | None = None
    collate_fn: Callable[[list[Any]], Any] | None = None
    class_counts: dict[str, int] | None = None  # samples of each class, in class_names order
    labels: Sequence[int] | torch.Tensor | None = None  # each sample's class index, in file order

    def describe_classes(self) -> str:
        """One line for the caller to print before training, e.g. ``3 classes: ant (6), bee (6), cow (5)``."""
        if self.class_counts is None:
            return "unlabelled" if self.num_classes is None else f"{self.num_classes} classes"
        counts = ", ".join(f"{name} ({count})" for name, count in self.class_counts.items())
        return f"{len(self.class_counts)} classes: {counts}"

    def split(
        self,
        val_fraction: float = 0.1,
        seed: int = 0,
        train_transform: Callable[[Any], Any] | None = None,
        eval_transform: Callable[[Any], Any] | None = None,
        limit: int | None = None,
    ) -> tuple[Dataset, Dataset | None]:
        """Training and validation datasets from one fixed-seed shuffle of the samples (the
        same seed gives the same split); ``limit`` keeps that many training samples.

        The hold-out is drawn from all samples, not per class: a class with fewer samples
        than `samples_needed` (val_fraction) gets a warning (its validation accuracy rests on
        very few samples), and a class whose every sample lands in validation is refused
        with `DataError` (nothing of it would be trained on)."""
        if not 0.0 <= val_fraction < 1.0:
            raise ValueError(f"val_fraction must be in [0, 1), got {val_fraction}")
        order = torch.randperm(self.num_samples, generator=torch.Generator().manual_seed(seed)).tolist()
        num_val = round(self.num_samples * val_fraction)
        if val_fraction > 0 and num_val == 0:
            num_val = 1
        val_indices, train_indices = order[:num_val], order[num_val:]
        if val_indices and train_indices:
            self._check_hold_out(train_indices, val_fraction, seed)
        if limit is not None:
            if limit <= 0:
                raise ValueError(f"limit must be a positive number of samples, got {limit}")
            train_indices = train_indices[:limit]
        if not train_indices:
            raise DataError(
                f"{self.description}: no training samples left after holding out {num_val} for validation; "
                "add samples or lower --val-fraction"
            )
        train = self.make_subset(train_indices, train_transform)
        val = self.make_subset(val_indices, eval_transform) if val_indices else None
        return train, val

    def _check_hold_out(self, train_indices: list[int], val_fraction: float, seed: int) -> None:
        """Refuse classes the hold-out leaves without training samples; warn about classes
        too small for the hold-out to hold one of them on average."""
        if self.labels is None or not self.class_names:
            return
        labels = torch.as_tensor(self.labels, dtype=torch.long)
        num_classes = len(self.class_names)
        total = torch.bincount(labels, minlength=num_classes).tolist()
        train = torch.bincount(labels[torch.tensor(train_indices)], minlength=num_classes).tolist()
        need = samples_needed(val_fraction)
        held = f"the validation hold-out (val_fraction {val_fraction}, seed {seed})"
        starved = [c for c in range(num_classes) if total[c] and not train[c]]
        if starved:
            listed = ", ".join(f"{self.class_names[c]!r} ({plural(total[c], 'sample')})" for c in starved)
            raise DataError(
                f"{self.description}: {held} takes every sample of {'class' if len(starved) == 1 else 'classes'} "
                f"{listed}, leaving none to train on; "
                f"at val_fraction {val_fraction} each class needs at least {need} samples: add samples of "
                f"that class, lower --val-fraction, or pass separate validation data (--val-data)"
            )
        few = [c for c in range(num_classes) if 0 < total[c] < need]
        if few:
            listed = ", ".join(
                f"{self.class_names[c]!r} ({plural(total[c], 'sample')}, {total[c] - train[c]} in validation)"
                for c in few
            )
            subject = f"class {listed} has" if len(few) == 1 else f"classes {listed} have"
            warnings.warn(
                f"{self.description}: {subject} fewer than the {need} samples that {held} needs to hold out one "
                "of each class on average: their validation accuracy rests on very few samples",
                stacklevel=3,
            )

    def full(self, transform: Callable[[Any], Any] | None = None) -> Dataset:
        """Every sample, in file order (e.g. a separate validation set)."""
        return self.make_subset(range(self.num_samples), transform)


def samples_needed(val_fraction: float) -> int:
    """Samples a class needs so that a random hold-out of ``val_fraction`` puts one of them in
    validation and leaves one for training, on average (10 at 0.1, 4 at 0.25, 2 at 0.5)."""
    if val_fraction <= 0:
        return 1
    return max(2, math.ceil(round(1 / val_fraction, 9)), math.ceil(round(1 / (1 - val_fraction), 9)))


def _class_counts(labels: torch.Tensor, class_names: list[str]) -> dict[str, int]:
    counts = torch.bincount(labels, minlength=len(class_names)).tolist()
    return dict(zip(class_names, counts))


def _check_classes(where: str, counts: dict[str, int], how_to_add: str, labels_hint: str = "") -> None:
    """At least two classes with samples (a classifier of one class learns nothing); a warning
    for declared classes without any."""
    present = [name for name, count in counts.items() if count]
    if len(present) < 2:
        named = f" ({present[0]!r})" if present else ""
        raise DataError(
            f"{where} has {plural(len(present), 'class')}{named}: a classifier needs at least 2; {how_to_add}"
        )
    empty = [name for name, count in counts.items() if not count]
    if empty:
        warnings.warn(
            f"{where}: {plural(len(empty), 'class')} without samples ({', '.join(map(repr, empty[:10]))}"
            f"{', ...' if len(empty) > 10 else ''}); the model still gets an output for each{labels_hint}",
            stacklevel=4,
        )


MAX_CLASS_INDEX = 100_000  # integer labels above this are ids, not class indices


def open_data(source: str | os.PathLike | Dataset, *, max_length: int = 512) -> DataSource:
    """Describe a dataset: an image folder (torchvision ImageFolder layout: one sub-folder per
    class), a ``.csv``/``.jsonl`` of ``text,label`` rows, a tensor file (``.pt``, ``.npz``,
    ``.npy``), a PyG dataset object, or ``"fashion-mnist"`` (the offline copy).

    Data that cannot be used as it is (malformed rows, wrong keys, fewer than two classes,
    unreadable images, ...) raises `zoo.errors.DataError` naming the file, the line for
    text files, and the fix."""
    if _is_pyg_dataset(source):
        return _graph_source(source)
    if isinstance(source, Dataset):
        raise TypeError(
            f"open_data takes a path or a torch_geometric dataset, got {type(source).__name__}; "
            "pass other datasets to Trainer.fit directly"
        )
    if str(source) == "fashion-mnist":
        images, labels = load_fashion_mnist("train")
        return _tensor_source(images, labels, list(FASHION_MNIST_CLASSES), "Fashion-MNIST (train split)")
    path = Path(source).expanduser()
    if path.is_dir():
        return _image_folder_source(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} does not exist; --data takes an image folder, a .csv/.jsonl of text,label rows, "
            "a .pt/.npz/.npy tensor file, or 'fashion-mnist'"
        )
    suffix = path.suffix.lower()
    if suffix in (".csv", ".jsonl"):
        return _text_source(path, max_length)
    if suffix in (".pt", ".pth", ".npz", ".npy"):
        return _tensor_file_source(path)
    raise DataError(f"{path}: unknown data format {suffix!r}; use a folder of images, .csv, .jsonl, .pt, .npz or .npy")


def _is_pyg_dataset(source: object) -> bool:
    if isinstance(source, (str, os.PathLike)):
        return False
    try:
        from torch_geometric.data import Dataset as PygDataset
    except ImportError:
        return False
    return isinstance(source, PygDataset)


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0]}" if text else type(error).__name__


def _unreadable_image(path: str | Path, error: BaseException) -> DataError:
    return DataError(
        f"{path} is not a readable image ({_first_line(error)}); remove it from the folder or replace it"
    )


class _ImageFiles(Dataset):
    """Images read from files with PIL, converted to ``mode``, then transformed; a file PIL
    cannot read raises `DataError` naming it."""

    def __init__(self, samples: list[tuple[str, int]], mode: str, transform: Callable[[Any], Any] | None) -> None:
        self.samples, self.mode, self.transform = samples, mode, transform

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[Any, int]:
        path, label = self.samples[index]
        try:
            with Image.open(path) as image:
                image = image.convert(self.mode)
        except Exception as error:  # PIL raises OSError, SyntaxError, ValueError, EOFError, ... for bad bytes
            raise _unreadable_image(path, error) from error
        return (self.transform(image) if self.transform else image), label


def _is_image_name(name: str) -> bool:
    return not name.startswith(".") and name.lower().endswith(IMG_EXTENSIONS)


def _scan_image_folder(root: Path) -> tuple[list[str], list[tuple[str, int]]]:
    """Class names (visible sub-folders, sorted) and (path, class index) samples: the image
    files (by extension, as torchvision's ImageFolder) of each class folder and its
    sub-folders, in torchvision's order. Hidden files and folders (``.DS_Store``,
    ``._x.jpg``, ``.ipynb_checkpoints``) and other files (``notes.txt``) are skipped."""
    extensions = ", ".join(IMG_EXTENSIONS)
    try:
        entries = sorted(os.scandir(root), key=lambda entry: entry.name)
    except OSError as error:
        raise DataError(f"{root}: cannot list the image folder ({_first_line(error)})") from error
    classes = [entry.name for entry in entries if not entry.name.startswith(".") and entry.is_dir()]
    if not classes:
        loose = sum(entry.is_file() and _is_image_name(entry.name) for entry in entries)
        if loose:
            raise DataError(
                f"{root} holds {plural(loose, 'image')} but no class sub-folders: an image folder has one "
                f"sub-folder per class (e.g. {root / 'cat' / '1.jpg'}); move each image into its class's folder"
            )
        raise DataError(
            f"{root} holds no class folders: an image folder has one sub-folder per class, each holding "
            f"that class's images ({extensions})"
        )
    samples: list[tuple[str, int]] = []
    for index, name in enumerate(classes):
        folder = root / name
        walked = []
        for directory, subfolders, files in os.walk(folder, followlinks=True):
            subfolders[:] = [d for d in subfolders if not d.startswith(".")]
            walked.append((directory, files))
        found = [os.path.join(d, f) for d, files in sorted(walked) for f in sorted(files) if _is_image_name(f)]
        if not found:
            raise DataError(
                f"{folder} holds no images ({extensions}): add images of class {name!r} or remove the folder"
            )
        samples += [(path, index) for path in found]
    return classes, samples


def _image_folder_source(root: Path) -> DataSource:
    classes, samples = _scan_image_folder(root)
    labels = torch.tensor([label for _, label in samples])
    counts = _class_counts(labels, classes)
    _check_classes(str(root), counts, "add a sub-folder of images for each class")
    modes, image_size = set(), None
    for path, _ in samples[:16]:  # the headers only; a file that fails later raises when it is read
        try:
            with Image.open(path) as image:
                modes.add(image.mode)
                image_size = image_size or (image.height, image.width)
        except Exception as error:
            raise _unreadable_image(path, error) from error
    in_chans = 1 if modes <= {"L", "1", "I", "I;16", "F"} else 3
    mode = "L" if in_chans == 1 else "RGB"

    def make_subset(indices: Sequence[int], transform: Callable[[Any], Any] | None) -> Dataset:
        return _ImageFiles([samples[i] for i in indices], mode, transform)

    return DataSource(
        kind="images",
        description=f"image folder {root} ({len(samples)} images, {len(classes)} classes)",
        num_samples=len(samples),
        num_classes=len(classes),
        class_names=classes,
        make_subset=make_subset,
        in_chans=in_chans,
        image_size=image_size,
        class_counts=counts,
        labels=labels,
    )


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
        raise DataError(f"{where}: {name} is not a tensor of numbers ({_first_line(error)})") from error
    if tensor.is_complex():
        raise DataError(f"{where}: {name} holds complex numbers; expected real numbers")
    return tensor


def _tensor_source(
    x: Any,
    y: Any,
    class_names: Any,
    description: str,
    x_name: str = "the samples",
    y_name: str = "the labels",
) -> DataSource:
    """Samples ``x`` (uint8 [N, H, W] or [N, C, H, W] are images, anything else feature rows)
    with integer class indices ``y`` (or none), checked: one label per sample, labels 0..K-1,
    finite inputs, at least two classes."""
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
    counts = None
    if y is not None:
        y = _as_tensor(y, description, y_name)
        if y.ndim != 1:
            hint = " (one-hot? save y.argmax(1))" if y.ndim == 2 else ""
            raise DataError(
                f"{description}: {y_name} has shape {tuple(y.shape)}; expected a 1-D tensor of class indices, "
                f"one per sample{hint}"
            )
        if len(y) != len(x):
            raise DataError(
                f"{description}: {plural(len(x), 'sample')} under {x_name} but {plural(len(y), 'label')} under "
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
            raise DataError(
                f"{description}: {y_name} must be class indices >= 0; sample {first} has {int(y[first])}"
            )
        if int(y.max()) >= MAX_CLASS_INDEX:
            raise DataError(
                f"{description}: {y_name} go up to {int(y.max())}; expected class indices 0..K-1 (renumber them)"
            )
        if class_names is not None:
            class_names = _class_name_list(class_names, description)
            if int(y.max()) >= len(class_names):
                raise DataError(
                    f"{description}: {y_name} go up to {int(y.max())} but 'classes' names "
                    f"{plural(len(class_names), 'class')}; name one class per index 0..{int(y.max())}"
                )
        else:
            class_names = [str(i) for i in range(int(y.max()) + 1)]
        counts = _class_counts(y, class_names)
        _check_classes(description, counts, f"the file needs labels of at least two classes under {y_name}")
    else:
        class_names = None

    def make_subset(indices: Sequence[int], transform: Callable[[Any], Any] | None) -> Dataset:
        return _TensorSamples(x, y, indices, transform if images else None)

    return DataSource(
        kind="images" if images else "tensors",
        description=f"{description} ({len(x)} samples of shape {tuple(x.shape[1:])})",
        num_samples=len(x),
        num_classes=len(class_names) if class_names is not None else None,
        class_names=class_names,
        make_subset=make_subset,
        in_chans=x.shape[1] if images else None,
        image_size=tuple(x.shape[-2:]) if images else None,
        class_counts=counts,
        labels=y,
    )


def _class_name_list(names: Any, where: str) -> list[str]:
    if isinstance(names, np.ndarray):
        names = names.tolist()
    if isinstance(names, str) or not isinstance(names, (list, tuple)) or not all(isinstance(n, str) for n in names):
        raise DataError(f"{where}: 'classes' must be a list of class names (strings), got {type(names).__name__}")
    if len(set(names)) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise DataError(f"{where}: 'classes' names {twice} more than once; each class needs its own name")
    return list(names)


def _load_tensor_file(path: Path) -> Any:
    """What a tensor file holds: ``.pt`` through torch.load(weights_only=True) (tensors,
    lists, dicts; no arbitrary objects), ``.npz``/``.npy`` through numpy without pickles."""
    suffix = path.suffix.lower()
    if path.stat().st_size == 0:
        raise DataError(f"{path} is empty (0 bytes); expected a {suffix} file of samples and labels")
    try:
        if suffix in (".npz", ".npy"):
            loaded = np.load(path, allow_pickle=False)
            if isinstance(loaded, np.lib.npyio.NpzFile):
                with loaded:
                    return {name: loaded[name] for name in loaded.files}
            return loaded
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # zip, pickle and format errors of all kinds
        numpy = suffix in (".npz", ".npy")
        how = "numpy.savez(path, x=..., y=...)" if numpy else "torch.save({'x': ..., 'y': ...}, path)"
        raise DataError(
            f"{path} cannot be read as a {suffix} tensor file ({_load_error(error)}); write it with {how}"
        ) from error


def _load_error(error: BaseException) -> str:
    """The useful part of a loader's error: torch.load(weights_only=True) puts its reason
    (an object other than tensors, lists, dicts and numbers; bytes that are no pickle)
    after 'WeightsUnpickler error:' in a long message."""
    match = re.search(r"WeightsUnpickler error:\s*(.+?)(?:\.\s|\n|$)", str(error), re.S)
    if match:
        reason = " ".join(match.group(1).split())
        return f"torch.load(weights_only=True) refuses it: {reason}; only tensors, lists, dicts and numbers are read"
    return _first_line(error).split(". ")[0]


def _tensor_file_source(path: Path) -> DataSource:
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
        raise DataError(
            f"{path}: expected a tensor, an (x, y) pair or a dict of tensors, got {kind}"
        )
    return _tensor_source(x, y, class_names, str(path), x_name, y_name)


# Text files: `text,label` CSV with a header, or JSON lines {"text": ..., "label": ...}.

_CLASS_INDEX = re.compile(r"-?[0-9]+")


class TextBatches:
    """Collate (text, label) rows into ``{"input_ids", "attention_mask", "labels"}`` with the
    byte-level tokenizer of zoo's language models (right padding, ``max_length`` tokens kept)."""

    def __init__(self, max_length: int) -> None:
        self.tokenizer = ByteTokenizer()
        self.max_length = max_length

    def __call__(self, rows: list[tuple[str, int]]) -> dict[str, torch.Tensor]:
        input_ids, attention_mask = self.tokenizer([text for text, _ in rows], max_length=self.max_length)
        labels = torch.tensor([label for _, label in rows], dtype=torch.long)
        return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}


class _Rows(Dataset):
    def __init__(self, rows: list[tuple[str, int]]) -> None:
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> tuple[str, int]:
        return self.rows[index]


def _text_source(path: Path, max_length: int) -> DataSource:
    """Texts and class indices; string labels are numbered in sorted order, integer labels
    (all of them digits) are class indices as they are. Batches are byte-level tokens
    (`TextBatches`)."""
    text = decode_text(path)
    rows = jsonl_rows(path, text) if path.suffix.lower() == ".jsonl" else csv_rows(path, text)
    if not rows:
        raise DataError(f"{path} holds no rows; expected one (text, label) row per sample")
    labels = [label for _, _, label in rows]
    hint = ""
    if all(_CLASS_INDEX.fullmatch(label) for label in labels):
        indices = [int(label) for label in labels]
        for (line, _, _), index in zip(rows, indices):
            if not 0 <= index < MAX_CLASS_INDEX:
                raise DataError(
                    f"{path}, line {line}: label {index}; integer labels are class indices 0, 1, ... "
                    f"(below {MAX_CLASS_INDEX}): renumber them or use class names"
                )
        class_names = [str(i) for i in range(max(indices) + 1)]
        if min(indices) > 0:
            hint = " (integer labels are class indices from 0: subtract 1 if yours start at 1)"
    else:
        class_names = sorted(set(labels))
        number = {name: i for i, name in enumerate(class_names)}
        indices = [number[label] for label in labels]
    targets = torch.tensor(indices, dtype=torch.long)
    counts = _class_counts(targets, class_names)
    _check_classes(str(path), counts, "add rows of the other classes", hint)
    samples = [(value, index) for (_, value, _), index in zip(rows, indices)]

    def make_subset(subset: Sequence[int], transform: Callable[[Any], Any] | None) -> Dataset:
        return _Rows([samples[i] for i in subset])

    return DataSource(
        kind="text",
        description=f"text file {path} ({len(rows)} rows, {len(class_names)} classes, byte tokens)",
        num_samples=len(rows),
        num_classes=len(class_names),
        class_names=class_names,
        make_subset=make_subset,
        collate_fn=TextBatches(max_length),
        class_counts=counts,
        labels=targets,
    )


def _graph_source(dataset: Any) -> DataSource:
    """A PyG dataset of graphs, batched by PyG's collater (one `Batch` per step)."""
    from torch_geometric.loader.dataloader import Collater

    if len(dataset) < 2:
        raise ValueError(
            f"{type(dataset).__name__} holds {len(dataset)} graph(s); training splits a dataset of many graphs "
            "(graph classification), not the nodes of one graph"
        )
    num_classes = int(dataset.num_classes)
    class_names = [str(i) for i in range(num_classes)]
    labels = _graph_labels(dataset, num_classes)

    def make_subset(indices: Sequence[int], transform: Callable[[Any], Any] | None) -> Dataset:
        return dataset.index_select(list(indices))

    return DataSource(
        kind="graphs",
        description=f"{type(dataset).__name__} ({len(dataset)} graphs, {num_classes} classes)",
        num_samples=len(dataset),
        num_classes=num_classes,
        class_names=class_names,
        make_subset=make_subset,
        in_chans=int(dataset.num_features),  # node features
        collate_fn=Collater(dataset),
        class_counts=_class_counts(labels, class_names) if labels is not None else None,
        labels=labels,
    )


def _graph_labels(dataset: Any, num_classes: int) -> torch.Tensor | None:
    """One class index per graph when the dataset holds them in memory (``dataset.y``);
    None for regression targets, node labels, or datasets read lazily."""
    try:
        y = dataset.y
    except Exception:
        return None
    if not isinstance(y, torch.Tensor) or y.is_floating_point() or y.ndim != 1 or len(y) != len(dataset):
        return None
    y = y.long()
    if len(y) == 0 or int(y.min()) < 0 or int(y.max()) >= num_classes:
        return None
    return y

