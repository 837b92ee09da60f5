"""Training deep belief nets: RBMs by contrastive divergence with the defaults of Hinton's
"A Practical Guide to Training Restricted Boltzmann Machines" (2010), greedy layer-wise
pretraining, supervised fine-tuning with backprop, and `DBNClassifier`, a scikit-learn-style
estimator around all three.

A recipe pretrains and fine-tunes a zoo model in a few lines::

    model = zoo.load("dbn", pretrained=False, sizes=(784, 500, 500, 2000), num_classes=10)
    pretrain(model, images, RBMConfig(epochs=10), valid=held_out_images)
    finetune(model, images, labels, FinetuneConfig(epochs=30), valid=(held_out_images, held_out_labels))

Data are float tensors (or arrays) of shape (N, sizes[0]), or image batches that flatten to it,
with values in [0, 1] for binary visible units and standardised for Gaussian ones; they are
moved to the model's device and dtype whole. Pass a ``generator`` on that device for
reproducible sampling and shuffling.
"""
from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from sklearn.base import BaseEstimator, ClassifierMixin, TransformerMixin
from sklearn.exceptions import NotFittedError
from sklearn.utils import Tags
from sklearn.utils.extmath import softmax
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data
from tqdm.auto import tqdm

from zoo.architectures.dbn import DBN, RBM, GaussianRBM, Sparsity, check_visible_input

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
    decay, the learning rate annealed to 0 along a cosine over all steps."""

    epochs: int = 30
    batch_size: int = 64
    learning_rate: float = 0.3  # sigmoid layers pass small gradients down; 0.1 fine-tunes slower
    momentum: float = 0.9
    weight_decay: float = 1e-4


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


@torch.no_grad()
def _evaluate(model: nn.Module, data: torch.Tensor, targets: torch.Tensor) -> tuple[float, float]:
    model.eval()
    logits = _batched(model, data)
    return F.cross_entropy(logits, targets).item(), (logits.argmax(1) == targets).float().mean().item()


def _as_targets(targets: ArrayLike, data: torch.Tensor, num_classes: int) -> torch.Tensor:
    targets = torch.as_tensor(targets, device=data.device).long()
    if targets.shape != (data.shape[0],):
        raise ValueError(f"targets must be class indices of shape ({data.shape[0]},), got {tuple(targets.shape)}")
    if targets.numel() and (targets.min() < 0 or targets.max() >= num_classes):
        raise ValueError(
            f"targets must lie in [0, {num_classes}) for a {num_classes}-way head; reset_classifier to change it"
        )
    return targets


def finetune(
    model: DBN,
    data: ArrayLike,
    targets: ArrayLike,
    config: FinetuneConfig | None = None,
    *,
    valid: tuple[ArrayLike, ArrayLike] | None = None,
    generator: torch.Generator | None = None,
    progress: bool = True,
) -> list[FinetuneEpochStats]:
    """Fine-tune the whole unrolled net (every RBM's weights and hidden biases, and the head) to
    classify ``data`` as ``targets`` (class indices) by backprop; returns per-epoch losses and
    accuracies, on ``valid = (data, targets)`` too when given. Leaves the model in eval mode."""
    if model.num_classes == 0:
        raise ValueError("the model has no classifier (num_classes=0); call model.reset_classifier(num_classes) first")
    config = config or FinetuneConfig()
    reference = model.rbms[0].weight
    x = _as_data(data, reference, model.sizes[0], model.name)
    y = _as_targets(targets, x, model.num_classes)
    held_out = None
    if valid is not None:
        held_x = _as_data(valid[0], reference, model.sizes[0], model.name)
        held_out = (held_x, _as_targets(valid[1], held_x, model.num_classes))
    decay = [p for name, p in model.named_parameters() if name.endswith("weight")]
    no_decay = [p for name, p in model.named_parameters() if not name.endswith("weight")]
    groups = [{"params": decay, "weight_decay": config.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    optimizer = _sgd(groups, config.learning_rate, config.momentum)
    n = x.shape[0]
    num_batches = math.ceil(n / config.batch_size)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=config.epochs * num_batches)
    history = []
    with tqdm(total=config.epochs * num_batches, desc="fine-tune", unit="batch", disable=not progress) as bar:
        for epoch in range(config.epochs):
            model.train()
            order = _randperm(n, generator, x.device)
            xs, ys = x[order], y[order]
            total_loss, correct = 0.0, 0
            for first in range(0, n, config.batch_size):
                xb, yb = xs[first : first + config.batch_size], ys[first : first + config.batch_size]
                logits = model(xb)
                loss = F.cross_entropy(logits, yb)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                scheduler.step()
                total_loss += loss.item() * xb.shape[0]
                correct += (logits.argmax(1) == yb).sum().item()
                bar.update()
            stats = FinetuneEpochStats(epoch + 1, total_loss / n, correct / n, None, None)
            if held_out is not None:
                stats.valid_loss, stats.valid_accuracy = _evaluate(model, *held_out)
            history.append(stats)
            shown = {k: v for k, v in dataclasses.asdict(stats).items() if v is not None and k != "epoch"}
            bar.set_postfix({k: f"{v:.4g}" for k, v in shown.items()}, refresh=False)
            logger.info("fine-tune epoch %d: %s", epoch + 1, ", ".join(f"{k}={v:.4g}" for k, v in shown.items()))
    model.eval()
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
                self.finetune_history_ = finetune(
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
