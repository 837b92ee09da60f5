"""Graph-model variants on the four molecule sets, many runs at once: each set's scaffold split and
test metrics (`zoo.training.recipes.evaluate`) with zoo finetune's current molecule defaults
(``--steps`` and ``--patience`` change them), one process per run; and the molecule recipe as it
was until 2026-11-29 (`compare`), which published the gin3 molecule weights until then.

The molecules are read by RDKit once, here (``cache``), into a file of plain tensors (the
one-hot atom and bond features as their nonzero columns, loaded with ``weights_only=True``),
so the runs need neither RDKit nor the sets' files: they can go to a machine with more cores
or a GPU (``benchmarks/gpu_session.sh sweep``). ``run`` trains every variant of ``--variants``
on every set and seed with `train_variant` (`TrainConfig`
from zoo finetune's data defaults, best epoch on validation, standardisation folded into the
head) and measures the test split with `zoo.training.recipes.evaluate.evaluate`, ``--jobs``
runs at a time (one thread each), and writes one CSV row per run and a Markdown table of
mean ± std per set and variant.

    .venv/bin/python benchmarks/molecule_sweep.py cache --out .gpu/molecules.pt [--split-seeds 0 1 2]
    .venv/bin/python benchmarks/molecule_sweep.py run --cache .gpu/molecules.pt --jobs 2 \\
        [--variants gin3 gin3_h128 ...] [--sets ...] [--seeds 0 1 2] [--split-seeds 0] [--device cpu|cuda] [--csv OUT.csv]

``--split-seeds`` trains on other Bemis–Murcko splits than the cards' (split seed 0), stored in the
cache by ``cache --split-seeds``: whether an order between models holds beyond one split.
"""

from __future__ import annotations

import argparse
import csv
import multiprocessing
import os
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from zoo.bounds import SEED, count

SETS = ("nci-tpsa", "chembl2321810", "freesolv", "solubility")
# variant -> (architecture, options on top of MODEL_KWARGS)
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "gin3": ("gin3", {}),  # gin3 at the defaults of the day the run was made (now 3 x 96, dropout 0.2)
    "gin3_h64": ("gin3", {"hidden_channels": 64}),
    "gin_sum": ("gin_sum", {}),
    "gin_sopool": ("gin_sopool", {}),
    "gin3_h128": ("gin3", {"hidden_channels": 128}),
    "gin_sum_h128": ("gin_sum", {"hidden_channels": 128}),
    "gin_sopool_h128": ("gin_sopool", {"hidden_channels": 128}),
    "gin3_h128_l5": ("gin3", {"hidden_channels": 128, "num_layers": 5}),
    "gin3_h128_l3": ("gin3", {"hidden_channels": 128, "num_layers": 3}),
    "gin3_h96": ("gin3", {"hidden_channels": 96}),
    "gin3_h96_l3": ("gin3", {"hidden_channels": 96, "num_layers": 3}),  # gin3's default size
    "gin3_h96_l3_vn": ("gin3", {"hidden_channels": 96, "num_layers": 3, "virtual_node": True}),
    "gin3_h96_l3_so": ("gin3", {"hidden_channels": 96, "num_layers": 3, "second_order": True}),
    "gin3_h96_l3_bi": ("gin3", {"hidden_channels": 96, "num_layers": 3, "bilinear": 32}),
    "gin3_h96_l3_bi_open": ("gin3", {"hidden_channels": 96, "num_layers": 3, "bilinear": 32, "start_as_sum": False}),
    "gin3_h96_l3_raw": ("gin3", {"hidden_channels": 96, "num_layers": 3, "center": False, "normalize": False}),
    "gin3_h64_l4_bi": ("gin3", {"hidden_channels": 64, "num_layers": 4, "bilinear": 32}),
    "gin3_h96_l3_bi_nosum": (
        "gin3",
        {"hidden_channels": 96, "num_layers": 3, "bilinear": 32, "first_order": False},
    ),
    "gin3_h64_l4_bi_nosum": (
        "gin3",
        {"hidden_channels": 64, "num_layers": 4, "bilinear": 32, "first_order": False},
    ),
    "gin3_h128_drop": ("gin3", {"hidden_channels": 128, "dropout": 0.1}),
    # dropout before the head at gin3's default size, with and without SOPool's part and the sum
    "gin3_h96_l3_d1": ("gin3", {"hidden_channels": 96, "num_layers": 3, "dropout": 0.1}),
    "gin3_h96_l3_d2": ("gin3", {"hidden_channels": 96, "num_layers": 3, "dropout": 0.2}),
    "gin3_h96_l3_bi_d1": ("gin3", {"hidden_channels": 96, "num_layers": 3, "bilinear": 32, "dropout": 0.1}),
    "gin3_h96_l3_bi_nosum_d1": (
        "gin3",
        {"hidden_channels": 96, "num_layers": 3, "bilinear": 32, "first_order": False, "dropout": 0.1},
    ),
    "gin3_h96_l3_d3": ("gin3", {"hidden_channels": 96, "num_layers": 3, "dropout": 0.3}),
    "gin3_h96_l3_bi_d2": ("gin3", {"hidden_channels": 96, "num_layers": 3, "bilinear": 32, "dropout": 0.2}),
    "gin_sopool_d1": ("gin_sopool", {"dropout": 0.1}),
    "gin_sopool_d2": ("gin_sopool", {"dropout": 0.2}),
    "gin3_h256": ("gin3", {"hidden_channels": 256}),
    "gin_sum_h256": ("gin_sum", {"hidden_channels": 256}),
}
# gin3's default dropout is 0.2 since 2026-11-28; its variants ran without before and keep that
# meaning ("gin3" alone is the default of the day)
VARIANTS = {
    name: (arch, {"dropout": 0.0, **kwargs} if arch == "gin3" and name != "gin3" else kwargs)
    for name, (arch, kwargs) in VARIANTS.items()
}


