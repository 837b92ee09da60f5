"""The published gin3 molecule weights, trained on real molecules from wheels on the package index
(`zoo.training.data.molecules.molecule_sets`) the way a user trains theirs: each set's
Bemis–Murcko scaffold split 0 written as train.csv / val.csv (or the publisher's test set) and
``zoo finetune START --data train.csv --val-data val.csv --seed 0`` with every other setting its
molecule default (`zoo.training.finetune.defaults`), from `START`: the pretrained backbone
``gin3.moses_descriptors`` or random weights, whichever had the lower mean validation RMSE over
the three-split comparison of `benchmarks/molecules_vs_chemprop.py` (`RESULTS`), which the card
quotes beside chemprop's recorded runs:

- ``gin3.nci_tpsa``: topological polar surface area of 2,000 NCI molecules;
- ``gin3.chembl2321810``: the measured activity of a ChEMBL series (1,017 molecules);
- ``gin3.freesolv``: FreeSolv's hydration free energies (642 molecules);
- ``gin3.solubility``: aqueous solubility, log S (1,282 molecules, the publisher's test set).

    python -m zoo.training.recipes.molecule_weights nci-tpsa|chembl2321810|freesolv|solubility [--epochs N]
        [--limit N] [--out weights/]

`compare`, `measure` and `_train` are the recipe before 2026-11-29 (gin3 at 4 x 128 beside
gin_sum, gin_sopool and Morgan fingerprints, 3 seeds on split 0, its own training loop at the
molecule defaults of 2026-11-28): they rerun the rows the graph page quotes from it, and
`benchmarks/molecule_sweep.py` trains with `_train`.
"""

from __future__ import annotations

import csv
import dataclasses
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

import zoo
from zoo.errors import InvalidArgumentError
from zoo.loading.smiles import INPUT_FORMAT
from zoo.store.files import write_bytes_atomic
from zoo.training.data.molecules.molecule_sets import SETS, benchmark, write_splits
from zoo.training.finetune.defaults import data_defaults
from zoo.training.finetune.finetuning import finetune_with_config
from zoo.training.finetune.options import FinetuneOptions
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


# Where each entry starts: the start with the lower mean validation RMSE over its runs (three
# scaffold splits x three seeds; the solubility set: its fixed test set, three seeds) in RESULTS'
# backbone-vs-scratch.csv; the table's rows of those two starts, by their names there
BACKBONE, SCRATCH = "gin3.moses_descriptors", "gin3"
START = {"nci-tpsa": BACKBONE, "chembl2321810": BACKBONE, "freesolv": SCRATCH, "solubility": BACKBONE}
COMPARED = {BACKBONE: BACKBONE, SCRATCH: "gin3 from scratch"}
CHEMPROP = "chemprop D-MPNN (its command line)"
WHY_START = (
    "of the two starts (the pretrained backbone `gin3.moses_descriptors`, or `gin3` from random weights), the one "
    "with the lower mean validation RMSE in the comparison below"
)
FINETUNE = (
    "`zoo finetune START --data train.csv --val-data val.csv --seed 0`, every other setting its molecule default "
    "(zoo.training.finetune.defaults), the best epoch by validation loss; train.csv and val.csv are the split's "
    "molecules as `zoo.training.data.molecules.molecule_sets.write_splits(TASK, DIR, None)` writes them; the "
    "weights are that run's (split 0, seed 0: in the comparison below)"
)
RESULTS = Path(__file__).resolve().parents[2] / "results" / "molecules_vs_chemprop"  # the repository's

# How the gin3.* molecule weights published until 2026-11-29 trained: the molecule defaults of
# their day (until 2026-11-28), kept so that `compare` and `measure` rerun what made them
PUBLISHED_TRAINING: dict[str, Any] = {"steps": 1200, "early_stopping_patience": 20}


