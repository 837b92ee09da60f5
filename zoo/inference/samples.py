"""One input made ready for a model, one at a time, and chunks of them read by worker
processes: an image source decoded by zoo's one image reader (`zoo.loading.images.open_image`)
and the weights' own preprocessing, a text checked to hold a token to read, a SMILES made a
graph by the featurizer of training (`zoo.loading.smiles`). Each refusal names the input (its
position, a file's name) and is the same on every path that reads it: ``zoo.predict``, the
MLflow model, ``zoo predict`` and ``zoo serve``."""

from __future__ import annotations

import io
import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset

from zoo.errors import InvalidArgumentError, ZooError
from zoo.loading.images import MAX_IMAGE_PIXELS, open_image
from zoo.loading.smiles import graph_or_problem, parse_smiles

Sample = Any  # an image's preprocessed tensor [C, H, W], a checked text, a molecule's graph


def read_image(item: Any, name: str, max_pixels: int = MAX_IMAGE_PIXELS) -> Image.Image:
    """One image source as a PIL image: a file (through zoo's bounded reader), its bytes, a PIL
    image, or uint8 pixels [H, W] / [H, W, C]; ``name`` names the input in a refusal (a file's
    path, a row's value, ``inputs[3]``)."""
    if isinstance(item, Image.Image):
        return item
    if isinstance(item, np.ndarray | torch.Tensor):
        pixels = np.asarray(item)
        if pixels.dtype != np.uint8:
            raise InvalidArgumentError(f"{name} has {pixels.dtype} pixels; an image's pixels are uint8")
        return Image.fromarray(pixels[..., 0] if pixels.ndim == 3 and pixels.shape[-1] == 1 else pixels)
    if isinstance(item, bytes | bytearray | memoryview):
        if not len(item):
            raise InvalidArgumentError(f"{name} is empty (0 bytes); pass an image file's bytes")
        return open_image(io.BytesIO(item), max_pixels=max_pixels, name=name)
    return open_image(item, max_pixels=max_pixels, name=name)


def text_sample(text: str, name: str) -> str:
    """``text`` when the model has a token to read in it (an empty text would be refused by the
    model, or answered from nothing)."""
    if not text:
        raise InvalidArgumentError(f"{name} is empty: give each text at least one character")
    return text


def molecule_sample(smiles: str, name: str) -> Any:
    """The PyG graph of ``smiles``, as training made it; a SMILES zoo or RDKit cannot read is
    refused naming it (``name`` says where it is, ``SMILES[1]``; empty for a file's row)."""
    graph, problem = graph_or_problem(parse_smiles(smiles))
    if graph is None:
        shown = smiles if len(smiles) <= 80 else smiles[:77] + "..."
        named = f"{name} " if name else ""  # a file's row has its line beside it already
        raise InvalidArgumentError(f"{named}{shown!r} is not a usable SMILES ({problem}); check it")
    return graph


class Samples(Dataset):
    """``items`` prepared one by one by ``prepare`` (item, name) -> sample; an item it refuses
    gives its `ZooError` in its place (a worker process's error keeps its message whole, and the
    caller chooses: refuse the whole call, or report the row and go on)."""

    def __init__(self, items: Sequence[Any], names: Sequence[str], prepare: Callable[[Any, str], Sample]) -> None:
        self.items, self.names, self.prepare = items, names, prepare

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> Sample | ZooError:
        try:
            return self.prepare(self.items[index], self.names[index])
        except ZooError as error:
            return error


class ImagePreparation:
    """An image source's preprocessed tensor (`read_image`, then the weights' transforms): a
    picklable callable that worker processes run without the model."""

    def __init__(self, preprocess: Callable[[Image.Image], torch.Tensor], max_pixels: int) -> None:
        self.preprocess, self.max_pixels = preprocess, max_pixels

    def __call__(self, item: Any, name: str, max_pixels: int | None = None) -> torch.Tensor:
        return self.preprocess(read_image(item, name, max_pixels or self.max_pixels))


def sample_chunks(samples: Samples, size: int, num_workers: int = 0) -> Iterator[list[Sample | ZooError]]:
    """``samples`` in chunks of ``size``, in order: prepared here, or with ``num_workers`` by that
    many processes of a torch DataLoader (images decode in parallel while the model runs)."""
    if num_workers == 0:
        for start in range(0, len(samples), size):
            yield [samples[i] for i in range(start, min(start + size, len(samples)))]
        return
    loader = DataLoader(samples, batch_size=size, shuffle=False, num_workers=num_workers, collate_fn=_as_list)
    yield from loader


def _as_list(chunk: list[Sample | ZooError]) -> list[Sample | ZooError]:
    return chunk


def item_names(items: Sequence[Any], where: str = "inputs", start: int = 0) -> list[str]:
    """How a refusal names each of ``items``: a file by its path, anything else by its position
    in ``where`` (``inputs[3]``)."""
    return [
        os.fspath(item) if isinstance(item, str | os.PathLike) else f"{where}[{start + i}]"
        for i, item in enumerate(items)
    ]