# The molecule recipe as it was until 2026-11-29 (the gin3.* weights published until then): gin3
# at 4 x 128 beside gin_sum and gin_sopool at their default 4 x 64 and Morgan fingerprints, seeds
# 0-2 on split 0, its own training loop (`train_variant`) at the molecule defaults of 2026-11-28
# (`PUBLISHED_TRAINING`); `compare` reruns the rows the graph page quotes from it.
SEEDS = (0, 1, 2)
MODEL_KWARGS = {"num_layers": 4, "head": "graph_regression"}  # every variant's, below its own options
GIN3_PUBLISHED = {"hidden_channels": 128, "first_order": True, "moment": True, "triangle": True, "l2": False}
COMPARED: dict[str, tuple[str, dict[str, Any]]] = {
    "gin3": ("gin3", {**GIN3_PUBLISHED, "dropout": 0.0}),
    "gin_sum": ("gin_sum", {}),
    "gin_sopool": ("gin_sopool", {}),
    # the replacement of the sum that gin3's readout was until 2026-11: moments L2-normalised per graph
    "gin3, readout before 2026-11": (
        "gin3",
        {"hidden_channels": 64, "first_order": False, "l2": True, "start_as_sum": False, "dropout": 0.0},
    ),
}
PUBLISHED_TRAINING: dict[str, Any] = {"steps": 1200, "early_stopping_patience": 20}


def recipe_config(task: str, epochs: int | None = None, training: dict[str, Any] | None = PUBLISHED_TRAINING) -> Any:
    """The `TrainConfig` (fp32) of the task's training split: the molecule data defaults with
    ``training``'s step budget and early-stopping patience (None: what ``zoo finetune`` gives
    molecules now), over ``epochs`` epochs when given."""
    import dataclasses

    from zoo.training.data.molecules import molecule_sets
    from zoo.training.finetune.defaults import data_defaults
    from zoo.training.loop.trainer import TrainConfig

    source, (train, _, _) = molecule_sets.benchmark(task)
    base = TrainConfig(precision="fp32", seed=0, progress=False, tensorboard=False, plot=False)
    training = training or {}
    config = dataclasses.replace(base, **data_defaults(source, len(train), base.batch_size, training.get("steps")))
    if "early_stopping_patience" in training:
        config = dataclasses.replace(config, early_stopping_patience=training["early_stopping_patience"])
    return config if epochs is None else config.for_epochs(epochs)


