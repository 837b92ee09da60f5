"""The units of the Boltzmann machines in dbn.py: the visible-input check, Bernoulli sampling,
the result of one contrastive-divergence step (`CDStep`) and the sparsity target (`Sparsity`)."""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from ._errors import InvalidArgumentError
from .layers import InputDTypeError, check_input_dtype


def check_visible_input(x: torch.Tensor, num_visible: int, name: str, dtype: torch.dtype | None = None) -> torch.Tensor:
    """``x`` as a (N, num_visible) float batch; image batches (N, C, H, W) or (N, H, W) whose
    pixels number num_visible are flattened. Anything else raises a ValueError with the
    expected shape, rather than a matrix-size error deep inside a matmul; given the weights'
    ``dtype``, another floating dtype raises an `InputDTypeError` (a ValueError and a
    TypeError) that names it (`check_input_dtype`)."""
    if not isinstance(x, torch.Tensor):
        raise InvalidArgumentError(f"{name} expects a torch.Tensor of shape (N, {num_visible}); got {type(x).__name__}")
    expected = f"{name} expects input of shape (N, {num_visible}) or images (N, C, H, W) with C*H*W = {num_visible}"
    got = tuple(x.shape)
    if not torch.is_floating_point(x):
        raise InputDTypeError(
            f"{name} expects floating-point input (pixel values in [0, 1] for binary visible units); "
            f"got {x.dtype}: convert it, e.g. x.float() / 255"
        )
    if dtype is not None:
        check_input_dtype(x, dtype, name)
    if x.ndim == 2 and x.shape[1] == num_visible:
        return x
    if x.ndim >= 3 and math.prod(x.shape[1:]) == num_visible:
        return x.flatten(1)
    hint = "; add a batch dimension with x.unsqueeze(0)" if x.ndim == 1 and x.shape[0] == num_visible else ""
    raise InvalidArgumentError(f"{expected}; got shape {got}{hint}")


def bernoulli(p: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """Binary samples with probabilities ``p`` (same dtype); 3x faster on CPU than torch.bernoulli."""
    return torch.rand(p.shape, generator=generator, dtype=p.dtype, device=p.device).lt_(p)


class CDStep(NamedTuple):
    """What one contrastive-divergence step leaves besides the gradients."""

    negative: torch.Tensor  # the chain's final visible states (the next step's chain for PCD)
    hidden_data: torch.Tensor  # P(h=1|v) on the data batch


class Sparsity:
    """The Practical Guide's sparsity target (section 11): a running estimate q of each hidden
    unit's mean activation (q <- decay * q + (1 - decay) * batch mean), and a cross-entropy
    penalty whose gradient ``cost * (q - target)`` is added to the hidden units' total input."""

    def __init__(self, target: float, cost: float = 0.1, decay: float = 0.95) -> None:
        if not 0.0 < target < 1.0:
            raise InvalidArgumentError(f"sparsity target must be a probability in (0, 1), got {target!r}")
        if cost < 0 or not 0.0 <= decay < 1.0:
            raise InvalidArgumentError(f"need cost >= 0 and decay in [0, 1), got cost={cost!r}, decay={decay!r}")
        self.target, self.cost, self.decay = target, cost, decay
        self.estimate: torch.Tensor | None = None

    def penalty(self, hidden_data: torch.Tensor) -> torch.Tensor:
        """Update q with this batch's hidden probabilities; the gradient on the hidden inputs."""
        batch_mean = hidden_data.mean(0)
        if self.estimate is None:
            self.estimate = batch_mean
        else:
            self.estimate = self.decay * self.estimate + (1 - self.decay) * batch_mean
        return self.cost * (self.estimate - self.target)
