"""The graph model with third-order pooling (GIN + moment and triangle readouts), on the
graph tasks of `zoo.training.data.graphs.generated_graphs`:

- ``gin3.triangles_er``: regressing the triangle count of Erdős–Rényi G(10, 0.3) graphs (Chen
  et al., 2020) on the seeded 30 / 20 / 50% train / validation / test split. Trains on
  standardised counts, then refines with the normalisation layers frozen (see `GraphRecipe`),
  then folds the standardisation into the head, so the model outputs counts.
- ``gin3.fmnist``: classifying Fashion-MNIST images as 14x14 pixel graphs (official training
  split less a seeded 1/12 validation hold-out, 5,000 graphs; official 10k test split).

    python -m zoo.training.recipes.graph_weights triangles-er|fashion-mnist-graphs [--epochs N] [--limit N] [--out weights/]

``--limit`` trains on that many graphs (smoke tests).

Both keep the best epoch by validation loss.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch.nn.modules.batchnorm import _NormBase

import zoo.architectures.graph  # noqa: F401  (before PyG: it imports PyG with its import-time FutureWarning silenced)

# isort: split
from torch_geometric.data import InMemoryDataset
from torch_geometric.loader.dataloader import Collater

import zoo
from zoo.architectures.graph import AddTriangles
from zoo.errors import InvalidArgumentError
from zoo.training.data.graphs.generated_graphs import FashionMNISTGraphs, TriangleCounting
from zoo.training.loop.steps import StepOutput
from zoo.training.loop.trainer import TrainConfig, Trainer
from zoo.training.recipes.evaluate import evaluate, task_key
from zoo.training.recipes.publish import WEIGHTS_DIR, Provenance, Stopwatch, publish, recipe_main

SEED = 0
VAL_SHARE = 12  # one Fashion-MNIST training graph in 12 is held out for validation
SLICE = 1000  # Fashion-MNIST test graphs the tests re-measure


@dataclasses.dataclass(frozen=True)
class GraphRecipe:
    """One graph recipe. ``refine`` is an optional second stage from the first one's best
    weights with every normalisation layer frozen (eval mode, running statistics fixed): its
    loss is the eval-time function itself. BatchNorm's batch statistics make each training
    step's output differ from the eval-time one, and that noise, not the model, bounds how
    precisely a count is regressed (NMSE ~1e-5 after 300 epochs, far below after the refinement)."""

    name: str
    title: str
    model_kwargs: dict[str, Any]
    config: TrainConfig
    slices: tuple[int | None, ...] = (None,)
    default: bool = False  # zoo.load("gin3") picks these weights
    refine: TrainConfig | None = None


RECIPES = {
    "triangles-er": GraphRecipe(
        "gin3.triangles_er",
        "GIN with third-order pooling, triangle counting (Erdős–Rényi)",
        {"in_channels": 1, "head": "graph_regression", "hidden_channels": 64, "num_layers": 4, "dropout": 0.0},
        TrainConfig(
            epochs=300,
            batch_size=64,
            optimizer="adamw",
            lr=3e-3,
            weight_decay=0.01,
            scheduler="cosine",
            warmup_epochs=2.0,
            precision="fp32",  # as the published weights were trained
            seed=SEED,
        ),
        default=True,
        refine=TrainConfig(
            epochs=200,
            batch_size=64,
            optimizer="adamw",
            lr=1e-3,
            weight_decay=0.0,
            scheduler="cosine",
            precision="fp32",
            seed=SEED,
        ),
    ),
    "fashion-mnist-graphs": GraphRecipe(
        "gin3.fmnist",
        "GIN with third-order pooling, Fashion-MNIST as 14x14 pixel graphs",
        {"in_channels": 3, "hidden_channels": 64, "num_layers": 4, "dropout": 0.0},
        TrainConfig(
            epochs=10,
            batch_size=64,
            optimizer="adamw",
            lr=2e-3,
            weight_decay=1e-4,
            scheduler="cosine",
            warmup_epochs=1.0,
            precision="fp32",  # as the published weights were trained
            seed=SEED,
        ),
        slices=(None, SLICE),
    ),
}


class StandardisedMSE:
    """Mean squared error against counts standardised by the training set's mean and std."""

    def __init__(self, mean: float, std: float) -> None:
        self.mean, self.std = mean, std

    def __call__(self, model: torch.nn.Module, batch: Any) -> StepOutput:
        target = (batch.y.reshape(-1, 1) - self.mean) / self.std
        return StepOutput(F.mse_loss(model(batch).float(), target))


def _triangles(limit: int | None) -> tuple[InMemoryDataset, InMemoryDataset, dict[str, Any], str]:
    """Training and validation sets (the first ``limit`` training graphs), Trainer options and
    a data description."""
    train = TriangleCounting("er", "train", seed=SEED, pre_transform=AddTriangles())[:limit]
    val = TriangleCounting("er", "val", seed=SEED, pre_transform=AddTriangles())
    mean, std = float(train.y.mean()), float(train.y.std())
    data = (
        f"triangle counting on 5000 Erdős–Rényi G(10, 0.3) graphs made with seed {SEED} "
        f"(training.graph_data.TriangleCounting): {len(train)} train, {len(val)} validation, the rest test; "
        f"loss: MSE on counts standardised by the training mean {mean:.4f} and std {std:.4f} (folded into the "
        "head afterwards)"
    )
    return train, val, {"step_fn": StandardisedMSE(mean, std)}, data


