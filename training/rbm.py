"""Training deep belief nets: RBMs by contrastive divergence with the defaults of Hinton's
"A Practical Guide to Training Restricted Boltzmann Machines" (2010), greedy layer-wise
pretraining, supervised fine-tuning with backprop (through `zoo.training.engine.Trainer`, like
every other zoo model), and two scikit-learn estimators: `DBNClassifier` around all three, and
`BernoulliRBM`, scikit-learn's RBM estimator (its training rule and random numbers) on a zoo `RBM`.

A recipe pretrains and fine-tunes a zoo model in a few lines::

    model = zoo.load("dbn", pretrained=False, sizes=(784, 500, 500, 2000), num_classes=10)
    pretrain(model, images, RBMConfig(epochs=10), valid=held_out_images)
    finetune_dbn(model, images, labels, FinetuneConfig(epochs=30), valid=(held_out_images, held_out_labels))

Data are float tensors (or arrays) of shape (N, sizes[0]), or image batches that flatten to it,
with values in [0, 1] for binary visible units and standardised for Gaussian ones; they are
moved to the model's device and dtype whole. Pass a ``generator`` on that device for
reproducible sampling and shuffling.
"""
from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import os
import random
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.base import BaseEstimator, ClassifierMixin, ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.exceptions import NotFittedError
from sklearn.neural_network import BernoulliRBM as SklearnBernoulliRBM
from sklearn.utils import Tags, check_random_state, gen_even_slices
from sklearn.utils.extmath import softmax
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data
from torch.utils.data import Dataset, default_collate
from tqdm.auto import tqdm

from zoo.architectures.dbn import DBN, RBM, GaussianRBM, Sparsity, check_visible_input
from zoo.training.engine import Trainer, TrainConfig

logger = logging.getLogger(__name__)

ArrayLike = torch.Tensor | np.ndarray
_SHORT = {  # progress-bar names of the monitored statistics
    "reconstruction_error": "recon",
    "valid_reconstruction_error": "valid_recon",
    "free_energy_gap": "F_gap",
    "pseudo_likelihood": "pl",
    "samples_per_second": "samples/s",
}


@dataclass
class RBMConfig:
    """Hyperparameters for training one RBM; the defaults are the Practical Guide's (and those of
    Hinton's MNIST code): mini-batches of ~100 or fewer, CD-1, learning rate 0.1 for binary
    visible units (0.01 for Gaussian ones, section 13.2), L2 weight cost 2e-4 on the weights
    only, momentum 0.5 for the first 5 epochs then 0.9."""

    epochs: int = 10
    batch_size: int = 64
    learning_rate: float | None = None  # None: 0.1, or 0.01 for Gaussian visible units
    k: int = 1  # Gibbs steps per update (CD-k / PCD-k)
    persistent: bool = False  # PCD (Tieleman, 2008): a persistent chain of batch_size particles
    weight_cost: float = 2e-4
    momentum: tuple[float, float] = (0.5, 0.9)
    momentum_epochs: int = 5  # epochs trained at the first momentum
    sparsity_target: float | None = None  # e.g. 0.05: target mean activation of each hidden unit
    sparsity_cost: float = 0.1
    sparsity_decay: float = 0.95
    monitor_size: int = 1000  # training (and held-out) rows the per-epoch statistics use; 0: none

    def lr_for(self, rbm: RBM) -> float:
        if self.learning_rate is not None:
            return self.learning_rate
        return 0.01 if isinstance(rbm, GaussianRBM) else 0.1


@dataclass
class RBMEpochStats:
    """Per-epoch monitoring of one RBM (Practical Guide, sections 5-6). ``free_energy_gap`` is
    mean F(held-out) - mean F(training rows): growing, it says the RBM overfits. The
    reconstruction errors are mean squared errors per unit of the mean-field reconstruction;
    ``pseudo_likelihood`` is the mean log pseudo-likelihood of the training rows, estimated as
    scikit-learn's ``score_samples`` does from one flipped unit per row (the same units every
    epoch); binary visible units only."""

    layer: int
    epoch: int
    reconstruction_error: float | None
    valid_reconstruction_error: float | None
    free_energy_gap: float | None
    pseudo_likelihood: float | None
    samples_per_second: float


