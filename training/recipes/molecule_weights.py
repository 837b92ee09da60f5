"""The graph models on real molecules from wheels on the package index
(`zoo.training.data.molecules.molecule_sets`), read as a user's CSV of SMILES, split by Bemis–Murcko
scaffold into train / validation / test (80 / 10 / 10; or the publisher's test set), regressed
with `RegressionStep` (MSE on the standardised target, the standardisation folded into the head
afterwards) with the training defaults `zoo finetune` gives molecules
(`zoo.training.finetune.defaults`):

- ``gin3.nci_tpsa``: topological polar surface area of 2,000 NCI molecules;
- ``gin3.chembl2321810``: the measured activity of a ChEMBL series (1,017 molecules);
- ``gin3.freesolv``: FreeSolv's hydration free energies (642 molecules);
- ``gin3.solubility``: aqueous solubility, log S (1,282 molecules, the publisher's test set).

Each card compares ``gin3`` (third-order pooling) with ``gin_sum`` (first order) and
``gin_sopool`` (second order), the same GIN and budget, and with Morgan fingerprints (radius 2,
2048 bits) + scikit-learn's random forest and ridge: 3 seeds each, mean ± std of the test
metrics, as measured. The published weights are gin3's seed-0 run.

    python -m zoo.training.recipes.molecule_weights nci-tpsa|chembl2321810|freesolv|solubility [--epochs N]
        [--limit N] [--out weights/]
"""

from __future__ import annotations

import dataclasses
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

import zoo
from zoo.errors import InvalidArgumentError
from zoo.loading.smiles import INPUT_FORMAT
from zoo.store.files import write_bytes_atomic
from zoo.training.data.molecules.molecule_sets import SETS, benchmark
from zoo.training.finetune.defaults import data_defaults
from zoo.training.loop.steps import RegressionStep, fold_standardisation
from zoo.training.loop.trainer import TrainConfig, Trainer
from zoo.training.recipes.evaluate import evaluate
from zoo.training.recipes.publish import WEIGHTS_DIR, Provenance, Stopwatch, publish, recipe_main

SEEDS = (0, 1, 2)
ARCHS = ("gin3", "gin_sum", "gin_sopool")  # what the cards compare: labels of VARIANTS
MODEL_KWARGS = {"num_layers": 4, "head": "graph_regression"}  # the baselines at their default size (4 x 64)
# gin3's size and readout (4 x 128; its default is 3 x 96 since 2026-11-28), written into the
# entries so the weights load whatever gin3's defaults become
GIN3 = {"hidden_channels": 128, "first_order": True, "moment": True, "triangle": True, "l2": False, "dropout": 0.0}
# label -> (architecture, its options); "gin3, readout before 2026-11" is the replacement of the sum
# that gin3's readout was until then: moment and triangles only, moments L2-normalised per graph
VARIANTS = {label: (label, {}) for label in ARCHS} | {
    "gin3": ("gin3", GIN3),
    "gin3, readout before 2026-11": (
        "gin3",
        {"hidden_channels": 64, "first_order": False, "l2": True, "start_as_sum": False, "dropout": 0.0},
    ),
}


@dataclasses.dataclass(frozen=True)
class MoleculeRecipe:
    name: str
    title: str


RECIPES = {
    "nci-tpsa": MoleculeRecipe("gin3.nci_tpsa", "GIN with third-order pooling, TPSA of NCI molecules"),
    "chembl2321810": MoleculeRecipe(
        "gin3.chembl2321810", "GIN with third-order pooling, activity of the ChEMBL series CHEMBL2321810"
    ),
    "freesolv": MoleculeRecipe("gin3.freesolv", "GIN with third-order pooling, FreeSolv hydration free energy"),
    "solubility": MoleculeRecipe("gin3.solubility", "GIN with third-order pooling, aqueous solubility (log S)"),
}


# How the published gin3.* molecule weights trained: the molecule defaults of their day (until
# 2026-11-28), kept so that their recipe reruns what made them
PUBLISHED_TRAINING: dict[str, Any] = {"steps": 1200, "early_stopping_patience": 20}


def recipe_config(
    task: str, epochs: int | None = None, training: dict[str, Any] | None = PUBLISHED_TRAINING
) -> TrainConfig:
    """What the task's training split trains with (fp32): the molecule data defaults with
    ``training``'s step budget and early-stopping patience (the published weights' by default;
    None: what ``zoo finetune gin3 --data molecules.csv`` gives molecules now), over ``epochs``
    epochs when given."""
    source, (train, _, _) = benchmark(task)
    base = TrainConfig(precision="fp32", seed=0, progress=False, tensorboard=False, plot=False)
    training = training or {}
    config = dataclasses.replace(base, **data_defaults(source, len(train), base.batch_size, training.get("steps")))
    if "early_stopping_patience" in training:
        config = dataclasses.replace(config, early_stopping_patience=training["early_stopping_patience"])
    return config if epochs is None else config.for_epochs(epochs)


