"""Training data: Fashion-MNIST offline, image folders, text,label files, tensor files and PyG
datasets, split with a fixed seed, with the model's preprocessing plus augmentation, and the
samplers and loaders the Trainer reads them with."""
from __future__ import annotations

import csv
import gzip
import io
import itertools
import json
import math
import os
import re
import sysconfig
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
import torch.nn as nn
from PIL import Image
from torch.utils.data import DataLoader, Dataset, DistributedSampler, Sampler
from torchvision.datasets.folder import IMG_EXTENSIONS
from torchvision.transforms import InterpolationMode, v2

from zoo.api import ConvertChannels, build_transforms
from zoo.errors import DataError
from zoo.tokenizer import ByteTokenizer

FASHION_MNIST_DIR = Path("/usr/share/datasets/fashion-mnist")  # Debian package dataset-fashion-mnist
FASHION_MNIST_CLASSES = (
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot",
)


def _read_idx(path: Path) -> np.ndarray:
    """Read an IDX file (the MNIST format), gzipped or not."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    shape = tuple(int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(shape)


def load_fashion_mnist(split: str = "train", root: str | Path | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Fashion-MNIST images (uint8, [N, 28, 28]) and labels (int64, [N]) of the official
    ``train`` (60k) or ``test`` (10k) split, from the Debian package's files; elsewhere,
    torchvision downloads them into ``root``."""
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    prefix = "train" if split == "train" else "t10k"
    directory = Path(root) if root is not None else FASHION_MNIST_DIR
    images = directory / f"{prefix}-images-idx3-ubyte.gz"
    labels = directory / f"{prefix}-labels-idx1-ubyte.gz"
    if images.is_file() and labels.is_file():
        return torch.from_numpy(_read_idx(images).copy()), torch.from_numpy(_read_idx(labels).astype(np.int64))
    if root is None:
        raise FileNotFoundError(
            f"Fashion-MNIST is not in {FASHION_MNIST_DIR}: install it with "
            "`apt-get install dataset-fashion-mnist` (make demo/test do it as root), "
            "or pass root= to download it with torchvision"
        )
    from torchvision.datasets import FashionMNIST

    dataset = FashionMNIST(str(directory), train=split == "train", download=True)
    return dataset.data, dataset.targets


STDLIB_EXCLUDED = {"test", "tests", "idlelib", "lib2to3", "site-packages", "dist-packages", "__pycache__"}


def stdlib_files() -> list[Path]:
    """This interpreter's standard-library ``.py`` files outside test, tool and package
    folders, sorted by path: the text corpus of the byte-level language models."""
    root = Path(sysconfig.get_paths()["stdlib"])
    return sorted(p for p in root.rglob("*.py") if not STDLIB_EXCLUDED & set(p.relative_to(root).parts))


@lru_cache(maxsize=3)
def stdlib_corpus(split: str) -> torch.Tensor:
    """The byte stream (int16 token ids, files joined by the eos token) of a split of
    `stdlib_files`: file i is test when i % 20 == 0, validation when 1, training otherwise."""
    remainders = {"test": {0}, "val": {1}, "train": set(range(2, 20))}
    if split not in remainders:
        raise ValueError(f"split must be train, val or test, got {split!r}")
    ids: list[int] = []
    for i, path in enumerate(stdlib_files()):
        if i % 20 in remainders[split]:
            ids += [*path.read_bytes(), ByteTokenizer.eos_token_id]
    return torch.tensor(ids, dtype=torch.int16)


# ---------------------------------------------------------------------------------------------
# Training data: one `DataSource` per kind of input, split with a fixed seed into datasets that
# the Trainer's loaders read.

TEXT_COLUMNS = ("text", "label")
_FEATURE_KEYS = (("x", "y"), ("images", "labels"), ("data", "targets"), ("features", "labels"))


@dataclass
class Augment:
    """Training-time image augmentation, applied before the model's own normalisation."""

    hflip: bool = False
    crop_padding: int = 0  # pad, then randomly crop back to size (the CIFAR recipe)
    random_resized_crop: float | None = None  # minimum area fraction of RandomResizedCrop
    color_jitter: float = 0.0  # brightness/contrast/saturation strength
    trivial_augment: bool = False  # TrivialAugmentWide (Müller & Hutter, 2021)
    random_erasing: float = 0.0  # probability of RandomErasing

    def __post_init__(self) -> None:
        if self.crop_padding < 0:
            raise ValueError(f"crop_padding must be >= 0, got {self.crop_padding}")
        if self.random_resized_crop is not None and not 0.0 < self.random_resized_crop <= 1.0:
            raise ValueError(
                f"random_resized_crop is a minimum area fraction in (0, 1], got {self.random_resized_crop}"
            )
        if not 0.0 <= self.random_erasing <= 1.0:
            raise ValueError(f"random_erasing is a probability in [0, 1], got {self.random_erasing}")