@dataclass
class FinetuneConfig:
    """Supervised fine-tuning of the unrolled net: cross-entropy, SGD with momentum and L2 weight
    decay (on the weight matrices, not the biases), the learning rate annealed to 0 along a
    cosine over all steps, every epoch trained (no early stopping: the last epoch's weights are
    kept). `train_config` is how the `Trainer` runs it."""

    epochs: int = 30
    batch_size: int = 64
    learning_rate: float = 0.3  # sigmoid layers pass small gradients down; 0.1 fine-tunes slower
    momentum: float = 0.9
    weight_decay: float = 1e-4

    def train_config(
        self,
        device: torch.device | str,
        *,
        seed: int = 0,
        progress: bool = True,
        out_dir: str | os.PathLike | None = None,
    ) -> TrainConfig:
        """This fine-tuning as a `TrainConfig` (the one place the two meet). The rows already
        sit on ``device``, so the loader reads them there (no workers, no pinned memory); the
        Trainer writes logs, curves and checkpoints only with an ``out_dir``."""
        return TrainConfig(
            epochs=self.epochs,
            batch_size=self.batch_size,
            optimizer="sgd",
            lr=self.learning_rate,
            momentum=self.momentum,
            weight_decay=self.weight_decay,
            scheduler="cosine",  # stepped every optimizer step, down to min_lr=0
            warmup_epochs=0.0,
            min_lr=0.0,
            early_stopping_patience=None,
            device=str(device),
            seed=seed,
            num_workers=0,
            pin_memory=False,
            progress=progress,
            out_dir=None if out_dir is None else os.fspath(out_dir),
        )


@dataclass
class FinetuneEpochStats:
    epoch: int
    train_loss: float
    train_accuracy: float
    valid_loss: float | None
    valid_accuracy: float | None


def _as_data(x: ArrayLike, reference: torch.Tensor, num_visible: int, name: str) -> torch.Tensor:
    """``x`` as a (N, num_visible) tensor on ``reference``'s device, in its dtype."""
    x = torch.as_tensor(x)
    if torch.is_floating_point(x):
        x = x.to(device=reference.device, dtype=reference.dtype)
    return check_visible_input(x, num_visible, name)


def _sgd(groups: list[dict[str, Any]], lr: float, momentum: float) -> torch.optim.SGD:
    """SGD over ``groups``, with the fused kernel where PyTorch has one (CPU and CUDA)."""
    params = [p for group in groups for p in group["params"]]
    fused = all(p.device.type in ("cpu", "cuda") for p in params)
    return torch.optim.SGD(groups, lr=lr, momentum=momentum, fused=fused)


@torch.no_grad()
def init_visible_bias(rbm: RBM, data: ArrayLike) -> None:
    """Set the visible biases from the data (Practical Guide, section 8): log(p / (1 - p)) for
    binary units, where p is the fraction of the time each is on; the data mean for Gaussian
    units, whose log std also starts at the data's when it is learned."""
    data = _as_data(data, rbm.weight, rbm.num_visible, type(rbm).__name__)
    if isinstance(rbm, GaussianRBM):
        rbm.visible_bias.copy_(data.mean(0))
        if rbm.learn_std:
            rbm.log_std.copy_(data.std(0).clamp_min(1e-3).log())
        return
    eps = 1e-3  # a unit that is always off (or on) gets a large finite bias, not -inf
    p = data.mean(0).clamp(eps, 1 - eps)
    rbm.visible_bias.copy_(torch.log(p / (1 - p)))


def _randperm(n: int, generator: torch.Generator | None, device: torch.device) -> torch.Tensor:
    """A random order of n rows, drawn on the generator's device, for data on ``device``."""
    source = generator.device if generator is not None else torch.device("cpu")
    return torch.randperm(n, generator=generator, device=source).to(device)


