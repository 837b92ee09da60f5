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
from zoo.loading.images import open_image
from zoo.training.data.source import (
    DataChangedError,
    DataSource,
    check_class_names,
    check_classes,
    class_counts,
    first_line,
)
from zoo.training.data.text.text_rows import plural


class ImageFiles(Dataset):
    """Images read by zoo's one image reader (`zoo.loading.images.open_image`, as ``zoo predict``
    reads them), brought to ``channels``, then transformed; a file it cannot read (checked whole
    before: changed since) raises `DataChangedError` naming it. With ``root`` (an image list's
    folder, resolved), each file is checked again when it is opened, and its resolved path
    opened: a link swapped in after the list was read cannot lead out of the folder."""

    def __init__(
        self,
        samples: list[tuple[str, Any]],
        channels: int,
        transform: Callable[[Any], Any] | None,
        root: str | None = None,
    ) -> None:
        self.samples, self.channels, self.transform, self.root = samples, channels, transform, root

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[Any, Any]:
        path, label = self.samples[index]
        opened = path
        if self.root is not None:
            opened = os.path.realpath(path)
            if not opened.startswith(self.root.rstrip(os.sep) + os.sep):
                raise DataChangedError(
                    f"{path} now leads out of {self.root} (to {opened}), since the list was read: a link was put "
                    "in its place; copy the image in"
                )
        try:
            image = open_image(opened, channels=self.channels, name=path)
        except DataError as error:  # every image was read before training: this one changed since
            since = (
                "it was there when the data was checked: deleted or moved since"
                if not os.path.lexists(path)
                else "it read well when the data was checked: rewritten since, or damaged where that check "
                "does not read"
            )
            raise DataChangedError(f"{error} ({since})") from None
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
    check_class_names(str(root), classes, "class folders")  # they go into messages, config and card
    samples: list[tuple[str, int]] = []
    seen: set[str] = set()  # real paths of the files taken: a file linked twice counts once
    for index, name in enumerate(classes):
        folder = root / name
        found = _class_images(root, folder, seen)
        if not found:
            raise DataError(
                f"{folder} holds no images ({extensions}): add images of class {name!r} or remove the folder"
            )
        samples += [(path, index) for path in found]
    return classes, samples


def _class_images(root: Path, folder: Path, seen: set[str]) -> list[str]:
    """The image files under one class folder, in torchvision's order, following links to
    folders outside the data; a link back into the data folder (a loop, or another class's
    images) is refused by name, and a file reached twice counts once."""
    data = os.path.realpath(root)
    walked, visited = [], {os.path.realpath(folder)}
    for directory, subfolders, files in os.walk(folder, followlinks=True):
        kept = []
        for sub in (d for d in subfolders if not d.startswith(".")):
            link = os.path.join(directory, sub)
            target = os.path.realpath(link)
            inside = target == data or target.startswith(data + os.sep) or data.startswith(target + os.sep)
            if os.path.islink(link) and inside:
                raise DataError(
                    f"{link} is a link to {target}, which holds or lies in the image folder {root}: it "
                    "would loop or count images twice; remove the link"
                )
            if target not in visited:  # a folder reached twice (a loop outside the data) is walked once
                visited.add(target)
                kept.append(sub)
        subfolders[:] = kept
        walked.append((directory, files))
    found = []
    for directory, files in sorted(walked):
        for file in sorted(files):
            path = os.path.join(directory, file)
            if _is_image_name(file) and os.path.realpath(path) not in seen:
                seen.add(os.path.realpath(path))
                found.append(path)
    return found


def _check_jpeg_data(path: str) -> None:
    """A JPEG's compressed data read to its end (verify reads only the headers), decoded at a
    reduced scale (PIL's draft mode: fast): a truncated file is a `DataError` now, not mid-epoch."""
    try:
        with Image.open(path) as image:
            image.draft(image.mode, (max(image.width // 8, 1), max(image.height // 8, 1)))
            image.load()
    except Exception as error:  # PIL raises OSError, SyntaxError, ValueError... for bad bytes
        raise DataError(f"{path} is not a readable image ({first_line(error)}); remove it or replace it") from None


def check_images(paths: Sequence[str], named: Callable[[int], str] | None = None) -> tuple[int, tuple[int, int]]:
    """Every image read whole before any training starts (headers, size within the pixel
    bound of `open_image`, a JPEG's data), and the channels (1 when the first 16 are all gray,
    else 3) and size (the first's) the model gets. A bad file's `DataError` is prefixed by
    ``named(index)`` when given (an image list's file and line)."""
    modes, image_size = set(), None
    for index, path in enumerate(paths):
        try:
            image = open_image(path, decode=False)
            if image.format == "JPEG":
                _check_jpeg_data(path)
        except DataError as error:
            if named is None:
                raise
            raise type(error)(f"{named(index)}: {error}") from None
        if index < 16:
            modes.add(image.mode)
            image_size = image_size or (image.height, image.width)
    assert image_size is not None, "check_images needs at least one path"
    return (1 if modes <= {"L", "1", "I", "I;16", "I;16B", "I;16L", "F"} else 3), image_size


def image_folder_source(root: Path) -> DataSource:
    """The images of ``root``'s class folders: gray (one channel) when the first images all are, else RGB."""
    classes, samples = _scan_image_folder(root)
    labels = torch.tensor([label for _, label in samples])
    counts = class_counts(labels, classes)
    check_classes(str(root), counts, "add a sub-folder of images for each class")
    in_chans, image_size = check_images([path for path, _ in samples])

    def make_subset(indices: Sequence[int], transform: Callable[[Any], Any] | None) -> Dataset:
        return ImageFiles([samples[i] for i in indices], in_chans, transform)

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