def default_preprocess(in_chans: int) -> dict[str, Any]:
    """Normalisation for models without recorded preprocessing (trained from scratch):
    pixels scaled to [-1, 1] per channel."""
    return {"mean": [0.5] * in_chans, "std": [0.5] * in_chans}


def image_transforms(
    preprocess: dict[str, Any],
    image_size: tuple[int, int],
    augment: Augment | None = None,
    in_chans: int | None = None,
) -> v2.Compose:
    """The model's preprocessing (resize, crop, normalise; see `zoo.transforms`) for PIL
    images or uint8 tensors of ``image_size``; with ``augment``, the training version: the
    same geometry with random crops, flips and colour changes added. ``in_chans`` converts
    between grayscale and RGB when the images have the other count."""
    if augment is None:
        steps: list[nn.Module] = [ConvertChannels(in_chans)] if in_chans else []
        return v2.Compose([*steps, *build_transforms(preprocess).transforms])
    size = _output_size(preprocess, image_size)
    steps = [ConvertChannels(in_chans or len(preprocess["mean"]))]
    interpolation = InterpolationMode(preprocess.get("interpolation", "bilinear"))
    if augment.random_resized_crop is not None:
        scale = (augment.random_resized_crop, 1.0)
        steps.append(v2.RandomResizedCrop(size, scale=scale, interpolation=interpolation, antialias=True))
    else:
        if "resize" in preprocess:
            steps.append(v2.Resize(preprocess["resize"], interpolation=interpolation, antialias=True))
        if "crop" in preprocess:
            steps.append(v2.CenterCrop(preprocess["crop"]))
        if augment.crop_padding:
            steps.append(v2.RandomCrop(size, padding=augment.crop_padding))
    if augment.hflip:
        steps.append(v2.RandomHorizontalFlip())
    if augment.color_jitter:
        strength = augment.color_jitter
        steps.append(v2.ColorJitter(brightness=strength, contrast=strength, saturation=strength))
    if augment.trivial_augment:
        steps.append(v2.TrivialAugmentWide(interpolation=interpolation))
    steps += [
        v2.ToImage(),
        v2.ToDtype(torch.float32, scale=True),
        v2.Normalize(mean=preprocess["mean"], std=preprocess["std"]),
    ]
    if augment.random_erasing:
        steps.append(v2.RandomErasing(p=augment.random_erasing))
    return v2.Compose(steps)