@torch.no_grad()
def _batched(fn: Any, data: torch.Tensor, batch_size: int = 4096) -> torch.Tensor:
    return torch.cat([fn(data[i : i + batch_size]) for i in range(0, data.shape[0], batch_size)])


@torch.no_grad()
def _monitor(
    rbm: RBM, train: torch.Tensor, valid: torch.Tensor | None, flips: torch.Tensor | None
) -> dict[str, float | None]:
    def recon_error(x: torch.Tensor) -> float:
        return F.mse_loss(rbm.reconstruct(x), x).item()

    stats: dict[str, float | None] = dict.fromkeys(
        ("reconstruction_error", "valid_reconstruction_error", "free_energy_gap", "pseudo_likelihood")
    )
    if len(train) == 0:  # monitoring turned off
        return stats
    stats["reconstruction_error"] = recon_error(train)
    if flips is not None:
        stats["pseudo_likelihood"] = rbm.pseudo_likelihood(train, flips).mean().item()
    if valid is not None:
        stats["valid_reconstruction_error"] = recon_error(valid)
        stats["free_energy_gap"] = (rbm.free_energy(valid).mean() - rbm.free_energy(train).mean()).item()
    return stats


def train_rbm(
    rbm: RBM,
    data: ArrayLike,
    config: RBMConfig | None = None,
    *,
    valid: ArrayLike | None = None,
    init: bool = True,
    layer: int = 0,
    generator: torch.Generator | None = None,
    progress: bool = True,
) -> list[RBMEpochStats]:
    """Train ``rbm`` on ``data`` by CD-k or PCD-k with momentum SGD; return (and log) the
    statistics of every epoch, computed on up to ``config.monitor_size`` fixed training rows
    and held-out ``valid`` rows (``monitor_size=0`` turns them off, as scikit-learn's
    ``BernoulliRBM.fit`` without ``verbose``). ``init`` first sets the visible biases from the
    data; pass False to continue training."""
    config = config or RBMConfig()
    if config.monitor_size < 0:
        raise ValueError(f"monitor_size must be >= 0 (0 turns the per-epoch statistics off), got {config.monitor_size}")
    data = _as_data(data, rbm.weight, rbm.num_visible, type(rbm).__name__)
    valid = None if valid is None else _as_data(valid, rbm.weight, rbm.num_visible, type(rbm).__name__)
    if init:
        init_visible_bias(rbm, data)
    n = data.shape[0]
    num_batches = math.ceil(n / config.batch_size)
    weights = [rbm.weight]
    others = [p for p in rbm.parameters() if p is not rbm.weight]
    groups = [{"params": weights, "weight_decay": config.weight_cost}, {"params": others, "weight_decay": 0.0}]
    optimizer = _sgd(groups, config.lr_for(rbm), config.momentum[0])
    sparsity = None
    if config.sparsity_target is not None:
        sparsity = Sparsity(config.sparsity_target, config.sparsity_cost, config.sparsity_decay)
    monitor_train = data[_randperm(n, generator, data.device)[: config.monitor_size]]
    monitor_valid = None if valid is None else valid[: config.monitor_size]
    # One unit per monitored row, fixed for the run, for the cheap pseudo-likelihood estimate.
    flips = None
    if not isinstance(rbm, GaussianRBM):
        device = generator.device if generator is not None else torch.device("cpu")
        flips = torch.randint(rbm.num_visible, (len(monitor_train),), generator=generator, device=device)
        flips = flips.to(data.device)
    chain = None
    history = []
    bar = tqdm(
        total=config.epochs * num_batches,
        desc=f"RBM {layer} ({rbm.num_visible}->{rbm.num_hidden})",
        unit="batch",
        disable=not progress,
    )
    with bar:
        for epoch in range(config.epochs):
            momentum = config.momentum[0] if epoch < config.momentum_epochs else config.momentum[1]
            for group in optimizer.param_groups:
                group["momentum"] = momentum
            shuffled = data[_randperm(n, generator, data.device)]
            if config.persistent and chain is None:
                chain = shuffled[: config.batch_size]
            start = time.perf_counter()
            for first in range(0, n, config.batch_size):
                step = rbm.contrastive_divergence(
                    shuffled[first : first + config.batch_size], config.k, chain, sparsity, generator
                )
                optimizer.step()
                if config.persistent:
                    chain = step.negative
                bar.update()
            speed = n / (time.perf_counter() - start)
            monitored = _monitor(rbm, monitor_train, monitor_valid, flips)
            stats = RBMEpochStats(layer, epoch + 1, **monitored, samples_per_second=speed)
            history.append(stats)
            shown = {k: v for k, v in dataclasses.asdict(stats).items() if v is not None}
            del shown["layer"], shown["epoch"]
            bar.set_postfix({_SHORT.get(k, k): f"{v:.4g}" for k, v in shown.items()}, refresh=False)
            logger.info("RBM %d epoch %d: %s", layer, epoch + 1, ", ".join(f"{k}={v:.4g}" for k, v in shown.items()))
    return history


