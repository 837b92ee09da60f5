"""The published gin3 molecule weights, trained on real molecules from wheels on the package index
(`zoo.training.data.molecules.molecule_sets`) the way a user trains theirs: each set's
Bemis–Murcko scaffold split 0 written as train.csv / val.csv (or the publisher's test set) and
``zoo finetune START --data train.csv --val-data val.csv --seed 0`` with every other setting its
molecule default (`zoo.training.finetune.defaults`), from `START`: one of the pretrained
backbones ``gin3.moses_descriptors`` and ``gin3.moses_descriptors_logp`` or random weights,
whichever had the lowest mean validation RMSE over the three-split comparison of `benchmarks/molecules_vs_chemprop.py` (`RESULTS`), which the card
quotes beside chemprop's recorded runs:

- ``gin3.nci_tpsa``: topological polar surface area of 2,000 NCI molecules;
- ``gin3.chembl2321810``: the measured activity of a ChEMBL series (1,017 molecules);
- ``gin3.freesolv``: FreeSolv's hydration free energies (642 molecules);
- ``gin3.solubility``: aqueous solubility, log S (1,282 molecules, the publisher's test set).

    python -m zoo.training.recipes.molecule_weights nci-tpsa|chembl2321810|freesolv|solubility [--epochs N]
        [--limit N] [--out weights/]

The recipe before 2026-11-29 (gin3 at 4 x 128 beside gin_sum, gin_sopool and Morgan fingerprints,
3 seeds on split 0, its own training loop) is `benchmarks/molecule_sweep.py`'s `compare`.
"""

from __future__ import annotations

import csv
import dataclasses
import statistics
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from zoo.errors import InvalidArgumentError
from zoo.loading.smiles import INPUT_FORMAT
from zoo.store.files import write_bytes_atomic
from zoo.training.data.molecules.molecule_sets import SETS, benchmark, write_splits
from zoo.training.finetune.finetuning import finetune_with_config
from zoo.training.finetune.options import FinetuneOptions
from zoo.training.loop.trainer import TrainConfig
from zoo.training.recipes.evaluate import evaluate
from zoo.training.recipes.publish import WEIGHTS_DIR, Provenance, Stopwatch, publish, recipe_main


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
# backbone-vs-scratch.csv; the table's rows of the three starts, by their names there
BACKBONE, BACKBONE_LOGP, SCRATCH = "gin3.moses_descriptors", "gin3.moses_descriptors_logp", "gin3"
START = {"nci-tpsa": BACKBONE, "chembl2321810": BACKBONE_LOGP, "freesolv": SCRATCH, "solubility": BACKBONE_LOGP}
COMPARED = {BACKBONE: BACKBONE, BACKBONE_LOGP: BACKBONE_LOGP, SCRATCH: "gin3 from scratch"}
CHEMPROP = "chemprop D-MPNN (its command line)"
WHY_START = (
    "of the three starts (the pretrained backbones `gin3.moses_descriptors` and `gin3.moses_descriptors_logp`, or "
    "`gin3` from random weights), the one with the lowest mean validation RMSE in the comparison below"
)
FINETUNE = (
    "`zoo finetune START --data train.csv --val-data val.csv --seed 0`, every other setting its molecule default "
    "(zoo.training.finetune.defaults), the best epoch by validation loss; train.csv and val.csv are the split's "
    "molecules as `zoo.training.data.molecules.molecule_sets.write_splits(TASK, DIR, None)` writes them; the "
    "weights are that run's (split 0, seed 0: in the comparison below)"
)
RESULTS = Path(__file__).resolve().parents[2] / "results" / "molecules_vs_chemprop"  # the repository's


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
    backbone = f"; fine-tuned from `{start}` (its card states the corpus and recipe)" if start != SCRATCH else ""
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
            "start": f"`{start}`{' (random weights)' if start == SCRATCH else ''}, {WHY_START}",
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


_SHOWN = (*COMPARED.values(), CHEMPROP)  # the rows a card shows: the three starts and chemprop


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
