"""Deep belief net against scikit-learn, side by side in one process, on the CPU.

1. Classification on the nudged digits (scikit-learn's RBM example: load_digits, 1-pixel shifts,
   minmax_scale, train_test_split(test_size=0.2, random_state=0)): the example's pipeline,
   BernoulliRBM(100 components, lr 0.06, 10 iterations) + LogisticRegression(newton-cg, C=6000,
   default tol), against zoo's DBN 64-500-500 pretrained (CD-1, 10 epochs a layer) and
   fine-tuned (30 epochs); plus the example's raw-pixel logistic regression and the same DBN
   fine-tuned without pretraining. Test-set accuracy and macro-F1, mean and spread over seeds;
   the test set is used for nothing but these figures.
2. RBM training throughput, CD-1, 784 -> 500 hidden units, batches of 64, float32, on the first
   --rows Fashion-MNIST training images: BernoulliRBM.fit (1 iteration; its PCD-1 costs what CD-1
   does: one Gibbs step, five matrix products a batch) against training.rbm.train_rbm (1 epoch),
   alternating; median samples/s of the whole call, with zoo's per-epoch monitoring statistics
   (on 1,000 rows) and without them (monitor_size=0, like fit without verbose), and of zoo's
   batch loop alone (the call also sets the visible biases from the data and shuffles it).
3. The update rule: zoo's explicit sufficient statistics against autograd on the free-energy
   difference (same chain, gradients checked equal), median ms per CD-1 update.

Both libraries get --threads BLAS/OpenMP threads (default: every core). On a machine shared with
other jobs use --threads 1: spinning thread pools without free cores distort the comparison.

    .venv/bin/python benchmarks/dbn_vs_sklearn.py [--seeds 3] [--repeats 5] [--threads N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

import numpy as np
import torch
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import accuracy_score, f1_score
from sklearn.neural_network import BernoulliRBM
from sklearn.pipeline import Pipeline
from threadpoolctl import threadpool_limits

import zoo
from zoo.architectures.dbn import RBM, bernoulli
from zoo.training.belief_nets import BackpropConfig, RBMConfig, finetune_dbn, pretrain, train_rbm
from zoo.training.data.builtin import load_fashion_mnist
from zoo.training.data.tensors.digits import load_nudged_digits

DBN_SIZES = (64, 500, 500)


def _sklearn_pipeline(seed: int) -> Pipeline:
    rbm = BernoulliRBM(n_components=100, learning_rate=0.06, n_iter=10, random_state=seed)
    return Pipeline([("rbm", rbm), ("logistic", LogisticRegression(solver="newton-cg", C=6000))])


def _zoo_dbn(seed: int, X: np.ndarray, y: np.ndarray, pretrained: bool) -> Callable[[np.ndarray], np.ndarray]:
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    model = zoo.load("dbn", pretrained=False, sizes=DBN_SIZES, num_classes=10)
    if pretrained:
        pretrain(model, X, RBMConfig(epochs=10), generator=generator, progress=False)
    finetune_dbn(model, X, y, BackpropConfig(epochs=30), generator=generator, progress=False)

    def predict(data: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return model(torch.from_numpy(data)).argmax(1).numpy()

    return predict


def classification(seeds: int) -> None:
    X_train, X_test, y_train, y_test = load_nudged_digits()
    scores: dict[str, list[tuple[float, float, float]]] = {}

    def record(name: str, fit: Callable[[], Callable[[np.ndarray], np.ndarray]]) -> None:
        start = time.perf_counter()
        predict = fit()
        seconds = time.perf_counter() - start
        predicted = predict(X_test)
        scores.setdefault(name, []).append(
            (accuracy_score(y_test, predicted), f1_score(y_test, predicted, average="macro"), seconds)
        )

    sizes = "-".join(map(str, DBN_SIZES))
    sklearn = "sklearn BernoulliRBM(100) + LogisticRegression"
    for seed in range(seeds):
        record(sklearn, lambda seed=seed: _sklearn_pipeline(seed).fit(X_train, y_train).predict)
        record(f"zoo dbn {sizes} pretrained + fine-tuned", lambda seed=seed: _zoo_dbn(seed, X_train, y_train, True))
        record("zoo dbn, same net and init, no pretraining", lambda seed=seed: _zoo_dbn(seed, X_train, y_train, False))
    raw = LogisticRegression(solver="newton-cg", C=100.0).fit(X_train, y_train)  # the example's raw-pixel model
    predicted = raw.predict(X_test)
    scores["sklearn LogisticRegression on raw pixels"] = [
        (accuracy_score(y_test, predicted), f1_score(y_test, predicted, average="macro"), float("nan"))
    ]

    print(f"\nnudged digits test set ({len(y_test)} images), {seeds} seeds: mean (min-max)")
    print(f"  {'model':54s} {'accuracy':>22s} {'macro-F1':>22s} {'fit s':>7s}")
    for name, rows in scores.items():
        acc, f1, seconds = zip(*rows)
        cells = [f"{statistics.mean(v):.4f} ({min(v):.4f}-{max(v):.4f})" for v in (acc, f1)]
        print(f"  {name:54s} {cells[0]:>22s} {cells[1]:>22s} {statistics.mean(seconds):7.1f}")


def throughput(rows: int, repeats: int) -> None:
    images, _ = load_fashion_mnist("train")
    data = images[:rows].reshape(rows, -1).float().div(255)
    array = data.numpy()
    configs = {
        "zoo": RBMConfig(epochs=1, batch_size=64, learning_rate=0.05),
        "zoo unmonitored": RBMConfig(epochs=1, batch_size=64, learning_rate=0.05, monitor_size=0),
    }
    times: dict[str, list[float]] = {"sklearn": [], "zoo": [], "zoo unmonitored": [], "zoo loop": []}
    for repeat in range(repeats):
        start = time.perf_counter()
        BernoulliRBM(n_components=500, batch_size=64, learning_rate=0.05, n_iter=1, random_state=repeat).fit(array)
        times["sklearn"].append(rows / (time.perf_counter() - start))
        for name, config in configs.items():
            torch.manual_seed(repeat)
            rbm = RBM(784, 500)
            start = time.perf_counter()
            stats = train_rbm(rbm, data, config, generator=torch.Generator().manual_seed(repeat), progress=False)
            times[name].append(rows / (time.perf_counter() - start))
            times["zoo loop"].append(stats[-1].samples_per_second)
    median = {name: statistics.median(samples) for name, samples in times.items()}
    sklearn = median["sklearn"]
    print(
        f"\nRBM training throughput, CD-1 784->500, batch 64, float32, {rows} Fashion-MNIST rows, median of {repeats}"
    )
    print(f"  sklearn BernoulliRBM.fit (n_iter=1)                     {sklearn:9,.0f} samples/s")
    for name, label in (
        ("zoo", "zoo train_rbm (1 epoch, init + monitoring)"),
        ("zoo unmonitored", "zoo train_rbm (1 epoch, init, monitor_size=0)"),
        ("zoo loop", "zoo train_rbm batch loop alone"),
    ):
        print(f"  {label:55s} {median[name]:9,.0f} samples/s   {median[name] / sklearn:.2f}x")


def update_rule(repeats: int) -> None:
    images, _ = load_fashion_mnist("train")
    data = images[: 64 * 50].reshape(-1, 784).float().div(255)
    batches = data.split(64)
    generator = torch.Generator().manual_seed(0)

    def make() -> tuple[RBM, torch.optim.Optimizer]:
        torch.manual_seed(0)
        rbm = RBM(784, 500)
        return rbm, torch.optim.SGD(rbm.parameters(), lr=0.05, momentum=0.5, fused=True)

    def explicit(rbm: RBM, optimizer: torch.optim.Optimizer, v: torch.Tensor) -> None:
        rbm.contrastive_divergence(v, generator=generator)
        optimizer.step()

    def autograd(rbm: RBM, optimizer: torch.optim.Optimizer, v: torch.Tensor) -> None:
        with torch.no_grad():
            negative = rbm.visible_mean(bernoulli(rbm.transform(v), generator))
        optimizer.zero_grad(set_to_none=True)
        (rbm.free_energy(v).mean() - rbm.free_energy(negative).mean()).backward()
        optimizer.step()

    # Same chain, same gradients.
    rbm, optimizer = make()
    negative = rbm.contrastive_divergence(batches[0], generator=generator).negative
    explicit_grads = [p.grad.clone() for p in rbm.parameters()]
    rbm.zero_grad()
    (rbm.free_energy(batches[0]).mean() - rbm.free_energy(negative).mean()).backward()
    worst = max((a - p.grad).abs().max().item() for a, p in zip(explicit_grads, rbm.parameters()))
    assert worst < 1e-5, f"explicit and autograd gradients differ by {worst}"

    times: dict[str, list[float]] = {"explicit": [], "autograd": []}
    runners = {"explicit": explicit, "autograd": autograd}
    for _ in range(repeats):
        for name, run in runners.items():
            rbm, optimizer = make()
            start = time.perf_counter()
            for v in batches:
                run(rbm, optimizer, v)
            times[name].append((time.perf_counter() - start) / len(batches) * 1000)
    ours, theirs = statistics.median(times["explicit"]), statistics.median(times["autograd"])
    print(f"\nCD-1 update 784->500, batch 64, float32 (max gradient difference {worst:.1e}), median of {repeats}")
    print(f"  explicit statistics (zoo)                  {ours:6.2f} ms")
    print(f"  autograd on the free-energy difference     {theirs:6.2f} ms   {theirs / ours:.2f}x slower")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    if min(args.seeds, args.repeats, args.rows, args.threads) < 1:
        parser.error("--seeds, --repeats, --rows and --threads must be positive")
    torch.set_num_threads(args.threads)
    with threadpool_limits(args.threads):
        print(f"torch {torch.__version__}, {args.threads} thread(s)")
        update_rule(args.repeats)
        throughput(args.rows, args.repeats)
        classification(args.seeds)


if __name__ == "__main__":
    main()
