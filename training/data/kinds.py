"""Users' data on disk, read and checked before any model is built: image folders, image lists,
text,label files (.csv, .jsonl), tensor files (.pt, .npz, .npy), Fashion-MNIST and PyG datasets,
each as a `DataSource` (kind, classes and their counts or a regression's target or multi-label
names, channels, image size) that `DataSource.split` turns into seeded training and validation
datasets. A file a user can get wrong raises `DataError` naming the file (and line) and the fix.

Each kind of data has its module: `zoo.training.data.images.image_folders`, `zoo.training.data.images.image_lists`,
`zoo.training.data.tensors.tensor_files`, `zoo.training.data.text.text_files` and `zoo.training.data.graphs.graph_datasets`;
`zoo.training.data.source` holds `DataSource` and the checks they share, `zoo.training.data.targets`
the one reading of a table's targets.
"""

from __future__ import annotations

import os
from pathlib import Path

from torch.utils.data import Dataset

from zoo.errors import DataError, DataNotFoundError, InvalidArgumentError
from zoo.training.data.builtin import FASHION_MNIST_CLASSES, load_fashion_mnist
from zoo.training.data.graphs.graph_datasets import graph_source
from zoo.training.data.images.image_folders import image_folder_source
from zoo.training.data.images.image_lists import image_list_source, is_image_list, metadata_file
from zoo.training.data.molecules.molecule_files import (
    MoleculeOptions,
    is_molecule_file,
    molecule_source,
    no_smiles_column,
)
from zoo.training.data.shards.shard_files import looks_like_shards
from zoo.training.data.shards.shard_source import SHUFFLE_BUFFER, shard_source
from zoo.training.data.source import MAX_CLASS_INDEX, DataSource, samples_needed
from zoo.training.data.tensors.tensor_files import tensor_file_source, tensor_source
from zoo.training.data.text.text_files import TextBatches, text_source

__all__ = ["MAX_CLASS_INDEX", "DataSource", "TextBatches", "open_data", "samples_needed"]

TENSOR_SUFFIXES = (".pt", ".pth", ".npz", ".npy")  # tensor files: their labels are under y, no column to name


def open_data(
    source: str | os.PathLike | Dataset,
    *,
    max_length: int = 512,
    molecules: MoleculeOptions | None = None,
    shuffle_buffer: int = SHUFFLE_BUFFER,
    images: str | os.PathLike | None = None,
) -> DataSource:
    """Describe a dataset: an image folder (torchvision ImageFolder layout: one sub-folder per
    class), an image list (a folder with ``metadata.csv``/``.jsonl``, or a ``.csv``/``.jsonl``
    with a ``file_name`` column, its paths under ``images`` or its own folder:
    `zoo.training.data.images.image_lists`), a ``.csv``/``.jsonl`` of ``text,label`` rows, a tensor file
    (``.pt``, ``.npz``, ``.npy``), a PyG dataset object, or ``"fashion-mnist"`` (the offline copy);
    molecules: an ``.sdf`` file or a ``.csv``/``.jsonl`` with a ``smiles`` column. ``molecules``
    says how labels are read (`MoleculeOptions`: the label field, the task, the tags' delimiter;
    for molecules the split and bad rows).

    Data that cannot be used as it is (malformed rows, wrong keys, fewer than two classes,
    unreadable images, ...) raises `zoo.errors.DataError` naming the file, the line for
    text files, and the fix."""
    if _is_pyg_dataset(source):
        return graph_source(source)
    if isinstance(source, Dataset):
        raise InvalidArgumentError(
            f"open_data takes a path or a torch_geometric dataset, got {type(source).__name__}; "
            "pass other datasets to Trainer.fit directly"
        )
    if looks_like_shards(source):
        skip_bad = molecules is not None and molecules.skip_bad_rows  # --skip-bad-rows: bad samples too
        return shard_source(os.fspath(source), max_length=max_length, skip_bad=skip_bad, buffer=shuffle_buffer)  # type: ignore[arg-type]
    if str(source) == "fashion-mnist":
        images, labels = load_fashion_mnist("train")
        return tensor_source(images, labels, list(FASHION_MNIST_CLASSES), "Fashion-MNIST (train split)")
    path = Path(source).expanduser()
    reading = molecules or MoleculeOptions()
    listed = _open_image_list_or_folder(path, reading, images)
    if listed is not None:
        return listed
    if path.exists() and not path.is_file():
        raise DataError(f"{path} is not a file or a folder (a FIFO, a socket or a device); --data takes a file")
    if not path.is_file():
        raise DataNotFoundError(
            f"{path} does not exist; --data takes an image folder, a .csv/.jsonl of text,label rows, an image "
            "list (a folder with metadata.csv), a .pt/.npz/.npy tensor file, or 'fashion-mnist'"
        )
    if is_molecule_file(path, reading.smiles_field):
        return molecule_source(path, molecules)
    return _open_file(path, reading, max_length)