def _train(label: str, task: str, config: TrainConfig, seed: int, limit: int | None) -> tuple[torch.nn.Module, list]:
    """`VARIANTS` [label] trained on the task's training split (its first ``limit`` molecules), the best
    epoch by validation loss, standardisation folded into the head; and the history."""
    arch, options = VARIANTS[label]
    source, (train, val, _) = benchmark(task)
    train = train[:limit] if limit is not None else train
    targets = torch.cat([source.make_subset(train, None)[i].y for i in range(len(train))])
    mean, std = float(targets.mean()), float(targets.std())
    torch.manual_seed(seed)
    model = zoo.load(
        arch,
        pretrained=False,
        num_classes=1,
        in_channels=source.in_chans,
        edge_dim=source.edge_dim,
        **{**MODEL_KWARGS, **options},  # a variant may change the width or depth
    )
    config = dataclasses.replace(config, seed=seed)
    trainer = Trainer(model, config, step_fn=RegressionStep(mean, std), collate_fn=source.collate_fn)
    history = trainer.fit(source.make_subset(train, None), source.make_subset(val, None))
    model.load_state_dict(trainer.best_state_dict())
    target = {"name": SETS[task].label, "mean": mean, "std": std}
    if not fold_standardisation(model.eval(), mean, std):
        target["standardised"] = True
    model.pretrained_cfg = {**model.pretrained_cfg, "target": target}
    return model, history


def _fingerprint_baselines(task: str, seeds: Sequence[int], limit: int | None) -> dict[str, list[dict[str, float]]]:
    """Morgan fingerprints (radius 2, 2048 bits) with a random forest (300 trees, one run per
    seed) and ridge (alpha 1), fitted on the training split, measured on the test split."""
    import numpy as np
    from rdkit import Chem
    from rdkit.Chem import rdFingerprintGenerator
    from sklearn.ensemble import RandomForestRegressor
    from sklearn.linear_model import Ridge

    from zoo.training.loop.meter import regression_metrics

    source, (train, _, test) = benchmark(task)
    train = train[:limit] if limit is not None else train
    generator = rdFingerprintGenerator.GetMorganGenerator(radius=2, fpSize=2048)
    bits = np.stack([generator.GetFingerprintAsNumPy(Chem.MolFromSmiles(s)) for s in source.smiles]).astype(np.float32)
    y = torch.cat([source.make_subset([i], None)[0].y for i in range(source.num_samples)]).numpy()

    def measure(model: Any) -> dict[str, float]:
        predicted = torch.from_numpy(model.fit(bits[train], y[train]).predict(bits[test])).float()
        truth = torch.from_numpy(y[test])
        error = predicted - truth
        sums = {"sum/count": len(test), "sum/abs_error": float(error.abs().sum()),
                "sum/squared_error": float(error.square().sum()), "sum/target": float(truth.sum()),
                "sum/target_squared": float(truth.square().sum())}  # fmt: skip
        return regression_metrics(sums)

    forest = [measure(RandomForestRegressor(n_estimators=300, n_jobs=2, random_state=seed)) for seed in seeds]
    return {"Morgan FP + random forest": forest, "Morgan FP + ridge": [measure(Ridge(alpha=1.0))] * len(seeds)}


def _table(results: dict[str, list[dict[str, float]]], seconds: dict[str, float]) -> list[str]:
    """The comparison as Markdown rows: mean ± std over the seeds of each metric."""

    def cell(runs: list[dict[str, float]], metric: str) -> str:
        values = [run[metric] for run in runs]
        spread = statistics.stdev(values) if len(values) > 1 else 0.0
        return f"{statistics.mean(values):.3f} ± {spread:.3f}"

    lines = ["| model | test MAE | test RMSE | test R² | wall time per run |", "| --- | --- | --- | --- | --- |"]
    for model, runs in results.items():
        lines.append(
            f"| {model} | {cell(runs, 'mae')} | {cell(runs, 'rmse')} | {cell(runs, 'r2')} | {seconds[model]:.0f} s |"
        )
    return lines


def compare(
    task: str, config: TrainConfig, limit: int | None, seeds: Sequence[int] = SEEDS, labels: Sequence[str] = ARCHS
) -> tuple[torch.nn.Module, list, dict[str, list[dict[str, float]]], dict[str, float]]:
    """Every graph model and the fingerprint baselines on the task's scaffold split, per seed;
    returns gin3's seed-0 model and history, the test metrics by model, and seconds per run."""
    results: dict[str, list[dict[str, float]]] = {}
    seconds: dict[str, float] = {}
    published: tuple[torch.nn.Module, list] | None = None
    for arch in labels:
        start, runs = time.perf_counter(), []
        for seed in seeds:
            model, history = _train(arch, task, config, seed, limit)
            runs.append(evaluate(model, task))
            if arch == "gin3" and published is None:
                published = (model, history)
        results[arch] = runs
        seconds[arch] = (time.perf_counter() - start) / len(seeds)
    start = time.perf_counter()
    baselines = _fingerprint_baselines(task, seeds, limit)
    results |= baselines
    seconds |= dict.fromkeys(baselines, (time.perf_counter() - start) / (len(seeds) + 1))
    assert published is not None  # internal: ARCHS holds gin3
    return published[0], published[1], results, seconds


