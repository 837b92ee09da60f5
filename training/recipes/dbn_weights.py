"""Deep belief nets (``dbn.digits``, ``dbn.fmnist``): greedy RBM pretraining on the training
rows, then backprop fine-tuning of the unrolled net (`zoo.training.belief_nets.finetune_dbn`, a
`zoo.training.loop.trainer.Trainer` run), measured on the test split. The last epoch's weights are
published; a fixed-seed validation hold-out from the training rows draws the curves (it picks
nothing).

    python -m zoo.training.recipes.dbn_weights digits          # scikit-learn's nudged digits, 64-256-256
    python -m zoo.training.recipes.dbn_weights fashion-mnist   # 784-1000-1000, pixels scaled to [0, 1]
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import asdict, replace
from typing import Any

import torch

import zoo
from zoo.errors import InvalidArgumentError
from zoo.training.belief_nets import BackpropConfig, RBMConfig, finetune_dbn, pretrain
from zoo.training.data.builtin import load_fashion_mnist
from zoo.training.data.tensors.digits import load_nudged_digits
from zoo.training.recipes.evaluate import evaluate, task_key
from zoo.training.recipes.publish import WEIGHTS_DIR, Provenance, Stopwatch, publish, recipe_main

SEED = 0
RECIPES: dict[str, dict[str, Any]] = {
    "digits": {
        "name": "dbn.digits",
        "task": "digits-nudged",
        "sizes": (64, 256, 256),
        "val_fraction": 0.1,
        "rbm": RBMConfig(epochs=20),
        "finetune": BackpropConfig(epochs=40),
        "default": False,
        "title": "DBN 64-256-256 on scikit-learn's nudged digits",
        "data": "scikit-learn's load_digits, nudged by 1-pixel shifts (5 x 1797 images), minmax_scale, "
        "train_test_split(test_size=0.2, random_state=0) as in scikit-learn's RBM example",
    },
    "fashion-mnist": {
        "name": "dbn.fmnist",
        "task": "fashion-mnist-pixels",
        "sizes": (784, 1000, 1000),
        "val_fraction": 5000 / 60000,
        "rbm": RBMConfig(epochs=10),
        "finetune": BackpropConfig(epochs=20, learning_rate=0.1),
        "default": True,
        "title": "DBN 784-1000-1000 on Fashion-MNIST pixels",
        "data": "Fashion-MNIST official splits (Debian package dataset-fashion-mnist), 784 pixels scaled to [0, 1]",
    },
}


def _load(dataset: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The training rows and labels (the test split is read by `zoo.training.recipes.evaluate`)."""
    if dataset == "digits":
        x_train, _, y_train, _ = load_nudged_digits()
        return torch.from_numpy(x_train).float(), torch.from_numpy(y_train).long()
    images, labels = load_fashion_mnist("train")
    return images.reshape(-1, 784).float() / 255, labels


def run(
    dataset: str,
    epochs: int | None = None,
    limit: int | None = None,
    out: str = str(WEIGHTS_DIR),
    command: str | None = None,
) -> dict[str, Any]:
    """Pretrain, fine-tune, evaluate and publish one DBN; returns its entry. ``epochs`` and
    ``limit`` shorten a run (smoke tests)."""
    if dataset not in RECIPES:
        raise InvalidArgumentError(f"no DBN recipe for {dataset!r}; recipes: {', '.join(RECIPES)}")
    recipe = RECIPES[dataset]
    rbm_config = replace(recipe["rbm"], epochs=epochs or recipe["rbm"].epochs)
    tune_config = replace(recipe["finetune"], epochs=epochs or recipe["finetune"].epochs)
    clock = Stopwatch()
    x, y = _load(dataset)
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(SEED))
    num_val = round(len(x) * recipe["val_fraction"])
    val, train = order[:num_val], order[num_val:][:limit]
    torch.manual_seed(SEED)
    model = zoo.load("dbn", pretrained=False, sizes=recipe["sizes"], num_classes=10)
    generator = torch.Generator().manual_seed(SEED)
    layers = pretrain(model, x[train], rbm_config, valid=x[val], generator=generator)
    history = finetune_dbn(model, x[train], y[train], tune_config, valid=(x[val], y[val]), generator=generator)
    metrics = {task_key(recipe["task"], None): evaluate(model, recipe["task"])}
    size = len(x) - num_val if limit is None else min(limit, len(x) - num_val)
    rbm_lines = [
        f"RBM {s.layer + 1} after {s.epoch} epochs: reconstruction error {s.reconstruction_error:.4f}, "
        f"free-energy gap (held-out - train) {s.free_energy_gap:.3f}"
        for layer in layers
        for s in layer[-1:]
    ]
    provenance = Provenance(
        data=f"{recipe['data']}; {size} training rows, {num_val} held out by seed {SEED} for the curves",
        command=command or f"python -m zoo.training.recipes.dbn_weights {dataset}",
        seed=SEED,
        epochs=tune_config.epochs,
        wall_time_s=clock.seconds,
        hyperparameters={
            "pretraining (every RBM)": str(asdict(rbm_config)),
            "fine-tuning": str(asdict(tune_config)),
            "published weights": "the last fine-tuning epoch",
        },
        notes=rbm_lines,
    )
    rows = [{k: v for k, v in asdict(h).items() if v is not None} for h in history]
    return publish(
        model,
        recipe["name"],
        title=recipe["title"],
        task=recipe["task"],
        metrics=metrics,
        provenance=provenance,
        history=rows,
        model_kwargs={"sizes": list(recipe["sizes"])},
        default=recipe["default"],
        root=out,
    )


def main(argv: Sequence[str] | None = None) -> int:
    return recipe_main("zoo.training.recipes.dbn_weights", __doc__, RECIPES, run, argv)


if __name__ == "__main__":
    sys.exit(main())