def pretrain(
    model: DBN,
    data: ArrayLike,
    config: RBMConfig | Sequence[RBMConfig] | None = None,
    *,
    valid: ArrayLike | None = None,
    generator: torch.Generator | None = None,
    progress: bool = True,
) -> list[list[RBMEpochStats]]:
    """Greedy layer-wise pretraining (Hinton, Osindero & Teh, 2006): train each RBM of
    ``model`` in turn on the hidden probabilities of the one below (the data for the first).
    ``config`` is one RBMConfig for every layer or one per layer; returns each layer's history."""
    configs = list(config) if isinstance(config, Sequence) else [config or RBMConfig()] * len(model.rbms)
    if len(configs) != len(model.rbms):
        raise ValueError(
            f"got {len(configs)} RBM configs for a DBN of {len(model.rbms)} RBMs; pass one, or one per RBM"
        )
    reference = model.rbms[0].weight
    x = _as_data(data, reference, model.sizes[0], model.name)
    held_out = None if valid is None else _as_data(valid, reference, model.sizes[0], model.name)
    histories = []
    for layer, (rbm, layer_config) in enumerate(zip(model.rbms, configs)):
        histories.append(
            train_rbm(rbm, x, layer_config, valid=held_out, layer=layer, generator=generator, progress=progress)
        )
        if layer < len(model.rbms) - 1:
            x = _batched(rbm.transform, x)
            held_out = None if held_out is None else _batched(rbm.transform, held_out)
    model.eval()
    return histories


def _as_targets(targets: ArrayLike, data: torch.Tensor, num_classes: int) -> torch.Tensor:
    targets = torch.as_tensor(targets, device=data.device).long()
    if targets.shape != (data.shape[0],):
        raise ValueError(f"targets must be class indices of shape ({data.shape[0]},), got {tuple(targets.shape)}")
    if targets.numel() and (targets.min() < 0 or targets.max() >= num_classes):
        raise ValueError(
            f"targets must lie in [0, {num_classes}) for a {num_classes}-way head; reset_classifier to change it"
        )
    return targets