def recipe_config(
    task: str, epochs: int | None = None, training: dict[str, Any] | None = PUBLISHED_TRAINING
) -> TrainConfig:
    """What the task's training split trains with (fp32): the molecule data defaults with
    ``training``'s step budget and early-stopping patience (the weights published until 2026-11-29 by default;
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
) -> dict[str, Any]:
    """Fine-tune `START` [task] on the task's split-0 training molecules with ``zoo finetune``'s
    defaults (its validation molecules choose the epoch), publish the result with the three-split
    comparison of `RESULTS` in the card. ``epochs`` and ``limit`` shorten it (smoke tests)."""
    if task not in RECIPES:
        raise InvalidArgumentError(f"no molecule recipe for {task!r}; recipes: {', '.join(RECIPES)}")
    recipe, start, clock = RECIPES[task], START[task], Stopwatch()
    with tempfile.TemporaryDirectory(prefix="zoo-molecule-recipe-") as folder:
        paths = write_splits(task, Path(folder) / "data", limit)
        config = TrainConfig(seed=0, progress=False, tensorboard=False)
        config = config if epochs is None else dataclasses.replace(config, epochs=epochs)
        given = {"seed", "progress", "tensorboard"} | ({"epochs"} if epochs is not None else set())
        options = FinetuneOptions(val_data=paths["val"], post_training=False)
        result = finetune_with_config(start, paths["train"], Path(folder) / "run", options, config=config, given=given)
        training = _section(Path(folder) / "run" / "README.md", "## Training")
    model = result.model.eval()
    source, (train, val, test) = benchmark(task)
    backbone = f"; fine-tuned from `{start}` (its card states the corpus and recipe)" if start == BACKBONE else ""
    data = (
        f"{SETS[task].description}, read as a CSV of smiles,{SETS[task].label} by zoo finetune's reader (RDKit, "
        f"PyG's atom and bond features one-hot: {source.in_chans} per atom, {source.edge_dim} per bond); "
        f"Bemis–Murcko scaffold split 0: {len(train[:limit] if limit else train)} train, {len(val)} "
        f"validation, {len(test)} test molecules, no scaffold shared across them{backbone}"
    )
    provenance = Provenance(
        data=data,
        command=command or f"python -m zoo.training.recipes.molecule_weights {task}",
        seed=0,
        epochs=len(result.history),
        wall_time_s=clock.seconds,
        hyperparameters={
            "start": f"`{start}`{'' if start == BACKBONE else ' (random weights)'}, {WHY_START}",
            "fine-tuning": FINETUNE,
        },
    )
    entry = publish(
        model, recipe.name, title=recipe.title, task=task, metrics={task: evaluate(model, task)},
        provenance=provenance, history=result.history, model_kwargs=model.pretrained_cfg["model_kwargs"],
        default=False, root=out,
        entry_fields={"input_format": INPUT_FORMAT, "target": model.pretrained_cfg["target"]},
    )  # fmt: skip
    card = Path(out) / entry["card"]
    lines = ["", "## The fine-tuning run (its own card's training section)", "", *training, ""]
    lines += comparison_section(task)
    write_bytes_atomic(card, (card.read_text() + "\n".join(lines)).encode())
    return entry


def _section(card: Path, title: str) -> list[str]:
    """The lines of ``card``'s section ``title`` (to its next section)."""
    lines = card.read_text().splitlines()
    begin = lines.index(title) + 1
    end = next((i for i in range(begin, len(lines)) if lines[i].startswith("## ")), len(lines))
    while begin < end and not lines[begin].strip():
        begin += 1
    while end > begin and not lines[end - 1].strip():
        end -= 1
    return lines[begin:end]


_SHOWN = (*COMPARED.values(), CHEMPROP)  # the rows a card shows: the two starts and chemprop


def comparison_section(task: str, results: Path = RESULTS) -> list[str]:
    """The card's three-split comparison: each model's test RMSE on scaffold splits 0-2 (the
    solubility set: its fixed test set) over seeds 0-2, as ``results``' CSVs record them
    (`benchmarks/molecules_vs_chemprop.py`), and its mean validation RMSE where recorded."""
    runs: dict[str, list[dict[str, str]]] = {}
    for file in ("backbone-vs-scratch.csv", "chemprop-recorded.csv"):
        if not (results / file).is_file():
            return [f"(The comparison is not here: {results / file} is missing.)", ""]
        with open(results / file, newline="") as rows:
            for row in csv.DictReader(rows):
                model = row.get("model", CHEMPROP)
                if row["set"] == task and row.get("training_molecules", "all") == "all" and model in _SHOWN:
                    runs.setdefault(model, []).append(row)
    splits = "its fixed test set" if SETS[task].fixed_test else "three scaffold splits"
    lines = [
        f"## Comparison over {splits} (test RMSE)",
        "",
        "Each split's mean over seeds 0-2 (its range), the mean of the split means ± their std, and the "
        f"mean validation RMSE that chose the start; from `results/{results.name}/` "
        "(`benchmarks/molecules_vs_chemprop.py`; chemprop 2.3.1 with its defaults, through its own command line).",
        "",
        "| model | split 0 | split 1 | split 2 | mean of the splits | mean validation RMSE | runs |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for model, rows in runs.items():
        splits = {s: [float(r["test_rmse"]) for r in rows if int(r["split"]) == s] for s in range(3)}
        cells = [f"{statistics.mean(v):.3f} ({min(v):.3f}-{max(v):.3f})" if v else "-" for v in splits.values()]
        means = [statistics.mean(v) for v in splits.values() if v]
        spread = f" ± {statistics.stdev(means):.3f}" if len(means) > 1 else ""
        val = [float(r["val_rmse"]) for r in rows if r.get("val_rmse", "nan") != "nan"]
        val_cell = f"{statistics.mean(val):.3f}" if val else "-"
        lines.append(
            f"| {model} | {' | '.join(cells)} | {statistics.mean(means):.3f}{spread} | {val_cell} | {len(rows)} |"
        )
    return [*lines, ""]


def main(argv: Sequence[str] | None = None) -> int:
    return recipe_main("zoo.training.recipes.molecule_weights", __doc__, RECIPES, run, argv)


if __name__ == "__main__":
    sys.exit(main())
