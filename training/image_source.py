"""Image folders (torchvision's ImageFolder layout: one sub-folder per class) as a `DataSource`;
files PIL cannot read are named in the error."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from PIL import Image
from torch.utils.data import Dataset
from torchvision.datasets.folder import IMG_EXTENSIONS

from zoo.errors import DataError
from zoo.training.datasource import DataSource, check_classes, class_counts, first_line
from zoo.training.text_rows import plural


def _unreadable_image(path: str | Path, error: BaseException) -> DataError:
    """The error for an image file PIL cannot read, naming it and the fix."""
    return DataError(f"{path} is not a readable image ({first_line(error)}); remove it from the folder or replace it")


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
    """An image file by its extension, as torchvision's ImageFolder; hidden files are not."""
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
        raise DataError(f"{root}: cannot list the image folder ({first_line(error)})") from error
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


def image_folder_source(root: Path) -> DataSource:
    """The images of ``root``'s class folders: gray (one channel) when the first images all are, else RGB."""
    classes, samples = _scan_image_folder(root)
    labels = torch.tensor([label for _, label in samples])
    counts = class_counts(labels, classes)
    check_classes(str(root), counts, "add a sub-folder of images for each class")
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