def train_variant(
    variant: tuple[str, dict[str, Any]], task: str, config: Any, seed: int, limit: int | None = None
) -> tuple[torch.nn.Module, list]:
    """``variant`` (architecture, options) trained on the task's training split (its first ``limit``
    molecules) with ``config``, the best epoch by validation loss, standardisation folded into the
    head; and the history. The set comes from `molecule_sets.benchmark` (a worker's cache in a sweep)."""
    import dataclasses

    import zoo
    from zoo.training.data.molecules import molecule_sets
    from zoo.training.loop.steps import RegressionStep, fold_standardisation
    from zoo.training.loop.trainer import Trainer

    arch, options = variant
    source, (train, val, _) = molecule_sets.benchmark(task)
    train = train[:limit] if limit is not None else train
    targets = torch.cat([source.make_subset(train, None)[i].y for i in range(len(train))])
    mean, std = float(targets.mean()), float(targets.std())
    torch.manual_seed(seed)
    kwargs = {**MODEL_KWARGS, **options, "in_channels": source.in_chans, "edge_dim": source.edge_dim}
    model = zoo.load(arch, pretrained=False, num_classes=1, **kwargs)
    config = dataclasses.replace(config, seed=seed)
    trainer = Trainer(model, config, step_fn=RegressionStep(mean, std), collate_fn=source.collate_fn)
    history = trainer.fit(source.make_subset(train, None), source.make_subset(val, None))
    model.load_state_dict(trainer.best_state_dict())
    target = {"name": molecule_sets.SETS[task].label, "mean": mean, "std": std}
    if not fold_standardisation(model.eval(), mean, std):
        target["standardised"] = True
    model.pretrained_cfg = {**model.pretrained_cfg, "target": target}
    return model, history


def fingerprint_baselines(task: str, seeds: Sequence[int], limit: int | None) -> dict[str, list[dict[str, float]]]:
    """Morgan fingerprints (radius 2, 2048 bits) with a random forest (300 trees, one run per
    seed) and ridge (alpha 1), fitted on the training split, measured on the test split."""
    import numpy as np
    from rdkit import Chem
    from rdkit.Chem import rdFingerprintGenerator
    from sklearn.ensemble import RandomForestRegressor
    from sklearn.linear_model import Ridge

    from zoo.training.data.molecules import molecule_sets
    from zoo.training.loop.meter import regression_metrics

    source, (train, _, test) = molecule_sets.benchmark(task)
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


def seed_table(results: dict[str, list[dict[str, float]]], seconds: dict[str, float]) -> list[str]:
    """``results`` (test metrics by model, one per seed) as Markdown rows of mean ± std."""

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
    task: str,
    limit: int | None = None,
    seeds: Sequence[int] = SEEDS,
    labels: Sequence[str] = ("gin3", "gin_sum", "gin_sopool"),
    fingerprints: bool = True,
) -> list[str]:
    """The recipe before 2026-11-29: the models of ``labels`` (`COMPARED`) and, with
    ``fingerprints``, the fingerprint baselines on the task's split 0, per seed, as `seed_table`'s
    rows, e.g. ``compare("freesolv")`` or one more row: ``compare("nci-tpsa", labels=["gin3, readout
    before 2026-11"], fingerprints=False)``."""
    from zoo.training.recipes.evaluate import evaluate

    config = recipe_config(task)
    results: dict[str, list[dict[str, float]]] = {}
    seconds: dict[str, float] = {}
    for label in labels:
        start = time.perf_counter()
        results[label] = [evaluate(train_variant(COMPARED[label], task, config, s, limit)[0], task) for s in seeds]
        seconds[label] = (time.perf_counter() - start) / len(seeds)
    if fingerprints:
        start = time.perf_counter()
        baselines = fingerprint_baselines(task, seeds, limit)
        results |= baselines
        seconds |= dict.fromkeys(baselines, (time.perf_counter() - start) / (len(seeds) + 1))
    return seed_table(results, seconds)