def _output_size(preprocess: dict[str, Any], image_size: tuple[int, int]) -> tuple[int, int]:
    """The (H, W) that the eval transforms produce from images of ``image_size``."""
    if "crop" in preprocess:
        crop = preprocess["crop"]
        return (crop, crop) if isinstance(crop, int) else tuple(crop)
    if "resize" in preprocess:
        resize = preprocess["resize"]
        if not isinstance(resize, int):
            return tuple(resize)
        h, w = image_size  # an int resizes the shorter side, keeping the aspect ratio
        return (resize, int(resize * w / h)) if h <= w else (int(resize * h / w), resize)
    return image_size


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
            listed = ", ".join(f"{self.class_names[c]!r} ({_plural(total[c], 'sample')})" for c in starved)
            raise DataError(
                f"{self.description}: {held} takes every sample of {'class' if len(starved) == 1 else 'classes'} "
                f"{listed}, leaving none to train on; "
                f"at val_fraction {val_fraction} each class needs at least {need} samples: add samples of "
                f"that class, lower --val-fraction, or pass separate validation data (--val-data)"
            )
        few = [c for c in range(num_classes) if 0 < total[c] < need]
        if few:
            listed = ", ".join(
                f"{self.class_names[c]!r} ({_plural(total[c], 'sample')}, {total[c] - train[c]} in validation)"
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


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}{'es' if noun.endswith('s') else 's'}"


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
            f"{where} has {_plural(len(present), 'class')}{named}: a classifier needs at least 2; {how_to_add}"
        )
    empty = [name for name, count in counts.items() if not count]
    if empty:
        warnings.warn(
            f"{where}: {_plural(len(empty), 'class')} without samples ({', '.join(map(repr, empty[:10]))}"
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
                f"{root} holds {_plural(loose, 'image')} but no class sub-folders: an image folder has one "
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
                f"{description}: {x_name} holds NaN or infinite values in {_plural(int(bad.sum()), 'sample')} "
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
                f"{description}: {_plural(len(x), 'sample')} under {x_name} but {_plural(len(y), 'label')} under "
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
                    f"{_plural(len(class_names), 'class')}; name one class per index 0..{int(y.max())}"
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
_CSV_EXAMPLE = 'the line `text,label` then rows such as `"great film, loved it",pos`'


def _decode_text(path: Path) -> str:
    """The file as UTF-8 text (a leading BOM dropped); other encodings name the line."""
    data = path.read_bytes()
    start = 3 if data.startswith(b"\xef\xbb\xbf") else 0  # a BOM (utf-8-sig's offsets would not count it)
    try:
        return data[start:].decode("utf-8")
    except UnicodeDecodeError as error:
        before = data[: start + error.start]
        line = before.count(b"\n") + before.count(b"\r") - before.count(b"\r\n") + 1
        raise DataError(
            f"{path}, line {line}: byte {data[start + error.start]:#04x} is not UTF-8 text; save the file as UTF-8 "
            "(spreadsheets: 'CSV UTF-8')"
        ) from None


def _text_lines(text: str) -> Iterator[str]:
    """Lines split at \\n, \\r\\n or \\r (line numbers as editors count them), with trailing
    spaces and tabs dropped."""
    for line in io.StringIO(text, newline=""):
        body = line.rstrip("\r\n")
        yield body.rstrip(" \t") + line[len(body):]


def _csv_error(path: Path, start: int, end: int, error: csv.Error) -> DataError:
    reason = str(error)
    if "unexpected end of data" in reason:
        return DataError(
            f"{path}, line {start}: a quote opened on line {start} is never closed, so everything up to the end "
            f"of the file (line {end}) would be one text; close the quote, and double any quote inside a "
            'quoted text ("")'
        )
    if "expected after" in reason:
        where = f"line {end}" + (f" (in a quoted text opened on line {start})" if end != start else "")
        return DataError(
            f"{path}, {where}: a closing quote is followed by more text ({reason}); put the whole text in "
            'double quotes and double the quotes inside it, e.g. "she said ""hi""",pos'
        )
    return DataError(f"{path}, line {start}: not valid CSV ({reason})")


def _csv_rows(path: Path, text: str) -> list[tuple[int, str, str]]:
    """(line, text, label) of each row of a CSV with a header naming ``text`` and ``label``
    (other columns are ignored), parsed with the csv module's strict rules."""
    csv.field_size_limit(max(csv.field_size_limit(), len(text) + 1))  # long texts are fine
    reader = csv.reader(_text_lines(text), strict=True)
    header: list[str] | None = None
    rows: list[tuple[int, str, str]] = []
    while True:
        start = reader.line_num + 1
        try:
            fields = next(reader)
        except StopIteration:
            break
        except csv.Error as error:
            raise _csv_error(path, start, reader.line_num, error) from None
        if not fields:
            continue  # a blank line
        if header is None:
            header = [name.strip() for name in fields]
            missing = [c for c in TEXT_COLUMNS if c not in header]
            if missing:
                raise DataError(
                    f"{path}, line {start}: each row needs the fields {TEXT_COLUMNS}; missing {missing}, found "
                    f"{header}: the first line must be a header naming the columns, e.g. {_CSV_EXAMPLE}"
                )
            twice = sorted({c for c in TEXT_COLUMNS if header.count(c) > 1})
            if twice:
                raise DataError(f"{path}, line {start}: the header names {twice} more than once")
            text_at, label_at = header.index("text"), header.index("label")
            continue
        if len(fields) != len(header):
            columns = ",".join(header)
            if len(fields) > len(header):
                fix = 'a text holding a comma must be in double quotes, e.g. "great film, loved it",pos'
            elif len(fields) <= label_at:
                fix = "the row has no label"
            else:
                fix = "fill in every column"
            raise DataError(
                f"{path}, line {start}: {_plural(len(fields), 'field')} where the header ({columns}) has "
                f"{len(header)}; {fix}"
            )
        label = fields[label_at].strip()
        if not label:
            raise DataError(f"{path}, line {start}: the label is empty; every row needs its class in the label column")
        if not fields[text_at].strip():
            raise DataError(f"{path}, line {start}: the text is empty; every row needs a text")
        rows.append((start, fields[text_at], label))
    if header is None:
        raise DataError(f"{path} is empty; expected a header line and one row per sample, e.g. {_CSV_EXAMPLE}")
    return rows


def _jsonl_rows(path: Path, text: str) -> list[tuple[int, str, str]]:
    """(line, text, label) of each JSON object line; blank lines are skipped."""
    example = '{"text": "great film", "label": "pos"}'
    rows: list[tuple[int, str, str]] = []
    for number, line in enumerate(_text_lines(text), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line.rstrip("\r\n"))
        except json.JSONDecodeError as error:
            raise DataError(
                f"{path}, line {number}: not valid JSON ({error.msg}, column {error.colno}); each line must be "
                f"one JSON object such as {example}"
            ) from None
        if not isinstance(row, dict):
            raise DataError(
                f"{path}, line {number}: a JSON {_json_type(row)}, not an object; each line must be one JSON "
                f"object such as {example}"
            )
        missing = [c for c in TEXT_COLUMNS if c not in row]
        if missing:
            raise DataError(
                f"{path}, line {number}: each row needs the fields {TEXT_COLUMNS}; missing {missing}, found "
                f"{sorted(row)}"
            )
        value, label = row["text"], row["label"]
        if not isinstance(value, str):
            raise DataError(f"{path}, line {number}: \"text\" must be a string, got a JSON {_json_type(value)}")
        if isinstance(label, bool) or not isinstance(label, (str, int)):
            raise DataError(
                f"{path}, line {number}: \"label\" must be a class name (string) or class index (integer), got "
                f"a JSON {_json_type(label)}"
            )
        label = str(label).strip()
        if not label:
            raise DataError(f"{path}, line {number}: the label is empty; every row needs its class")
        if not value.strip():
            raise DataError(f"{path}, line {number}: the text is empty; every row needs a text")
        rows.append((number, value, label))
    return rows


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    return {dict: "object", list: "array", str: "string", int: "number", float: "number"}.get(type(value), "value")


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
    text = _decode_text(path)
    rows = _jsonl_rows(path, text) if path.suffix.lower() == ".jsonl" else _csv_rows(path, text)
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


# ---------------------------------------------------------------------------------------------
# Samplers and loaders


class EpochSampler(DistributedSampler):
    """`DistributedSampler` (a fixed-seed shuffle per epoch, one shard per process) that can
    start ``skip`` samples into its shard, so a resumed run reads exactly the rest of the
    interrupted epoch. Works without a process group (num_replicas=1, rank=0)."""

    def __init__(
        self, dataset: Dataset, num_replicas: int = 1, rank: int = 0, shuffle: bool = True, seed: int = 0
    ) -> None:
        super().__init__(dataset, num_replicas=num_replicas, rank=rank, shuffle=shuffle, seed=seed)
        self.skip = 0

    def __iter__(self) -> Iterator[int]:
        return itertools.islice(super().__iter__(), self.skip, None)

    def __len__(self) -> int:
        return self.num_samples - self.skip


class ShardSampler(Sampler[int]):
    """Evaluation shard of one process: every ``num_replicas``-th sample in order, padded
    (repeating its last sample) so every process runs the same number of batches; the first
    ``num_valid`` indices are the real ones."""

    def __init__(self, dataset: Dataset, num_replicas: int = 1, rank: int = 0) -> None:
        size = len(dataset)
        self.indices = list(range(rank, size, num_replicas))
        self.num_valid = len(self.indices)
        padded = -(-size // num_replicas)
        if self.indices and len(self.indices) < padded:
            self.indices += [self.indices[-1]] * (padded - len(self.indices))

    def __iter__(self) -> Iterator[int]:
        return iter(self.indices)

    def __len__(self) -> int:
        return len(self.indices)


def build_loader(
    dataset: Dataset,
    batch_size: int,
    *,
    sampler: Sampler[int],
    collate_fn: Callable[[list[Any]], Any] | None = None,
    num_workers: int = 0,
    pin_memory: bool = False,
    persistent_workers: bool = False,
    generator: torch.Generator | None = None,
    drop_last: bool = False,
) -> DataLoader:
    """A DataLoader with worker options that only apply when there are workers; pass a
    ``generator`` so the workers' seeds come from it rather than the global RNG."""
    return DataLoader(
        dataset,
        batch_size=batch_size,
        sampler=sampler,
        collate_fn=collate_fn,
        num_workers=num_workers,
        pin_memory=pin_memory,
        persistent_workers=persistent_workers and num_workers > 0,
        prefetch_factor=4 if num_workers > 0 else None,
        generator=generator,
        drop_last=drop_last,
    )