def _fashion(limit: int | None) -> tuple[InMemoryDataset, InMemoryDataset, dict[str, Any], str]:
    graphs = FashionMNISTGraphs("train", num_graphs=limit, seed=SEED, pre_transform=AddTriangles())
    order = torch.randperm(len(graphs), generator=torch.Generator().manual_seed(SEED))
    held_out = len(graphs) // VAL_SHARE
    train, val = graphs[order[held_out:]], graphs[order[:held_out]]
    data = (
        f"Fashion-MNIST as 14x14 pixel graphs (training.graph_data.FashionMNISTGraphs: pixels brighter than 0.1 "
        f"after 2x2 average pooling, 8-neighbour edges, node features intensity, row, col): {len(graphs)} images "
        f"of the official training split, {held_out} of them held out by seed {SEED} for validation, "
        f"{len(train)} trained on; official 10k test split; cross-entropy"
    )
    return train, val, {}, data


def _fit(
    model: torch.nn.Module, config: TrainConfig, train: InMemoryDataset, val: InMemoryDataset, options: dict[str, Any]
) -> tuple[list[dict[str, float]], int | None]:
    """Train ``model`` with ``config``, keep its best epoch by validation loss; returns the
    history and that epoch."""
    trainer = Trainer(model, config, collate_fn=Collater(train), **options)
    history = trainer.fit(train, val)
    model.load_state_dict(trainer.best_state_dict())
    return history, trainer.state.best_epoch


def _refine(
    model: torch.nn.Module, config: TrainConfig, train: InMemoryDataset, val: InMemoryDataset, options: dict[str, Any]
) -> tuple[list[dict[str, float]], int | None]:
    """`GraphRecipe.refine`: train with every normalisation layer frozen (the Trainer keeps a
    norm layer whose parameters don't train in eval mode), then unfreeze them."""
    norms = [m for m in model.modules() if isinstance(m, _NormBase)]
    for norm in norms:
        norm.requires_grad_(False)
    try:
        return _fit(model, config, train, val, options)
    finally:
        for norm in norms:
            norm.requires_grad_(True)


def _train_stages(
    model: torch.nn.Module,
    recipe: GraphRecipe,
    epochs: int | None,
    train: InMemoryDataset,
    val: InMemoryDataset,
    options: dict[str, Any],
) -> tuple[list[dict[str, float]], dict[str, str]]:
    """The recipe's training and, when it has one, its refinement (each cut to ``epochs``);
    returns the history of both, epochs numbered on, and the card's hyperparameter lines."""
    config = recipe.config if epochs is None else recipe.config.for_epochs(epochs)
    history, best_epoch = _fit(model, config, train, val, options)
    lines = {
        "model": str(recipe.model_kwargs) + ", readout: third-order moment (rank 32) and triangle (32 channels)",
        "optimizer": f"{config.optimizer}, lr {config.lr}, weight decay {config.weight_decay}, batch "
        f"{config.batch_size}, {config.scheduler} schedule with {config.warmup_epochs:g} warmup epochs",
        "published weights": f"best epoch by validation loss: {best_epoch}",
    }
    if recipe.refine is None:
        return history, lines
    refine = recipe.refine if epochs is None else recipe.refine.for_epochs(min(epochs, recipe.refine.epochs))
    refined, best_refined = _refine(model, refine, train, val, options)
    first = len(history)
    history += [{**row, "epoch": row["epoch"] + first} for row in refined]
    lines["refinement"] = (
        f"from epoch {best_epoch}, every normalisation layer frozen (eval-mode statistics): {refine.optimizer}, "
        f"lr {refine.lr}, weight decay {refine.weight_decay}, batch {refine.batch_size}, {refine.scheduler} "
        f"schedule, {refine.epochs} epochs"
    )
    lines["published weights"] = (
        f"best refinement epoch by validation loss: {best_refined} (epoch {first + (best_refined or 0)} on the curves)"
    )
    return history, lines


def run(
    task: str = "triangles-er",
    epochs: int | None = None,
    limit: int | None = None,
    out: str = str(WEIGHTS_DIR),
    command: str | None = None,
) -> dict[str, Any]:
    """Train, evaluate and publish the weights of ``task``; returns the entry. ``epochs``
    shortens each stage to at most that many epochs (smoke tests)."""
    if task not in RECIPES:
        raise InvalidArgumentError(f"no graph recipe for {task!r}; recipes: {', '.join(RECIPES)}")
    recipe = RECIPES[task]
    clock = Stopwatch()
    train, val, trainer_options, data = (_triangles if task == "triangles-er" else _fashion)(limit)
    num_classes = 1 if recipe.model_kwargs.get("head") == "graph_regression" else int(train.y.max()) + 1
    torch.manual_seed(SEED)
    model = zoo.load("gin3", pretrained=False, num_classes=num_classes, **recipe.model_kwargs)
    history, hyperparameters = _train_stages(model, recipe, epochs, train, val, trainer_options)
    step_fn = trainer_options.get("step_fn")
    if isinstance(step_fn, StandardisedMSE):
        with torch.no_grad():  # outputs in counts: y = std * (W h + b) + mean
            model.fc.weight.mul_(step_fn.std)
            model.fc.bias.mul_(step_fn.std).add_(step_fn.mean)
    model.eval()
    metrics = {task_key(task, limit): evaluate(model, task, limit) for limit in recipe.slices}
    provenance = Provenance(
        data=data,
        command=command or f"python -m zoo.training.recipes.graph_weights {task}",
        seed=SEED,
        epochs=len(history),
        wall_time_s=clock.seconds,
        hyperparameters=hyperparameters,
    )
    return publish(
        model,
        recipe.name,
        title=recipe.title,
        task=task,
        metrics=metrics,
        provenance=provenance,
        history=history,
        model_kwargs=recipe.model_kwargs,
        default=recipe.default,
        root=out,
    )


def main(argv: Sequence[str] | None = None) -> int:
    return recipe_main("zoo.training.recipes.graph_weights", __doc__, RECIPES, run, argv)


if __name__ == "__main__":
    sys.exit(main())