def _open_image_list_or_folder(
    path: Path, reading: MoleculeOptions, images: str | os.PathLike | None
) -> DataSource | None:
    """An image list (a folder with metadata.csv/.jsonl, or a list given with ``images``) or an
    image folder; None when ``path`` is neither (a file without ``images``)."""
    listed = (path if images is not None else metadata_file(path)) if path.is_dir() or images is not None else None
    if listed is not None:
        if images is not None and (not path.is_file() or path.suffix.lower() not in (".csv", ".jsonl")):
            raise InvalidArgumentError(
                f"--images goes with --data LIST.csv or LIST.jsonl (naming each image), got {path}"
            )
        root = Path(images).expanduser() if images is not None else path
        return image_list_source(listed, root, reading.label_field, reading.task, reading.label_delimiter)
    if not path.is_dir():
        return None
    if reading.label_field is not None or reading.task not in ("auto", "classification"):
        raise InvalidArgumentError(
            f"{path} is an image folder (its sub-folders are the classes), so --task {reading.task} and "
            "--label-field do not apply; list the images with their labels in metadata.csv for those"
        )
    return image_folder_source(path)


def _open_file(path: Path, reading: MoleculeOptions, max_length: int) -> DataSource:
    """A file that holds no molecules: an image list, text rows or a tensor file."""
    suffix = path.suffix.lower()
    if reading.graph_model is not None and suffix in (".csv", ".jsonl"):
        raise no_smiles_column(path, reading.graph_model, reading.smiles_field)
    if (reading.split, reading.skip_bad_rows) != ("random", False):
        raise InvalidArgumentError(
            f"{path} holds no molecules (an .sdf, or a .csv/.jsonl with a smiles column), so --split and "
            "--skip-bad-rows do not apply"
        )
    if suffix in (".csv", ".jsonl") and is_image_list(path):
        return image_list_source(path, None, reading.label_field, reading.task, reading.label_delimiter)
    if suffix in (".csv", ".jsonl"):
        label = reading.label_field or "label"
        return text_source(path, max_length, label, reading.task, reading.label_delimiter)
    if suffix in TENSOR_SUFFIXES:
        if reading.label_field is not None:
            raise InvalidArgumentError(f"{path} is a tensor file (labels under y); --label-field is for tables")
        return tensor_file_source(path, reading.task)
    raise DataError(
        f"{path}: unknown data format {suffix!r}; use a folder of images, .csv, .jsonl, .pt, .npz, .npy or .sdf"
    )


def _is_pyg_dataset(source: object) -> bool:
    """A torch_geometric dataset (False without torch_geometric installed)."""
    if isinstance(source, (str, os.PathLike)):
        return False
    try:
        from torch_geometric.data import Dataset as PygDataset
    except ImportError:
        return False
    return isinstance(source, PygDataset)