def measure(task: str, label: str, seeds: Sequence[int] = SEEDS) -> list[str]:
    """One more row of a card's comparison, the recipe's split, budget and seeds, e.g.
    ``measure("nci-tpsa", "gin3 + sum readout")`` (the rows published beside the cards')."""
    config = recipe_config(task)
    results, seconds = {}, {}
    start = time.perf_counter()
    results[label] = [evaluate(_train(label, task, config, seed, None)[0], task) for seed in seeds]
    seconds[label] = (time.perf_counter() - start) / len(seeds)
    return _table(results, seconds)


def run(
    task: str = "nci-tpsa",
    epochs: int | None = None,
    limit: int | None = None,
    out: str = str(WEIGHTS_DIR),
    command: str | None = None,
    seeds: Sequence[int] = SEEDS,
) -> dict[str, Any]:
    """Train and compare on ``task``, publish gin3's seed-0 weights with the comparison in the card."""
    if task not in RECIPES:
        raise InvalidArgumentError(f"no molecule recipe for {task!r}; recipes: {', '.join(RECIPES)}")
    recipe = RECIPES[task]
    config = recipe_config(task, epochs)
    clock = Stopwatch()
    model, history, results, seconds = compare(task, config, limit, seeds)
    source, (train, val, test) = benchmark(task)
    data = (
        f"{SETS[task].description}, read as a CSV of smiles,{SETS[task].label} by zoo finetune's reader (RDKit, "
        f"PyG's atom and bond features one-hot: {source.in_chans} per atom, {source.edge_dim} per bond); "
        f"Bemis–Murcko scaffold split (seed 0): {len(train[:limit] if limit else train)} train, {len(val)} "
        f"validation, {len(test)} test molecules, no scaffold shared across them"
    )
    provenance = Provenance(
        data=data,
        command=command or f"python -m zoo.training.recipes.molecule_weights {task}",
        seed=0,
        epochs=len(history),
        wall_time_s=clock.seconds,
        hyperparameters=_hyperparameters(config),
    )
    kwargs = {"in_channels": source.in_chans, "edge_dim": source.edge_dim, **MODEL_KWARGS, **GIN3}
    entry = publish(
        model, recipe.name, title=recipe.title, task=task, metrics={task: evaluate(model, task)},
        provenance=provenance, history=history, model_kwargs=kwargs, default=False, root=out,
        entry_fields={"input_format": INPUT_FORMAT, "target": model.pretrained_cfg["target"]},
    )  # fmt: skip
    card = Path(out) / entry["card"]
    comparison = [
        "",
        "## Comparison (test split)",
        "",
        f"The same scaffold split and budget for every model, seeds {', '.join(map(str, seeds))}: mean ± std over "
        "the seeds (ridge is deterministic). Wall time per run on the hardware above.",
        "",
        *_table(results, seconds),
        "",
    ]
    write_bytes_atomic(card, (card.read_text() + "\n".join(comparison)).encode())
    return entry


def _hyperparameters(config: TrainConfig) -> dict[str, str]:
    return {
        "model": f"{MODEL_KWARGS}, gin3 128 channels wide, gin_sum and gin_sopool 64 (their defaults), readouts: "
        "gin3 the sum + third-order moment (rank 32, signed cube root) + triangles (32 channels), gated to start "
        "as the sum; gin_sopool bilinear second order; gin_sum sum",
        "optimizer": f"{config.optimizer}, lr {config.lr}, weight decay {config.weight_decay}, batch "
        f"{config.batch_size}, {config.scheduler} schedule with {config.warmup_epochs:.2g} warmup epochs, "
        f"gradient norm clipped at {config.clip_grad_norm:g}, {config.epochs} epochs"
        + (
            f" with early stopping after {config.early_stopping_patience} without gain"
            if config.early_stopping_patience
            else ""
        )
        + ", best epoch by validation loss, fp32 (the defaults zoo finetune gave molecules until 2026-11-28)",
        "loss": "MSE on the target standardised by the training split's mean and std (folded into the head)",
    }


def main(argv: Sequence[str] | None = None) -> int:
    return recipe_main("zoo.training.recipes.molecule_weights", __doc__, RECIPES, run, argv)


if __name__ == "__main__":
    sys.exit(main())
