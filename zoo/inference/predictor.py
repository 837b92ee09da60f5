"""`Predictor`: a model and the one path from its inputs to its answers (`zoo.inference`), and
`predict`, which is ``zoo.predict``:

    >>> import zoo
    >>> rows = zoo.predict("resnet20.fmnist", ["shirt.png", "boot.png"], top_k=3)
    >>> rows[0]["classes"][0]            # {"label": "Shirt", "index": 6, "score": 0.93}
    >>> zoo.predict("runs/prices", "photos/")     # a regression run: [{"value": 41.3, "target": "price"}, ...]

``zoo predict`` (image arguments, ``--input`` rows) and ``zoo serve`` (every protocol) prepare
their inputs through it too (`Predictor.prepare`, `Predictor.chunks`, `Predictor.tensor`) and
read its answers (`Predictor.answers`): one input, one answer or one refusal, on every path.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import torch
import torch.nn as nn

from zoo.bounds import WORKERS
from zoo.deploy.exporter import example_input_for
from zoo.errors import InvalidArgumentError, ZooError
from zoo.inference.items import batch_of, image_items, strings
from zoo.inference.samples import (
    ImagePreparation,
    Sample,
    Samples,
    item_names,
    molecule_sample,
    sample_chunks,
    text_sample,
)
from zoo.loading.build import load
from zoo.loading.images import MAX_IMAGE_PIXELS, open_image
from zoo.loading.outputs import OutputMeaning, output_meaning
from zoo.loading.smiles import reads_molecules
from zoo.loading.transforms import text_length, transforms
from zoo.store import weight_entries
from zoo.tokenizer import ByteTokenizer

KINDS = ("images", "vectors", "text", "molecules")
BATCH_SIZE = 64
_WHAT = {"images": "images", "vectors": "feature rows", "text": "texts", "molecules": "SMILES"}


class Predictor:
    """``model`` (a name or folder `zoo.load` takes, or a loaded zoo model) with what its kind of
    input becomes (`prepare`, `batches`) and what its outputs mean (``meaning``, `answers`);
    calling it gives one answer per input. ``num_workers`` processes decode image files while the
    model runs; ``max_pixels`` bounds an image before it is decoded. A model that predicts
    nothing (features only, a language model) is refused."""

    def __init__(
        self,
        model: str | os.PathLike | nn.Module,
        *,
        device: str | torch.device | None = "cpu",
        batch_size: int = BATCH_SIZE,
        num_workers: int = 0,
        max_pixels: int = MAX_IMAGE_PIXELS,
    ) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or not 1 <= batch_size <= 65536:
            raise InvalidArgumentError(f"batch_size must be a whole number from 1 to 65536, got {batch_size!r}")
        if WORKERS.problem(num_workers):
            raise InvalidArgumentError(f"num_workers {WORKERS.problem(num_workers)}, got {num_workers!r}")
        self.name = model if isinstance(model, str) else os.fspath(model) if isinstance(model, os.PathLike) else None
        self.model = (model if isinstance(model, nn.Module) else load(model, device=device)).eval()
        cfg = getattr(self.model, "pretrained_cfg", None) or {}
        if "architecture" not in cfg:
            raise InvalidArgumentError(f"{type(self.model).__name__} is not a zoo model (no pretrained_cfg)")
        self.kind = "molecules" if reads_molecules(cfg) else weight_entries.input_kind(cfg["architecture"])
        shown = self.name or cfg["architecture"]
        if self.kind not in KINDS or (self.kind == "text" and cfg.get("head") != "sequence_classification"):
            raise InvalidArgumentError(f"{shown} does not predict classes or values (it reads {self.kind} and has head "
                                       f"{cfg.get('head')!r}); a language model continues text: zoo generate")  # fmt: skip
        if cfg.get("features_only") or not getattr(self.model, "num_classes", 0):
            raise InvalidArgumentError(
                f"{shown} outputs feature maps, not class scores (a features-only model or one without a "
                "classifier): predicting needs a classifier's or a regression's weights"
            )
        self.meaning: OutputMeaning = output_meaning(cfg)
        self.batch_size, self.num_workers, self.device = batch_size, num_workers, next(self.model.parameters()).device
        self.shape = tuple(example_input_for(self.model, 1).shape[1:]) if self.kind in ("images", "vectors") else ()
        self.length = text_length(self.model) if self.kind == "text" else 0
        self.image = ImagePreparation(transforms(self.model), max_pixels) if self.kind == "images" else None

    def sample(self, item: Any, name: str, max_pixels: int | None = None) -> Sample:
        """One input ready to batch (`collate`): an image source decoded (up to ``max_pixels``,
        default the predictor's) and preprocessed, a text checked, a SMILES as its graph, a
        feature row as a float tensor; refused naming ``name``."""
        if self.image is not None:
            return self.image(item, name, max_pixels)
        if self.kind == "text":
            return text_sample(item, name)
        if self.kind == "molecules":
            return molecule_sample(item, name)
        return self.tensor(item, name)[0]

    def names(self, items: Sequence[Any], where: str = "inputs", start: int = 0) -> list[str]:
        """How a refusal names each of ``items``: a file by its path, a text by its number
        (``text 3``), anything else by its place in ``where`` (``inputs[3]``)."""
        if self.kind == "images":
            return item_names(items, where, start)
        if self.kind == "text":
            return [f"text {start + i}" for i in range(len(items))]
        return [f"{where}[{start + i}]" for i in range(len(items))]

    def collate(self, samples: Sequence[Sample]) -> Any:
        """Samples as one model-ready batch: stacked tensors, the texts' byte tokens at the model's
        own length (``{"input_ids", "attention_mask"}``), or one PyG batch of graphs."""
        if self.kind == "text":
            ids, mask = ByteTokenizer()(list(samples), max_length=self.length)
            return {"input_ids": ids, "attention_mask": mask}
        if self.kind == "molecules":
            import zoo.architectures.graph  # noqa: F401  (first: it imports PyG with its import-time warnings silenced)

            # isort: split
            from torch_geometric.data import Batch

            return Batch.from_data_list(list(samples))
        return torch.stack(list(samples))

    def prepare(self, items: Any, where: str | None = None, start: int = 0) -> Any:
        """One chunk of inputs of the model's kind (as ``zoo.predict`` takes them) as a model-ready
        batch, each checked; the first refused raises, named by its place in ``where`` (default
        ``inputs``) counted from ``start``, or by its file's path."""
        if self.kind == "vectors":
            return self.tensor(items, where)
        if self.kind == "images":
            items = image_items(items)
            if isinstance(items, torch.Tensor):  # a preprocessed float batch
                return self.tensor(items, where)
        else:
            items = strings(items, _WHAT[self.kind])
        names = self.names(items, where or "inputs", start)
        return self.collate([self.sample(item, name) for item, name in zip(items, names)])

    def tensor(self, array: Any, where: str | None = None, lone: bool = True) -> torch.Tensor:
        """Numbers the model reads as they are (feature rows, or preprocessed images [N, C, H, W])
        as a checked float batch; ``where`` names them in a refusal (a request's input)."""
        if self.kind not in ("images", "vectors"):
            raise InvalidArgumentError(f"{self.name or 'this model'} reads {_WHAT[self.kind]} as strings, not numbers")
        what = "feature rows" if self.kind == "vectors" else "preprocessed images"
        return batch_of(array, self.shape, what, where, lone)

    def chunks(self, items: Sequence[Any], names: Sequence[str] | None = None) -> Iterator[list[Sample | ZooError]]:
        """``items`` prepared (`sample`) `batch_size` at a time, in order, each chunk a list of
        samples or the `ZooError` refusing one: image files decoded by ``num_workers`` processes."""
        names = list(names) if names is not None else self.names(items)
        if self.image is None:
            yield from sample_chunks(Samples(items, names, self.sample), self.batch_size)
            return
        # an image's preparation runs without the model: in worker processes, when there are some
        yield from sample_chunks(Samples(items, names, self.image), self.batch_size, self.num_workers)

    def batches(self, inputs: Any) -> Iterator[Any]:
        """Model-ready batches of ``inputs``, `batch_size` samples each, checked before any runs
        (a missing or unreadable file, a value of the wrong type)."""
        if self.kind in ("text", "molecules"):
            items: Any = strings(inputs, _WHAT[self.kind])
        elif self.kind == "vectors":
            yield from self.tensor(inputs).split(self.batch_size)
            return
        else:
            items = image_items(inputs)
            if isinstance(items, torch.Tensor):  # a preprocessed float batch
                yield from self.tensor(items).split(self.batch_size)
                return
            for item in items:  # a missing or unreadable file is found before the model runs
                if isinstance(item, str | os.PathLike):
                    open_image(item, decode=False)
        for chunk in self.chunks(items):
            refused = next((sample for sample in chunk if isinstance(sample, ZooError)), None)
            if refused is not None:
                raise refused
            yield self.collate(chunk)

    def forward(self, batch: Any) -> torch.Tensor:
        """The model's float outputs [N, K] of one batch, on the CPU."""
        return model_outputs(self.model, batch, self.device)

    def outputs(self, inputs: Any) -> torch.Tensor:
        """The model's float outputs [N, K] for ``inputs``, on the CPU."""
        return torch.cat([self.forward(batch) for batch in self.batches(inputs)])

    def answers(self, outputs: torch.Tensor, top_k: int = 5) -> list[dict[str, Any]]:
        """One answer per row of outputs, as ``zoo predict`` prints them and ``zoo serve`` sends
        them: ``{"classes": [{"label", "index", "score"}, ...]}`` (the top k by probability),
        ``{"value", "target"}`` (a regression, in the target's units) or ``{"labels": [...]}``
        (multi-label, each over its saved threshold)."""
        return self.meaning.answers(outputs, check_top_k(top_k))

    def __call__(self, inputs: Any, top_k: int = 5) -> list[dict[str, Any]]:
        """One answer per input (`answers`), in input order."""
        check_top_k(top_k)  # before the model runs
        return self.answers(self.outputs(inputs), top_k)


def check_top_k(top_k: Any) -> int:
    """``top_k`` when it is a whole number from 1 to 1,000,000 (the classes an answer may list)."""
    if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= 1_000_000:
        raise InvalidArgumentError(f"top_k must be a whole number from 1 to 1000000, got {top_k!r}")
    return top_k


@torch.no_grad()
def model_outputs(model: nn.Module, batch: Any, device: torch.device) -> torch.Tensor:
    """``model``'s float outputs [N, K] of a batch (a tensor, a PyG batch, or named tensors such
    as a text's tokens) moved to ``device``; on the CPU (``zoo predict``, ``zoo eval --data``)."""
    if isinstance(batch, Mapping):
        out = model(
            **{key: value.to(device) if isinstance(value, torch.Tensor) else value for key, value in batch.items()}
        )
    else:
        out = model(batch.to(device))
    return out.float().reshape(len(out), -1).cpu()


def predict(
    model: str | os.PathLike | nn.Module,
    inputs: Any,
    *,
    top_k: int = 5,
    device: str | torch.device | None = "cpu",
    batch_size: int = BATCH_SIZE,
    num_workers: int = 0,
) -> list[dict[str, Any]]:
    """What ``model`` (a name, a saved or fine-tuned run's folder, or a loaded zoo model) says
    of each of ``inputs``: image files, a folder of them, PIL images or uint8 pixel arrays (or
    a preprocessed float batch [N, C, H, W]) for image models; feature rows [N, D]; texts for a
    text classifier; SMILES for a molecule model. One answer per input (`Predictor.__call__`),
    in input order; a bad input is an `InvalidArgumentError` naming it before the model runs.
    ``num_workers`` processes decode image files (0: here)."""
    return Predictor(model, device=device, batch_size=batch_size, num_workers=num_workers)(inputs, top_k)
