"""Graph readouts side by side on one GIN encoder (4 layers x 64 channels, jumping knowledge):
sum, second-order (SOPool bilinear) and third-order pooling (moment, triangle, both), on
triangle counting (Chen et al. 2020, Erdős–Rényi and random regular), house vs 5-cycle motif
classification and Fashion-MNIST pixel graphs.

Same encoder, optimiser (Adam, lr 1e-2, cosine), epochs, batches and seeds for every readout.
The readouts train in lockstep, one epoch each in turn (the order rotating every epoch), so
they share the machine's load alike; throughput is training graphs/s (forward, backward, step
and batching; the one-off AddTriangles preprocessing is timed apart, per graph), the median over epochs.
Metrics on the test split after the last epoch: counting, test MSE / test-label variance;
classification, accuracy. The third-order rows are ``gin3`` with its parts alone or together
(moment: rank 32; triangle: 32 channels), without the optional first-order term.

    .venv/bin/python benchmarks/graph_pooling.py --quick     # ~15 min on 2 shared cores
    .venv/bin/python benchmarks/graph_pooling.py             # longer training, more images
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch_geometric.data import InMemoryDataset
from torch_geometric.loader import DataLoader
from tqdm.auto import tqdm

import zoo
from zoo.architectures.graph import AddTriangles
from zoo.training.data.graphs.generated_graphs import (
    FashionMNISTGraphs,
    MotifClassification,
    TriangleCounting,
    normalized_mse,
)

VARIANTS: dict[str, tuple[str, dict]] = {
    "GIN + sum": ("gin_sum", {}),
    "GIN + second-order (SOPool)": ("gin_sopool", {}),
    "GIN + third-order moment": ("gin3", {"triangle": False}),
    "GIN + third-order triangle": ("gin3", {"moment": False}),
    "GIN + third-order both": ("gin3", {}),
}
BUDGETS = {  # epochs per task, and Fashion-MNIST train / test images
    "quick": dict(er=30, regular=30, motif=20, fashion=6, fashion_train=2000, fashion_test=1000),
    "full": dict(er=100, regular=100, motif=50, fashion=20, fashion_train=10000, fashion_test=2000),
}


@dataclass
class Task:
    name: str
    train: InMemoryDataset
    test: InMemoryDataset
    regression: bool
    epochs: int
    batch_size: int
    prep_ms_per_graph: float


def _listing_ms(dataset: InMemoryDataset, count: int = 300) -> float:
    """AddTriangles' one-off cost per graph, timed on the first ``count`` graphs."""
    graphs = [dataset[i] for i in range(min(count, len(dataset)))]
    start = time.perf_counter()
    for graph in graphs:
        AddTriangles()(graph)
    return (time.perf_counter() - start) * 1000 / len(graphs)


def make_tasks(budget: dict, seed: int, names: list[str]) -> list[Task]:
    tasks = []
    for kind in ("er", "regular"):
        if kind in names:
            train = TriangleCounting(kind, "train", seed=seed, pre_transform=AddTriangles())
            test = TriangleCounting(kind, "test", seed=seed, pre_transform=AddTriangles())
            label = "triangles, ER(10, 0.3)" if kind == "er" else "triangles, random regular"
            tasks.append(Task(label, train, test, True, budget[kind], 64, _listing_ms(train)))
    if "motif" in names:
        train = MotifClassification("train", seed=seed, pre_transform=AddTriangles())
        test = MotifClassification("test", seed=seed, pre_transform=AddTriangles())
        tasks.append(Task("house vs 5-cycle motif", train, test, False, budget["motif"], 64, _listing_ms(train)))
    if "fashion" in names:
        train = FashionMNISTGraphs("train", num_graphs=budget["fashion_train"], seed=seed, pre_transform=AddTriangles())
        test = FashionMNISTGraphs("test", num_graphs=budget["fashion_test"], seed=seed, pre_transform=AddTriangles())
        tasks.append(
            Task("Fashion-MNIST 14x14 pixel graphs", train, test, False, budget["fashion"], 64, _listing_ms(train))
        )
    return tasks


