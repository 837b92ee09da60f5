"""The data sets zoo trains on offline: Fashion-MNIST (Debian's package, else torchvision's
download) and the Python standard library's source as a byte corpus."""

from __future__ import annotations

import gzip
import sysconfig
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch

from zoo.errors import DataNotFoundError, InvalidArgumentError
from zoo.tokenizer import ByteTokenizer

FASHION_MNIST_DIR = Path("/usr/share/datasets/fashion-mnist")  # Debian package dataset-fashion-mnist
FASHION_MNIST_CLASSES = (
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
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
        raise InvalidArgumentError(f"split must be 'train' or 'test', got {split!r}")
    prefix = "train" if split == "train" else "t10k"
    directory = Path(root) if root is not None else FASHION_MNIST_DIR
    images = directory / f"{prefix}-images-idx3-ubyte.gz"
    labels = directory / f"{prefix}-labels-idx1-ubyte.gz"
    if images.is_file() and labels.is_file():
        return torch.from_numpy(_read_idx(images).copy()), torch.from_numpy(_read_idx(labels).astype(np.int64))
    if root is None:
        raise DataNotFoundError(
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
        raise InvalidArgumentError(f"split must be train, val or test, got {split!r}")
    ids: list[int] = []
    for i, path in enumerate(stdlib_files()):
        if i % 20 in remainders[split]:
            ids += [*path.read_bytes(), ByteTokenizer.eos_token_id]
    return torch.tensor(ids, dtype=torch.int16)