_GRAPH_KEYS = ("x", "edge_attr")  # one-hot features, stored as their nonzero columns


def write_cache(out: Path, sets: Sequence[str], split_seeds: Sequence[int] = (0,)) -> None:
    """Each set's graphs (features as nonzero columns), splits (one per seed of ``split_seeds``)
    and target, as plain tensors."""
    from zoo.training.data.molecules.molecule_sets import benchmark

    cache: dict[str, Any] = {}
    for name in sets:
        source, (train, val, test) = benchmark(name)
        graphs = list(source.make_subset(range(source.num_samples), None))
        entry: dict[str, Any] = {"split": [torch.tensor(s) for s in (train, val, test)], "target": source.target}
        entry["splits"] = {seed: [torch.tensor(s) for s in benchmark(name, seed)[1]] for seed in split_seeds}
        entry["sizes"] = torch.tensor([[g.num_nodes, g.edge_index.shape[1], g.triangle_index.shape[1]] for g in graphs])
        for key in _GRAPH_KEYS:
            dense = torch.cat([g[key] for g in graphs])
            assert bool(((dense == 0) | (dense == 1)).all()), f"{name}: {key} is not one-hot"
            rows, cols = dense.nonzero(as_tuple=True)
            entry[key] = (
                torch.bincount(rows, minlength=len(dense)).to(torch.uint8),
                cols.to(torch.int16),
                dense.shape[1],
            )
        entry["edge_index"] = torch.cat([g.edge_index for g in graphs], 1).to(torch.int16)
        entry["triangle_index"] = torch.cat([g.triangle_index for g in graphs], 1).to(torch.int16)
        entry["y"] = torch.cat([g.y for g in graphs])
        entry["meta"] = {"in_chans": source.in_chans, "edge_dim": source.edge_dim, "description": source.description}
        cache[name] = entry
        print(f"{name}: {len(graphs)} molecules", flush=True)
    torch.save(cache, out)
    print(f"wrote {out} ({out.stat().st_size / 1e6:.1f} MB)")


def _dense(counts: torch.Tensor, cols: torch.Tensor, width: int) -> torch.Tensor:
    rows = torch.repeat_interleave(torch.arange(len(counts)), counts.long())
    dense = torch.zeros(len(counts), width)
    dense[rows, cols.long()] = 1.0
    return dense


def _graphs(entry: dict[str, Any]) -> list[Any]:
    from torch_geometric.data import Data

    x, edge_attr = _dense(*entry["x"]), _dense(*entry["edge_attr"])
    nodes, edges, triangles = (entry["sizes"][:, i].tolist() for i in range(3))
    xs, eas, eis = x.split(nodes), edge_attr.split(edges), entry["edge_index"].long().split(edges, 1)
    tis = entry["triangle_index"].long().split(triangles, 1)
    ys = entry["y"].split(1)
    return [Data(x=a, edge_index=b, edge_attr=c, triangle_index=d, y=e) for a, b, c, d, e in zip(xs, eis, eas, tis, ys)]


def cached_benchmarks(path: Path) -> dict[str, Any]:
    """set name -> (MoleculeSource, {split seed: (train, val, test)}): `molecule_sets.benchmark`'s
    source and its splits (a cache without ``splits`` holds split seed 0's alone)."""
    from torch_geometric.loader.dataloader import Collater

    from zoo.training.data.molecules.molecule_files import MoleculeSource, _Graphs

    out = {}
    for name, entry in torch.load(path, weights_only=True).items():
        graphs, meta = _graphs(entry), entry["meta"]
        source = MoleculeSource(
            kind="graphs", description=meta["description"], num_samples=len(graphs), num_classes=1,
            class_names=None, make_subset=lambda subset, _t, g=graphs: _Graphs([g[i] for i in subset]),
            in_chans=meta["in_chans"], collate_fn=Collater(graphs), target=entry["target"],
            edge_dim=meta["edge_dim"], split_by="scaffold",
        )  # fmt: skip
        splits = entry.get("splits", {0: entry["split"]})
        out[name] = (source, {seed: tuple(s.tolist() for s in split) for seed, split in splits.items()})
    return out