class Run:
    """One readout's model, optimiser and timings on one task."""

    def __init__(self, name: str, kwargs: dict, task: Task, seed: int) -> None:
        torch.manual_seed(seed)
        num_outputs = 1 if task.regression else task.train.num_classes
        head = "graph_regression" if task.regression else "graph_classification"
        self.model = zoo.load(
            name, pretrained=False, head=head, in_channels=task.train.num_features, num_classes=num_outputs, **kwargs
        )
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=1e-2)
        steps = task.epochs * -(-len(task.train) // task.batch_size)
        self.scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(self.optimizer, steps)
        self.task, self.seconds = task, []
        self.mean, self.std = (task.train.y.mean(), task.train.y.std()) if task.regression else (0.0, 1.0)

    def loss(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if self.task.regression:
            return F.mse_loss(out, (y - self.mean) / self.std)
        return F.cross_entropy(out, y)

    def train_epoch(self, epoch: int) -> None:
        loader = DataLoader(
            self.task.train,
            batch_size=self.task.batch_size,
            shuffle=True,
            generator=torch.Generator().manual_seed(epoch),
        )  # same batches for every readout
        self.model.train()
        start = time.perf_counter()
        for batch in loader:
            loss = self.loss(self.model(batch), batch.y)
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
            self.scheduler.step()
        self.seconds.append(time.perf_counter() - start)

    @torch.no_grad()
    def evaluate(self) -> float:
        self.model.eval()
        outs, ys = [], []
        for batch in DataLoader(self.task.test, batch_size=256):
            outs.append(self.model(batch))
            ys.append(batch.y)
        out, y = torch.cat(outs), torch.cat(ys)
        if self.task.regression:
            return normalized_mse(out * self.std + self.mean, y)
        return float((out.argmax(-1) == y).float().mean())

    def throughput(self) -> float:
        return len(self.task.train) / statistics.median(self.seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the short budget (about 15 min on 2 shared cores)")
    parser.add_argument("--tasks", default="er,regular,motif,fashion", help="comma-separated subset")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    budget = BUDGETS["quick" if args.quick else "full"]
    tasks = make_tasks(budget, args.seed, args.tasks.split(","))

    started = time.perf_counter()
    rows = []
    for task in tasks:
        runs = {label: Run(name, kwargs, task, args.seed) for label, (name, kwargs) in VARIANTS.items()}
        labels = list(runs)
        for epoch in tqdm(range(task.epochs), desc=task.name):
            shift = epoch % len(labels)
            for label in labels[shift:] + labels[:shift]:
                runs[label].train_epoch(epoch)
        base = runs["GIN + sum"].throughput()
        for label, run in runs.items():
            rows.append(
                (task, label, run.evaluate(), run.throughput(), run.throughput() / base, run.model.num_features)
            )

    print(
        f"\nGIN readouts, budget {'quick' if args.quick else 'full'}, seed {args.seed} "
        f"(torch {torch.__version__}, {torch.get_num_threads()} thread(s), {time.perf_counter() - started:.0f} s training)"
    )
    current = None
    for task, label, metric, speed, ratio, features in rows:
        if task is not current:
            current = task
            metric_name = "test MSE / var" if task.regression else "test accuracy"
            print(
                f"\n{task.name}: {len(task.train)} train / {len(task.test)} test graphs, {task.epochs} epochs, "
                f"AddTriangles {task.prep_ms_per_graph:.2f} ms/graph once"
            )
            print(f"  {'readout':<30} {metric_name:>15} {'graphs/s':>10} {'vs sum':>7} {'features':>9}")
        shown = f"{metric:.2e}" if task.regression else f"{metric:.4f}"
        print(f"  {label:<30} {shown:>15} {speed:>10.0f} {ratio:>6.2f}x {features:>9}")


if __name__ == "__main__":
    main()
