"""Training RBMs by contrastive divergence with the defaults of Hinton's "A Practical Guide to
Training Restricted Boltzmann Machines" (2010), and greedy layer-wise pretraining of a DBN's
stack (`pretrain`). `zoo.training.belief_nets` gathers this, the supervised fine-tuning and the
scikit-learn estimators; its docstring shows a recipe.

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
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from zoo.architectures.dbn import DBN, RBM, GaussianRBM, Sparsity, check_visible_input
from zoo.errors import InvalidArgumentError

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
        """The learning rate for ``rbm``: the config's, else the Guide's for its visible units."""
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


def visible_data(x: ArrayLike, reference: torch.Tensor, num_visible: int, name: str) -> torch.Tensor:
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
    data = visible_data(data, rbm.weight, rbm.num_visible, type(rbm).__name__)
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
def batched(fn: Any, data: torch.Tensor, batch_size: int = 4096) -> torch.Tensor:
    """``fn`` over ``data`` in slices of ``batch_size`` rows, concatenated (bounded memory)."""
    return torch.cat([fn(data[i : i + batch_size]) for i in range(0, data.shape[0], batch_size)])


@torch.no_grad()
def _monitor(
    rbm: RBM, train: torch.Tensor, valid: torch.Tensor | None, flips: torch.Tensor | None
) -> dict[str, float | None]:
    """One epoch's statistics (`RBMEpochStats`) on the monitored rows; all None when there are none."""

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
        raise InvalidArgumentError(
            f"monitor_size must be >= 0 (0 turns the per-epoch statistics off), got {config.monitor_size}"
        )
    data = visible_data(data, rbm.weight, rbm.num_visible, type(rbm).__name__)
    valid = None if valid is None else visible_data(valid, rbm.weight, rbm.num_visible, type(rbm).__name__)
    if init:
        init_visible_bias(rbm, data)
    training = _ContrastiveDivergence(rbm, config, generator)
    monitor_train, monitor_valid, flips = _monitor_rows(rbm, data, valid, config.monitor_size, generator)
    history = []
    bar = tqdm(
        total=config.epochs * math.ceil(data.shape[0] / config.batch_size),
        desc=f"RBM {layer} ({rbm.num_visible}->{rbm.num_hidden})",
        unit="batch",
        disable=not progress,
    )
    with bar:
        for epoch in range(config.epochs):
            speed = training.epoch(data, epoch, bar)
            monitored = _monitor(rbm, monitor_train, monitor_valid, flips)
            stats = RBMEpochStats(layer, epoch + 1, **monitored, samples_per_second=speed)
            history.append(stats)
            shown = {k: v for k, v in dataclasses.asdict(stats).items() if v is not None}
            del shown["layer"], shown["epoch"]
            bar.set_postfix({_SHORT.get(k, k): f"{v:.4g}" for k, v in shown.items()}, refresh=False)
            logger.info("RBM %d epoch %d: %s", layer, epoch + 1, ", ".join(f"{k}={v:.4g}" for k, v in shown.items()))
    return history


def _monitor_rows(
    rbm: RBM, data: torch.Tensor, valid: torch.Tensor | None, size: int, generator: torch.Generator | None
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """The rows the per-epoch statistics use: up to ``size`` random training rows, the first
    ``size`` held-out ones, and one unit per monitored row, fixed for the run, for the cheap
    pseudo-likelihood estimate (binary visible units only)."""
    monitor_train = data[_randperm(data.shape[0], generator, data.device)[:size]]
    monitor_valid = None if valid is None else valid[:size]
    flips = None
    if not isinstance(rbm, GaussianRBM):
        device = generator.device if generator is not None else torch.device("cpu")
        flips = torch.randint(rbm.num_visible, (len(monitor_train),), generator=generator, device=device)
        flips = flips.to(data.device)
    return monitor_train, monitor_valid, flips


@dataclass
class _ContrastiveDivergence:
    """One RBM's training run: momentum SGD with the weight cost on the weights only, the
    sparsity target, and the persistent chain of PCD, kept from epoch to epoch."""

    rbm: RBM
    config: RBMConfig
    generator: torch.Generator | None
    chain: torch.Tensor | None = None
    optimizer: torch.optim.SGD = field(init=False)
    sparsity: Sparsity | None = field(init=False)

    def __post_init__(self) -> None:
        rbm, config = self.rbm, self.config
        others = [p for p in rbm.parameters() if p is not rbm.weight]
        groups = [{"params": [rbm.weight], "weight_decay": config.weight_cost}, {"params": others, "weight_decay": 0.0}]
        self.optimizer = _sgd(groups, config.lr_for(rbm), config.momentum[0])
        self.sparsity = None
        if config.sparsity_target is not None:
            self.sparsity = Sparsity(config.sparsity_target, config.sparsity_cost, config.sparsity_decay)

    def epoch(self, data: torch.Tensor, epoch: int, bar: tqdm) -> float:
        """One pass over the shuffled ``data`` (epoch counted from 0); returns its samples per second."""
        config, n = self.config, data.shape[0]
        momentum = config.momentum[0] if epoch < config.momentum_epochs else config.momentum[1]
        for group in self.optimizer.param_groups:
            group["momentum"] = momentum
        shuffled = data[_randperm(n, self.generator, data.device)]
        if config.persistent and self.chain is None:
            self.chain = shuffled[: config.batch_size]
        start = time.perf_counter()
        for first in range(0, n, config.batch_size):
            step = self.rbm.contrastive_divergence(
                shuffled[first : first + config.batch_size], config.k, self.chain, self.sparsity, self.generator
            )
            self.optimizer.step()
            if config.persistent:
                self.chain = step.negative
            bar.update()
        return n / (time.perf_counter() - start)


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
        raise InvalidArgumentError(
            f"got {len(configs)} RBM configs for a DBN of {len(model.rbms)} RBMs; pass one, or one per RBM"
        )
    reference = model.rbms[0].weight
    x = visible_data(data, reference, model.sizes[0], model.name)
    held_out = None if valid is None else visible_data(valid, reference, model.sizes[0], model.name)
    histories = []
    for layer, (rbm, layer_config) in enumerate(zip(model.rbms, configs)):
        histories.append(
            train_rbm(rbm, x, layer_config, valid=held_out, layer=layer, generator=generator, progress=progress)
        )
        if layer < len(model.rbms) - 1:
            x = batched(rbm.transform, x)
            held_out = None if held_out is None else batched(rbm.transform, held_out)
    model.eval()
    return histories