def _cached_benchmark(name: str, split_seed: int | None = None) -> tuple[Any, tuple[list[int], ...]]:
    """`molecule_sets.benchmark` from a worker's cache, at the split of the run it is on."""
    source, splits = _TABLE[name]
    seed = _SPLIT[0] if split_seed is None else split_seed
    if seed not in splits:
        raise KeyError(f"{name}: the cache holds splits {sorted(splits)}, not {seed} (write it with --split-seeds)")
    return source, splits[seed]


def _init(cache: str, device: str, steps: int | None, patience: int | None) -> None:
    """A worker: one thread, the sets from the cache in place of RDKit's reading, and the step
    budget and early-stopping patience to train with (None: zoo finetune's own; patience 0: none)."""
    torch.set_num_threads(1)
    import zoo.training.data.molecules.molecule_sets as molecule_sets

    _TABLE.clear()
    _TABLE.update(cached_benchmarks(Path(cache)))
    molecule_sets.benchmark = _cached_benchmark  # type: ignore[assignment]
    os.environ["ZOO_SWEEP_DEVICE"] = device
    _TRAINING.clear()
    _TRAINING.update({"steps": steps} if steps is not None else {})
    _TRAINING.update({"early_stopping_patience": patience or None} if patience is not None else {})


_TRAINING: dict[str, Any] = {}  # a worker's changes to zoo finetune's molecule defaults (`_init`)
_TABLE: dict[str, Any] = {}  # a worker's sets from the cache (`_init`)
_SPLIT = [0]  # the split seed of the run a worker is on


def _one(job: tuple[str, str, int, int]) -> dict[str, Any]:
    import dataclasses

    from zoo.training.finetune.defaults import MOLECULE_STEPS
    from zoo.training.recipes.evaluate import evaluate

    variant, name, seed, _SPLIT[0] = job
    device = os.environ["ZOO_SWEEP_DEVICE"]
    base = recipe_config(name, training=_TRAINING or None)
    config = dataclasses.replace(base, device=device, num_workers=0)  # a pool worker has no children
    start, note = time.perf_counter(), ""
    try:
        model, history = train_variant(VARIANTS[variant], name, config, seed)
    except Exception as error:  # noqa: BLE001  (a run that fails is a row that says why)
        note = f"{type(error).__name__}: {error}"[:300]
        if device == "cpu":
            return {"set": name, "variant": variant, "seed": seed, "split": _SPLIT[0], "error": note}
        device, start = "cpu", time.perf_counter()  # the accelerator failed: the same run on the CPU
        model, history = train_variant(VARIANTS[variant], name, dataclasses.replace(config, device="cpu"), seed)
    seconds = time.perf_counter() - start
    metrics = evaluate(model, name)
    best = min(range(len(history)), key=lambda i: history[i].get("val_loss", float("inf")))
    steps = _TRAINING.get("steps", MOLECULE_STEPS)
    return {"set": name, "variant": variant, "seed": seed, **metrics, "epochs": len(history), "best_epoch": best + 1,
            "val_loss": history[best].get("val_loss"), "seconds": round(seconds, 1), "device": device,
            "steps": steps, "patience": config.early_stopping_patience, "note": note, "split": _SPLIT[0]}  # fmt: skip


def _table(rows: list[dict[str, Any]]) -> list[str]:
    lines = ["| set | variant | test RMSE | test R² | val loss | s/run |", "| --- | --- | --- | --- | --- | --- |"]
    for name, split in dict.fromkeys((r["set"], r.get("split", 0)) for r in rows):
        label = name if split == 0 else f"{name} (split {split})"
        ours = [r for r in rows if r["set"] == name and r.get("split", 0) == split]
        for variant in dict.fromkeys(r["variant"] for r in ours):
            done = [r for r in ours if r["variant"] == variant and "rmse" in r]
            if not done:
                continue

            def cell(key: str, runs: list[dict[str, Any]] = done) -> str:
                values = [float(r[key]) for r in runs]
                spread = statistics.stdev(values) if len(values) > 1 else 0.0
                return f"{statistics.mean(values):.3f} ± {spread:.3f}"

            seconds = statistics.mean(float(r["seconds"]) for r in done)
            lines.append(
                f"| {label} | {variant} | {cell('rmse')} | {cell('r2')} | {cell('val_loss')} | {seconds:.0f} |"
            )
    return lines