class _Rows(Dataset):
    """Labelled rows already on the model's device; the loader reads a whole batch with one
    indexing (``__getitems__``) instead of stacking single rows."""

    def __init__(self, data: torch.Tensor, targets: torch.Tensor) -> None:
        self.data, self.targets = data, targets

    def __len__(self) -> int:
        return self.data.shape[0]

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.data[index], self.targets[index]

    def __getitems__(self, indices: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        index = torch.as_tensor(indices, device=self.data.device)
        return self.data[index], self.targets[index]


def _collate_rows(batch: Any) -> Any:
    """A batch `_Rows.__getitems__` already made passes through; single rows are stacked."""
    return batch if isinstance(batch, tuple) else default_collate(batch)


@contextlib.contextmanager
def _own_random_state(device: torch.device) -> Iterator[None]:
    """Give back the caller's global random states (torch's on CPU and ``device``, NumPy's,
    Python's) afterwards: `Trainer.fit` seeds them all."""
    python_state, numpy_state = random.getstate(), np.random.get_state()
    try:
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            yield
    finally:
        random.setstate(python_state)
        np.random.set_state(numpy_state)


def finetune_dbn(
    model: DBN,
    data: ArrayLike,
    targets: ArrayLike,
    config: FinetuneConfig | None = None,
    *,
    valid: tuple[ArrayLike, ArrayLike] | None = None,
    generator: torch.Generator | None = None,
    progress: bool = True,
    out_dir: str | os.PathLike | None = None,
) -> list[FinetuneEpochStats]:
    """Fine-tune the whole unrolled net (every RBM's weights and hidden biases, and the head) to
    classify ``data`` as ``targets`` (class indices) by backprop; returns per-epoch losses and
    accuracies, on ``valid = (data, targets)`` too when given. Leaves the model in eval mode.

    The loop is `zoo.training.engine.Trainer`'s, configured by `FinetuneConfig.train_config`; like
    every Trainer run it drops each epoch's last partial batch (when there is a full one). Its
    seed (shuffling, dropout) is drawn from ``generator`` (torch's global generator without one);
    the caller's global random states are left as they were. With ``out_dir`` the Trainer writes
    its metrics, logs, curves and checkpoints there."""
    if model.num_classes == 0:
        raise ValueError("the model has no classifier (num_classes=0); call model.reset_classifier(num_classes) first")
    config = config or FinetuneConfig()
    reference = model.rbms[0].weight
    x = _as_data(data, reference, model.sizes[0], model.name)
    y = _as_targets(targets, x, model.num_classes)
    held_out = None
    if valid is not None:
        held_x = _as_data(valid[0], reference, model.sizes[0], model.name)
        held_out = _Rows(held_x, _as_targets(valid[1], held_x, model.num_classes))
    if config.epochs == 0:
        model.eval()
        return []
    source = generator.device if generator is not None else torch.device("cpu")
    seed = int(torch.randint(2**31 - 1, (), generator=generator, device=source))
    train_config = config.train_config(reference.device, seed=seed, progress=progress, out_dir=out_dir)
    with _own_random_state(reference.device):
        trainer = Trainer(model, train_config, collate_fn=_collate_rows)
        rows = trainer.fit(_Rows(x, y), held_out)
    model.eval()
    history = [
        FinetuneEpochStats(int(r["epoch"]), r["train_loss"], r["train_acc"], r.get("val_loss"), r.get("val_acc"))
        for r in rows
    ]
    for stats in history:
        shown = {k: v for k, v in dataclasses.asdict(stats).items() if v is not None and k != "epoch"}
        logger.info("fine-tune epoch %d: %s", stats.epoch, ", ".join(f"{k}={v:.4g}" for k, v in shown.items()))
    return history


class DBNClassifier(ClassifierMixin, TransformerMixin, BaseEstimator):
    """A deep belief net as a scikit-learn estimator: ``fit(X, y)`` pretrains the RBM stack
    greedily on X and fine-tunes it on y; ``fit(X)`` only pretrains, for ``transform``.
    ``transform`` gives the top hidden layer's probabilities, ``predict`` / ``predict_proba`` /
    ``score`` classify. Input checks, labels and cloning are scikit-learn's own (it passes
    ``check_estimator``); the fitted zoo model is ``model_``.

    ``hidden_layer_sizes`` follows MLPClassifier: the hidden layers only, the input size comes
    from X. ``random_state`` seeds weight init, sampling, shuffling and dropout without touching
    torch's global random state. Computation is float32.
    """

    def __init__(
        self,
        hidden_layer_sizes: Sequence[int] = (500, 500),
        *,
        visible: str = "bernoulli",
        pretrain_epochs: int = 10,
        learning_rate: float | None = None,
        k: int = 1,
        persistent: bool = False,
        batch_size: int = 64,
        weight_cost: float = 2e-4,
        sparsity_target: float | None = None,
        finetune_epochs: int = 30,
        finetune_learning_rate: float = 0.3,
        weight_decay: float = 1e-4,
        drop_rate: float = 0.0,
        device: str | torch.device = "cpu",
        random_state: int | None = None,
        verbose: bool = False,
    ) -> None:
        self.hidden_layer_sizes = hidden_layer_sizes
        self.visible = visible
        self.pretrain_epochs = pretrain_epochs
        self.learning_rate = learning_rate
        self.k = k
        self.persistent = persistent
        self.batch_size = batch_size
        self.weight_cost = weight_cost
        self.sparsity_target = sparsity_target
        self.finetune_epochs = finetune_epochs
        self.finetune_learning_rate = finetune_learning_rate
        self.weight_decay = weight_decay
        self.drop_rate = drop_rate
        self.device = device
        self.random_state = random_state
        self.verbose = verbose

    def __sklearn_tags__(self) -> Tags:
        tags = super().__sklearn_tags__()
        tags.target_tags.required = False  # fit(X) pretrains only, for transform
        tags.transformer_tags.preserves_dtype = ["float32"]
        return tags

    def fit(self, X: ArrayLike, y: ArrayLike | None = None) -> DBNClassifier:
        if y is None:
            X = validate_data(self, X, dtype=np.float32)
            self.__dict__.pop("classes_", None)  # from an earlier supervised fit
        else:
            X, y = validate_data(self, X, y, dtype=np.float32)
            check_classification_targets(y)
            self.classes_, y = np.unique(y, return_inverse=True)
        sizes = (self.n_features_in_, *self.hidden_layer_sizes)
        rbm_config = RBMConfig(
            epochs=self.pretrain_epochs,
            batch_size=self.batch_size,
            learning_rate=self.learning_rate,
            k=self.k,
            persistent=self.persistent,
            weight_cost=self.weight_cost,
            sparsity_target=self.sparsity_target,
        )
        finetune_config = FinetuneConfig(
            epochs=self.finetune_epochs,
            batch_size=self.batch_size,
            learning_rate=self.finetune_learning_rate,
            weight_decay=self.weight_decay,
        )
        device = torch.device(self.device)
        X = torch.from_numpy(X).to(device)
        num_classes = 0 if y is None else len(self.classes_)
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            generator = torch.Generator(device)
            if self.random_state is not None:
                torch.manual_seed(self.random_state)
                generator.manual_seed(self.random_state)
            else:
                generator.seed()
            self.model_ = DBN(sizes, num_classes, visible=self.visible, drop_rate=self.drop_rate).to(device)
            self.pretrain_history_ = pretrain(self.model_, X, rbm_config, generator=generator, progress=self.verbose)
            self.finetune_history_ = []
            if y is not None and self.finetune_epochs > 0:
                targets = torch.from_numpy(y).to(device)
                self.finetune_history_ = finetune_dbn(
                    self.model_, X, targets, finetune_config, generator=generator, progress=self.verbose
                )
        return self

    @torch.no_grad()
    def _forward(self, X: ArrayLike, features: bool) -> np.ndarray:
        check_is_fitted(self, "model_")
        X = validate_data(self, X, dtype=np.float32, reset=False)
        fn = self.model_.forward_features if features else self.model_
        return _batched(fn, torch.from_numpy(X).to(self.model_.rbms[0].weight.device)).cpu().numpy()

    def transform(self, X: ArrayLike) -> np.ndarray:
        """The top hidden layer's probabilities, (n_samples, hidden_layer_sizes[-1])."""
        return self._forward(X, features=True)

    def predict_proba(self, X: ArrayLike) -> np.ndarray:
        check_is_fitted(self, "model_")
        if not hasattr(self, "classes_"):
            raise NotFittedError("this DBNClassifier was fitted without labels (fit(X)); call fit(X, y) to classify")
        return softmax(self._forward(X, features=False))

    def predict(self, X: ArrayLike) -> np.ndarray:
        proba = self.predict_proba(X)
        return self.classes_[proba.argmax(1)]


def _rows(X: np.ndarray) -> torch.Tensor:
    """A validated array as a tensor sharing its memory (copied if read-only: torch needs writable)."""
    return torch.from_numpy(X if X.flags.writeable else X.copy())


def _bernoulli_draw(p: torch.Tensor, rng: np.random.RandomState) -> torch.Tensor:
    """``uniform < p`` with the uniforms from ``rng``, in scikit-learn's order and precision."""
    return torch.from_numpy(rng.uniform(size=tuple(p.shape))) < p


class BernoulliRBM(ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator):
    """``sklearn.neural_network.BernoulliRBM`` on a zoo `RBM`: the same parameters, attributes
    (``components_``, ``intercept_hidden_``, ``intercept_visible_``, ``h_samples_``,
    ``n_features_in_``), methods and training rule, and the same random numbers drawn in the same
    order from ``random_state``, so that a fit, a ``partial_fit``, ``gibbs`` and ``score_samples``
    give scikit-learn's results to rounding. A drop-in replacement whose fitted model is ``rbm_``,
    an `RBM` module for torch code, a `DBN` layer or ``zoo.save``.

    The rule is scikit-learn's persistent CD-1 (stochastic maximum likelihood) with plain SGD: no
    momentum, weight cost or visible-bias init (for those, `train_rbm`'s Practical Guide recipe).
    Like scikit-learn, each step divides both phases' statistics by the data rows, although the
    chain has ``batch_size`` particles; ``partial_fit(X)`` is one step on all of X.

    Methods take arrays or CPU tensors and return NumPy arrays, as scikit-learn's do:
    ``transform`` and ``score_samples`` in the fitted precision (float64, or float32 after
    ``fit`` on float32 data), ``gibbs`` booleans. The attributes are NumPy views of ``rbm_``'s
    parameters: writing into them changes the module. Sparse input is not accepted.
    """

    _parameter_constraints: dict = dict(SklearnBernoulliRBM._parameter_constraints)

    def __init__(
        self,
        n_components: int = 256,
        *,
        learning_rate: float = 0.1,
        batch_size: int = 10,
        n_iter: int = 10,
        verbose: int = 0,
        random_state: int | np.random.RandomState | None = None,
    ) -> None:
        self.n_components = n_components
        self.learning_rate = learning_rate
        self.batch_size = batch_size
        self.n_iter = n_iter
        self.verbose = verbose
        self.random_state = random_state

    @property
    def components_(self) -> np.ndarray:
        """The weights, (n_components, n_features)."""
        return self.rbm_.weight.detach().numpy()

    @property
    def intercept_hidden_(self) -> np.ndarray:
        return self.rbm_.hidden_bias.detach().numpy()

    @property
    def intercept_visible_(self) -> np.ndarray:
        return self.rbm_.visible_bias.detach().numpy()

    @property
    def _n_features_out(self) -> int:
        return self.rbm_.num_hidden

    def __sklearn_tags__(self) -> Tags:
        tags = super().__sklearn_tags__()
        tags.transformer_tags.preserves_dtype = ["float64", "float32"]
        return tags

    def _start(self, rng: np.random.RandomState, num_visible: int, dtype: np.dtype) -> None:
        """scikit-learn's initial state: weights N(0, 0.01) drawn from ``rng``, zero biases and chain."""
        weight = torch.from_numpy(np.asarray(rng.normal(0, 0.01, (self.n_components, num_visible)), dtype=dtype))
        with torch.device("meta"):  # no draw from torch's global generator for an init replaced at once
            rbm = RBM(num_visible, self.n_components)
        self.rbm_ = rbm.to_empty(device="cpu").to(weight.dtype)
        with torch.no_grad():
            self.rbm_.weight.copy_(weight)
            self.rbm_.hidden_bias.zero_()
            self.rbm_.visible_bias.zero_()
        self.h_samples_ = np.zeros((self.batch_size, self.n_components), dtype=dtype)

    @torch.no_grad()
    def _step(self, v_pos: torch.Tensor, rng: np.random.RandomState) -> None:
        """One update on the mini-batch ``v_pos``: scikit-learn's ``BernoulliRBM._fit``."""
        rbm = self.rbm_
        v_pos = v_pos.to(rbm.weight.dtype)
        h_pos = rbm.transform(v_pos)
        v_neg = _bernoulli_draw(rbm.visible_mean(torch.from_numpy(self.h_samples_)), rng).to(v_pos.dtype)
        h_neg = rbm.transform(v_neg)
        lr = float(self.learning_rate) / v_pos.shape[0]
        rbm.weight.addmm_(h_pos.t(), v_pos, alpha=lr).addmm_(h_neg.t(), v_neg, alpha=-lr)
        rbm.hidden_bias.add_(h_pos.sum(0) - h_neg.sum(0), alpha=lr)
        rbm.visible_bias.add_(v_pos.sum(0) - v_neg.sum(0), alpha=lr)
        self.h_samples_ = _bernoulli_draw(h_neg, rng).to(h_neg.dtype).numpy()

    def fit(self, X: ArrayLike, y: None = None) -> BernoulliRBM:
        """Train from scratch: ``n_iter`` sweeps over X in order, in ``batch_size`` mini-batches;
        ``verbose`` prints each sweep's pseudo-likelihood as scikit-learn does."""
        self._validate_params()
        X = validate_data(self, X, dtype=(np.float64, np.float32), order="C")
        rng = check_random_state(self.random_state)
        self._start(rng, X.shape[1], X.dtype)
        data = _rows(X)
        num_batches = math.ceil(X.shape[0] / self.batch_size)
        batches = list(gen_even_slices(num_batches * self.batch_size, num_batches, n_samples=X.shape[0]))
        begin = time.time()
        for iteration in range(1, self.n_iter + 1):
            for batch in batches:
                self._step(data[batch], rng)
            if self.verbose:
                end = time.time()
                print(
                    f"[{type(self).__name__}] Iteration {iteration}, pseudo-likelihood = "
                    f"{self.score_samples(X).mean():.2f}, time = {end - begin:.2f}s"
                )
                begin = end
        return self

    def partial_fit(self, X: ArrayLike, y: None = None) -> BernoulliRBM:
        """One update on all of X (float64), starting the model and its persistent chain on the
        first call; the random numbers come from ``random_state_``, made once from ``random_state``."""
        self._validate_params()
        first_pass = not hasattr(self, "rbm_")
        X = validate_data(self, X, dtype=np.float64, reset=first_pass, order="C")
        if not hasattr(self, "random_state_"):
            self.random_state_ = check_random_state(self.random_state)
        if first_pass:
            self._start(self.random_state_, X.shape[1], X.dtype)
        self._step(_rows(X), self.random_state_)
        return self

    def _visible(self, X: ArrayLike, dtype: Any = (np.float64, np.float32)) -> torch.Tensor:
        check_is_fitted(self)
        X = validate_data(self, X, dtype=dtype, reset=False, order="C")
        return _rows(X).to(self.rbm_.weight.dtype)

    @torch.no_grad()
    def transform(self, X: ArrayLike) -> np.ndarray:
        """P(h=1 | v=X), (n_samples, n_components)."""
        v = self._visible(X)
        return self.rbm_.transform(v).numpy()

    @torch.no_grad()
    def gibbs(self, v: ArrayLike) -> np.ndarray:
        """One Gibbs step v -> h -> v per row, every state sampled; booleans, as scikit-learn's."""
        v = self._visible(v)
        if not hasattr(self, "random_state_"):
            self.random_state_ = check_random_state(self.random_state)
        h = _bernoulli_draw(self.rbm_.transform(v), self.random_state_).to(v.dtype)
        return _bernoulli_draw(self.rbm_.visible_mean(h), self.random_state_).numpy()

    def score_samples(self, X: ArrayLike) -> np.ndarray:
        """scikit-learn's stochastic log pseudo-likelihood per row: n_features * log P(v_i | v_-i)
        for one unit i per row, drawn afresh from ``random_state`` on every call."""
        v = self._visible(X, dtype="numeric")
        rng = check_random_state(self.random_state)
        index = torch.from_numpy(rng.randint(0, v.shape[1], v.shape[0]))
        return self.rbm_.pseudo_likelihood(v, index).numpy()
