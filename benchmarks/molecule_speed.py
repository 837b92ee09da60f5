"""Training time per epoch of zoo's graph models on real molecules, side by side in one run:
``gin_sum``, ``gin_sopool`` and ``gin3`` (third-order pooling, its default readout) at their
default sizes (4 layers of 64, 4 of 64, 3 of 96), and gin3 at the size of its published molecule
weights (4 of 128) and of the baselines (4 of 64), on the training split of a molecule set
(`zoo.training.data.molecules.molecule_sets`), the same GIN encoder, batch, optimizer and data
order. The models train in lockstep, one epoch each in turn with the order rotating every
epoch, so they share the machine's load alike; the table gives the median seconds per epoch
(forward, backward, step and batching; the molecules' graphs and triangles are listed once when
the set is read, as `zoo finetune` does) and the ratio to ``gin_sum``. The machine and its load
average go in the first line.

    .venv/bin/python benchmarks/molecule_speed.py [--sets nci-tpsa chembl2321810] [--epochs 7] [--threads 1]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch.utils.data import DataLoader

import zoo
from zoo.deploy.bench import machine_line
from zoo.training.data.molecules.molecule_sets import SETS, benchmark
from zoo.training.loop.steps import RegressionStep

# label -> (architecture, size): each model at its default size (what zoo finetune trains), and
# gin3 at its published molecule weights' size and at the baselines'
SIZES: dict[str, tuple[str, dict[str, int]]] = {
    "gin_sum": ("gin_sum", {}),
    "gin_sopool": ("gin_sopool", {}),
    "gin3": ("gin3", {}),
    "gin3, 4 layers of 128": ("gin3", {"hidden_channels": 128, "num_layers": 4}),
    "gin3, 4 layers of 64": ("gin3", {"hidden_channels": 64, "num_layers": 4}),
    "gin3 + SOPool part, 4 layers of 64": ("gin3", {"hidden_channels": 64, "num_layers": 4, "bilinear": 32}),
}
MODELS = tuple(SIZES)


def epoch_seconds(name: str, epochs: int, batch_size: int) -> dict[str, list[float]]:
    """Seconds of each training epoch of every model in `MODELS` on set ``name``, in lockstep."""
    source, (train, _, _) = benchmark(name)
    data = source.make_subset(train, None)
    step = RegressionStep(source.target["mean"], source.target["std"])
    runs = {}
    for label, (arch, size) in SIZES.items():
        torch.manual_seed(0)
        model = zoo.load(arch, pretrained=False, num_classes=1, in_channels=source.in_chans,
                         edge_dim=source.edge_dim, head="graph_regression", **size)  # fmt: skip
        runs[label] = (model.train(), torch.optim.AdamW(model.parameters(), lr=1e-3))
    times: dict[str, list[float]] = {arch: [] for arch in MODELS}
    for epoch in range(epochs):
        order = list(MODELS[epoch % len(MODELS) :] + MODELS[: epoch % len(MODELS)])
        for arch in order:
            model, optimizer = runs[arch]
            loader = DataLoader(data, batch_size, shuffle=True, collate_fn=source.collate_fn,
                                generator=torch.Generator().manual_seed(epoch))  # fmt: skip
            start = time.perf_counter()
            for batch in loader:
                loss = step(model, batch).loss
                loss.backward()
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
            times[arch].append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    regression = [name for name in SETS if name != "solubility-class"]  # the same molecules as solubility
    parser.add_argument("--sets", nargs="+", default=regression, choices=regression)
    parser.add_argument("--epochs", type=int, default=7, help="epochs per model (the first is a warm-up, not counted)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(machine_line())
    print("| molecules | model | median s per epoch | x gin_sum |")
    print("| --- | --- | ---: | ---: |")
    for name in args.sets:
        times = {
            arch: statistics.median(t[1:]) for arch, t in epoch_seconds(name, args.epochs, args.batch_size).items()
        }
        for arch, seconds in times.items():
            print(f"| {name} | {arch} | {seconds:.2f} | {seconds / times['gin_sum']:.2f} |", flush=True)


if __name__ == "__main__":
    main()