def _cost(job: tuple[str, str, int, int]) -> float:
    """A run's expected cost, to order the jobs: the set's size times the width's."""
    variant, name, _, _ = job
    width = VARIANTS[variant][1].get("hidden_channels", 64) / 64
    return {"nci-tpsa": 4, "chembl2321810": 2, "freesolv": 1, "solubility": 2}[name] * width**1.5


def run(args: argparse.Namespace) -> None:
    splits = args.split_seeds
    jobs = [(v, s, seed, k) for s in args.sets for k in splits for seed in args.seeds for v in args.variants]
    jobs.sort(key=_cost, reverse=True)  # the longest first: the pool's last minutes are not one long run
    rows: list[dict[str, Any]] = []
    # here first: a pool respawns a worker whose setup fails, forever
    _init(str(args.cache), args.device, args.steps, args.patience)
    missing = [f"{name} split {k}" for name in args.sets for k in splits if k not in _TABLE.get(name, (None, {}))[1]]
    if missing:
        raise SystemExit(
            f"molecule_sweep: {args.cache} lacks {', '.join(missing)}: write it with "
            f"`cache --out {args.cache} --sets {' '.join(args.sets)} --split-seeds {' '.join(map(str, splits))}`"
        )
    context = multiprocessing.get_context("spawn")
    with context.Pool(
        args.jobs, initializer=_init, initargs=(str(args.cache), args.device, args.steps, args.patience)
    ) as pool:
        try:
            for row in pool.imap_unordered(_one, jobs):
                rows.append(row)
                print(row, flush=True)
                if args.csv:
                    _write(args.csv, rows)
        except KeyboardInterrupt:  # a time limit: the table of the runs that finished
            print(f"stopped: {len(rows)} of {len(jobs)} runs finished", flush=True)
    print("\n".join(_table(rows)))


def _write(path: Path, rows: list[dict[str, Any]]) -> None:
    names = list(dict.fromkeys(k for r in rows for k in r))
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=names)
        writer.writeheader()
        writer.writerows(rows)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    cache = sub.add_parser("cache")
    cache.add_argument("--out", type=Path, required=True)
    cache.add_argument("--sets", nargs="+", default=SETS, choices=SETS)
    cache.add_argument(
        "--split-seeds",
        nargs="+",
        type=SEED.parse,
        default=[0],
        help="scaffold splits to store (the cards': 0)",
    )
    go = sub.add_parser("run")
    go.add_argument("--cache", type=Path, required=True)
    go.add_argument("--variants", nargs="+", default=["gin3", "gin_sum", "gin_sopool"], choices=sorted(VARIANTS))
    go.add_argument("--sets", nargs="+", default=SETS, choices=SETS)
    go.add_argument("--seeds", nargs="+", type=SEED.parse, default=[0, 1, 2])
    go.add_argument("--split-seeds", nargs="+", type=SEED.parse, default=[0], help="scaffold splits (the cards': 0)")
    go.add_argument("--jobs", type=count(1, 256).parse, default=2)
    go.add_argument("--device", default="cpu")
    go.add_argument(
        "--steps", type=count(1, 10**7).parse, help="the step budget for these runs (zoo's: MOLECULE_STEPS)"
    )
    go.add_argument(
        "--patience", type=count(0, 10**6).parse, help="early-stopping patience for these runs (0: none; zoo's: none)"
    )
    go.add_argument("--csv", type=Path)
    args = parser.parse_args(argv)
    if args.mode == "cache":
        write_cache(args.out, args.sets, args.split_seeds)
    else:
        run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
