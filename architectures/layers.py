"""Building blocks shared by several architecture families."""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from typing import Any, Literal

import torch
import torch.nn as nn
from torch.fx import _symbolic_trace

from ._errors import InvalidArgumentError

NormLayer = Callable[[int], nn.Module]


def make_divisible(v: float, divisor: int = 8, min_value: int | None = None, round_limit: float = 0.9) -> int:
    """Round a channel count to the nearest multiple of ``divisor`` (at least ``min_value``),
    going up a step when rounding would lose more than ``1 - round_limit`` of ``v``; the
    rule timm and torchvision use, so channel counts match their checkpoints."""
    min_value = min_value or divisor
    new_v = max(min_value, int(v + divisor / 2) // divisor * divisor)
    if new_v < round_limit * v:
        new_v += divisor
    return new_v


class SqueezeExcite(nn.Module):
    """Squeeze-and-excitation channel gate (Hu et al., 2018): global mean, 1x1 conv down,
    activation, 1x1 conv up, gate, rescale. Parameter names (``fc1``, ``fc2``) equal timm's
    SEModule and torchvision's SqueezeExcitation, so their weights load unchanged."""

    def __init__(
        self,
        channels: int,
        rd_ratio: float = 1 / 16,
        rd_channels: int | None = None,
        rd_divisor: int = 8,
        act_layer: type[nn.Module] = nn.ReLU,
        gate: Literal["sigmoid", "hard_sigmoid"] = "sigmoid",
    ) -> None:
        super().__init__()
        if gate not in ("sigmoid", "hard_sigmoid"):
            raise InvalidArgumentError(f"gate must be 'sigmoid' or 'hard_sigmoid', got {gate!r}")
        if rd_channels is None:
            rd_channels = make_divisible(channels * rd_ratio, rd_divisor, round_limit=0.0)
        self.fc1 = nn.Conv2d(channels, rd_channels, kernel_size=1)
        self.act = act_layer()
        self.fc2 = nn.Conv2d(rd_channels, channels, kernel_size=1)
        self.gate = nn.Sigmoid() if gate == "sigmoid" else nn.Hardsigmoid()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = self.fc2(self.act(self.fc1(x.mean((2, 3), keepdim=True))))
        return x * self.gate(scale)


class InputDTypeError(InvalidArgumentError):
    """An input tensor of the wrong dtype: an `InvalidArgumentError` (so a TypeError, and a
    ValueError like the models' other input checks: ``except ValueError`` around a model call
    catches every input problem)."""


_AUTOCAST_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _autocast_enabled(device_type: str) -> bool:
    """Whether autocast is on for ``device_type`` (False for a type it does not know)."""
    try:
        return torch.is_autocast_enabled(device_type)
    except RuntimeError:  # a device type autocast does not know (meta)
        return False


def check_input_dtype(
    x: torch.Tensor,
    dtype: torch.dtype,
    name: str,
    what: str = "input",
    convert: str = "e.g. x.float() / 255 for 8-bit pixels",
    var: str = "x",
) -> None:
    """Raise an `InputDTypeError` naming ``dtype`` unless ``x`` can go through a model whose
    weights are ``dtype``: floating point of that dtype or, inside an autocast region for
    x's device (which casts both sides), any dtype autocast casts (float32, float16,
    bfloat16). Otherwise the first layer would fail with "expected scalar type Double but
    found Float" or a similar message that names neither the model nor the fix. ``what`` names
    the tensor in the message, ``var`` in the code it suggests, and ``convert`` says how to
    make integer data floating point."""
    if x.dtype == dtype:
        return
    if not x.is_floating_point():
        raise InputDTypeError(
            f"{name} expects floating-point {what} ({dtype}, the dtype of its weights); got {x.dtype}: "
            f"convert it, {convert}"
        )
    if _autocast_enabled(x.device.type) and x.dtype in _AUTOCAST_DTYPES and dtype in _AUTOCAST_DTYPES:
        return
    raise InputDTypeError(
        f"{name} has {dtype} weights, so it expects {dtype} {what}; got {x.dtype}: convert it with "
        f"{var}.to({dtype}), or the model with model.to({x.dtype}), or run it under torch.autocast"
    )


def is_capturing() -> bool:
    """Whether a tracer or compiler is capturing the model rather than running it: FX
    (``torch.fx.symbolic_trace``, torchvision's ``create_feature_extractor``), ``torch.jit.trace``,
    ``torch.compile`` or ``torch.export``. Input checks step aside then: their tensors are proxies
    or symbolic, and their cost would otherwise be part of the captured graph. (Under
    ``torch.jit.script`` the callers skip them with ``torch.jit.is_scripting()``.)"""
    return torch.compiler.is_compiling() or torch.compiler.is_exporting() or torch.jit.is_tracing() or fx_tracing()


def fx_tracing() -> bool:
    """Whether FX's symbolic tracer (``torch.fx.symbolic_trace``, torchvision's
    ``create_feature_extractor``) is running, as opposed to torch.export's own tracing."""
    tracing = getattr(_symbolic_trace, "is_fx_symbolic_tracing", None) or _symbolic_trace.is_fx_tracing
    return tracing() and not torch.compiler.is_exporting()


def check_image_input(
    x: torch.Tensor, in_chans: int, min_size: int, name: str, dtype: torch.dtype | None = None
) -> None:
    """Raise a ValueError naming the model and the shape it expects unless ``x`` is an image
    batch (N, in_chans, H, W) with H, W >= min_size, the smallest side that the model's
    convolutions and poolings keep (1 for the ResNets and MobileNets, whose adaptive pooling
    takes any size, as torchvision's do); then, given the weights' ``dtype``, an
    `InputDTypeError` unless `check_input_dtype` accepts x. A clear message beats a shape or
    dtype error deep inside a convolution. Any memory layout (channels_last, transposed
    views) is fine: the convolutions take it as it is. Nothing is checked while `is_capturing`."""
    if is_capturing():
        return
    if not isinstance(x, torch.Tensor):
        raise InvalidArgumentError(
            f"{name} expects a torch.Tensor of shape (N, {in_chans}, H, W); got {type(x).__name__}"
        )
    if not (x.ndim == 4 and x.shape[1] == in_chans and x.shape[2] >= min_size and x.shape[3] >= min_size):
        expected = f"{name} expects input of shape (N, {in_chans}, H, W) with H, W >= {min_size}"
        got = tuple(x.shape)
        if x.ndim != 4:
            single_image = x.ndim == 3 and x.shape[0] == in_chans  # (C, H, W): one image, no batch
            hint = "; add a batch dimension with x.unsqueeze(0)" if single_image else ""
            raise InvalidArgumentError(f"{expected}; got a {x.ndim}-D tensor of shape {got}{hint}")
        if x.shape[1] != in_chans:
            raise InvalidArgumentError(
                f"{expected}; got {got}: load the model with "
                f"in_chans={x.shape[1]} or convert the images to {in_chans} channel{'s' if in_chans != 1 else ''}"
            )
        raise InvalidArgumentError(f"{expected}; got {got}: images must be at least {min_size}x{min_size} pixels")
    if dtype is not None:
        check_input_dtype(x, dtype, name)


def check_int_option(name: str, value: Any, minimum: int = 1, what: str = "") -> None:
    """Raise an InvalidArgumentError naming the option and its range unless ``value`` is an int (not a
    bool) >= ``minimum``; ``what`` says what the option is, for the message."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise InvalidArgumentError(f"{name}{what} must be an int >= {minimum}, got {value!r}")


def check_bool_options(**options: Any) -> None:
    """Raise an InvalidArgumentError naming the first option that is not True or False (a config
    file's "no" or 1 would otherwise switch a part on silently)."""
    for name, value in options.items():
        if not isinstance(value, bool):
            raise InvalidArgumentError(f"{name} must be true or false, got {value!r}")


def check_float_option(
    name: str, value: Any, low: float, high: float = math.inf, *, low_open: bool = False, high_open: bool = True
) -> None:
    """Raise an InvalidArgumentError naming the option and its range unless ``value`` is a real number in
    the interval from ``low`` to ``high`` (each end open or closed as asked), not infinite."""
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
    if ok:
        ok = (value > low if low_open else value >= low) and (value < high if high_open else value <= high)
    if not ok:
        interval = f"{'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
        if high == math.inf:
            interval = f"> {low:g}" if low_open else f">= {low:g}"
            raise InvalidArgumentError(f"{name} must be a finite number {interval}, got {value!r}")
        raise InvalidArgumentError(f"{name} must be a number in {interval}, got {value!r}")


def check_rate_option(name: str, value: Any) -> None:
    """A dropout or drop-path probability: a number in [0, 1)."""
    check_float_option(name, value, 0.0, 1.0)


def linear_classifier(num_features: int, num_classes: int) -> nn.Module:
    """The classifier every family's ``reset_classifier`` installs: a freshly initialised
    ``num_classes``-way linear layer, or the identity for 0 so the model returns features."""
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 0:
        raise InvalidArgumentError(f"num_classes must be an int >= 0 (0 removes the classifier), got {num_classes!r}")
    return nn.Linear(num_features, num_classes) if num_classes > 0 else nn.Identity()


class DefaultCfg:
    """timm's ``default_cfg``, its older name for ``pretrained_cfg`` that its tools and tests
    still read: the same dict, and setting one sets the other. Left out of TorchScript."""

    __jit_unused_properties__ = ["default_cfg"]

    @property
    def default_cfg(self) -> dict[str, Any]:
        """The model's ``pretrained_cfg`` (timm's alias)."""
        return self.pretrained_cfg

    @default_cfg.setter
    def default_cfg(self, value: dict[str, Any]) -> None:
        self.pretrained_cfg = value


class LinearClassifier(DefaultCfg):
    """The model contract's ``get_classifier``/``reset_classifier`` for families whose head is
    one `linear_classifier` on ``num_features``, kept in the attribute ``classifier_attr``
    (``fc``, ``classifier``...: the reference layout's name, so state-dict keys match). The
    models set ``num_features`` and ``num_classes`` (no class annotations: TorchScript would
    read them as attribute types)."""

    classifier_attr = "classifier"

    def get_classifier(self) -> nn.Module:
        """The classifier module (timm's name), whatever attribute holds it."""
        return getattr(self, self.classifier_attr)

    def reset_classifier(self, num_classes: int) -> None:
        """Replace the classifier with a fresh ``num_classes``-way one (0: the features)."""
        setattr(self, self.classifier_attr, linear_classifier(self.num_features, num_classes))
        self.num_classes = num_classes


POOL_TYPES = ("avg", "max", "avgmax", "catavgmax", "")


class GlobalPool(nn.Module):
    """Global pooling with timm's pool types: "avg", "max", "avgmax" (their mean), "catavgmax"
    (both, concatenated: twice the channels) or "" (none: the input passes unchanged). ``dims``
    are the pooled dimensions: (2, 3) for feature maps (N, C, H, W), (1,) for tokens (N, L, C)."""

    def __init__(self, pool_type: str = "avg", dims: tuple[int, ...] = (2, 3)) -> None:
        super().__init__()
        if pool_type not in POOL_TYPES:
            choices = ", ".join(repr(t) for t in POOL_TYPES)
            raise InvalidArgumentError(f"global_pool must be one of {choices} (timm's pool types), got {pool_type!r}")
        self.pool_type = pool_type
        self.dims = dims

    def feat_mult(self) -> int:
        """How many times the channels the pooled output has (2 for catavgmax)."""
        return 2 if self.pool_type == "catavgmax" else 1

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.pool_type:
            return x
        if self.pool_type == "avg":
            return x.mean(self.dims)
        if self.pool_type == "max":
            return x.amax(self.dims)
        avg, top = x.mean(self.dims), x.amax(self.dims)
        return 0.5 * (avg + top) if self.pool_type == "avgmax" else torch.cat((avg, top), dim=1)

    def extra_repr(self) -> str:
        return f"pool_type={self.pool_type!r}"


class PooledLinearClassifier(LinearClassifier):
    """The vision models' head, as timm's: a `GlobalPool` (``global_pool``) then one
    `linear_classifier` on the pooled ``head_hidden_size`` features (both set here)."""

    pool_dims = (2, 3)  # the dimensions global_pool reduces

    def reset_classifier(self, num_classes: int, global_pool: str | None = None) -> None:
        """Replace the classifier with a fresh ``num_classes``-way one (0: the pooled features)
        and, unless ``global_pool`` is None, the pooling (timm's types; "" leaves the feature
        maps unpooled and needs ``num_classes=0``)."""
        pool = GlobalPool(self.global_pool.pool_type if global_pool is None else global_pool, self.pool_dims)
        check_unpooled_head(pool.pool_type, num_classes)
        self.global_pool = pool
        self.head_hidden_size = self.num_features * pool.feat_mult()
        setattr(self, self.classifier_attr, linear_classifier(self.head_hidden_size, num_classes))
        self.num_classes = num_classes


def check_unpooled_head(pool_type: str, num_classes: int) -> None:
    """A classifier needs pooled features: global_pool="" goes only with num_classes=0."""
    if not pool_type and num_classes:
        raise InvalidArgumentError(
            f"global_pool='' leaves the feature maps unpooled, which a classifier cannot take: pass "
            f"num_classes=0 with it (got num_classes={num_classes!r}), or a pool type such as 'avg'"
        )


class ConvNormAct(nn.Sequential):
    """Conv (no bias, "same" padding for odd kernels), BatchNorm, then the activation unless
    ``act_layer`` is None. Keys ``0.weight``, ``1.running_mean``... equal torchvision's
    Conv2dNormActivation, so MobileNet checkpoints load unchanged; ``norm_layer`` sets the
    BatchNorm's eps and momentum (e.g. ``partial(nn.BatchNorm2d, eps=1e-3, momentum=0.01)``)."""

    def __init__(
        self,
        in_chs: int,
        out_chs: int,
        kernel_size: int,
        stride: int = 1,
        groups: int = 1,
        act_layer: type[nn.Module] | None = nn.ReLU,
        norm_layer: NormLayer = nn.BatchNorm2d,
    ) -> None:
        padding = (kernel_size - 1) // 2
        layers = [
            nn.Conv2d(in_chs, out_chs, kernel_size, stride, padding, groups=groups, bias=False),
            norm_layer(out_chs),
        ]
        if act_layer is not None:
            layers.append(act_layer(inplace=True))
        super().__init__(*layers)


class DropPath(nn.Module):
    """Stochastic depth (Huang et al., 2016) on a residual branch: in training, each sample's
    branch is zeroed with probability ``p`` and the survivors are scaled by 1 / (1 - p), so
    the expected output is unchanged; the identity in eval and for p = 0."""

    def __init__(self, p: float = 0.0) -> None:
        super().__init__()
        if not 0.0 <= p < 1.0:
            raise InvalidArgumentError(f"drop-path probability must be in [0, 1), got {p!r}")
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0:
            return x
        keep = 1.0 - self.p
        mask = x.new_empty((x.shape[0],) + (1,) * (x.ndim - 1)).bernoulli_(keep)
        return x * mask / keep

    def extra_repr(self) -> str:
        return f"p={self.p}"


class DepthwiseSeparable(nn.Module):
    """MobileNetV1 block (Howard et al., 2017): a 3x3 depthwise conv carrying the stride
    filters each channel, a 1x1 pointwise conv mixes them (each with BN and the activation):
    8-9 times cheaper than a full 3x3 conv. ``se_layer(in_chs)`` adds a gate between them."""

    def __init__(
        self,
        in_chs: int,
        out_chs: int,
        stride: int = 1,
        act_layer: type[nn.Module] = nn.ReLU,
        se_layer: Callable[[int], nn.Module] | None = None,
        norm_layer: NormLayer = nn.BatchNorm2d,
    ) -> None:
        super().__init__()
        options = dict(act_layer=act_layer, norm_layer=norm_layer)
        self.dw = ConvNormAct(in_chs, in_chs, 3, stride, groups=in_chs, **options)
        self.se = se_layer(in_chs) if se_layer is not None else nn.Identity()
        self.pw = ConvNormAct(in_chs, out_chs, 1, **options)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pw(self.se(self.dw(x)))


class InvertedResidual(nn.Module):
    """MobileNetV2/V3 block (Sandler et al., 2018): 1x1 expansion to ``mid_chs`` (none when
    mid_chs == in_chs), kxk depthwise conv carrying the stride, optional gate
    ``se_layer(mid_chs)``, then a 1x1 projection with BN and no activation (a linear
    bottleneck). The input is added back when stride is 1 and in_chs == out_chs, the branch
    then dropped per sample with probability ``drop_path_rate`` in training.

    ``layout`` gives torchvision's state-dict keys: "v2" holds the layers in ``conv`` with a
    bare conv + BN projection (``conv.2.weight``, ``conv.3.running_var``), "v3" in ``block``
    with a ConvNormAct projection (``block.3.0.weight``)."""

    def __init__(
        self,
        in_chs: int,
        out_chs: int,
        mid_chs: int,
        kernel_size: int = 3,
        stride: int = 1,
        act_layer: type[nn.Module] = nn.ReLU6,
        se_layer: Callable[[int], nn.Module] | None = None,
        norm_layer: NormLayer = nn.BatchNorm2d,
        drop_path_rate: float = 0.0,
        layout: Literal["v2", "v3"] = "v2",
    ) -> None:
        super().__init__()
        if layout not in ("v2", "v3"):
            raise InvalidArgumentError(f"layout must be 'v2' or 'v3', got {layout!r}")
        options = dict(act_layer=act_layer, norm_layer=norm_layer)
        layers: list[nn.Module] = []
        if mid_chs != in_chs:
            layers.append(ConvNormAct(in_chs, mid_chs, 1, **options))
        layers.append(ConvNormAct(mid_chs, mid_chs, kernel_size, stride, groups=mid_chs, **options))
        if se_layer is not None:
            layers.append(se_layer(mid_chs))
        if layout == "v2":
            layers += [nn.Conv2d(mid_chs, out_chs, 1, bias=False), norm_layer(out_chs)]
        else:
            layers.append(ConvNormAct(mid_chs, out_chs, 1, act_layer=None, norm_layer=norm_layer))
        self.body_name = "conv" if layout == "v2" else "block"
        self.add_module(self.body_name, nn.Sequential(*layers))
        self.has_residual = stride == 1 and in_chs == out_chs
        self.drop_path = DropPath(drop_path_rate)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.conv(x) if hasattr(self, "conv") else self.block(x)  # TorchScript: no getattr by a variable
        return x + self.drop_path(out) if self.has_residual else out


def rotary_cos_sin(
    positions: torch.Tensor, head_dim: int, theta: float, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin tables of rotary position embeddings (Su et al., 2021) for integer
    ``positions`` (any shape), each of shape (*positions.shape, head_dim). Computed in fp32
    and then cast, as Llama and Mixtral do, so their checkpoints give the same outputs.
    Made on the fly (no buffer) so that models built on the meta device need no fix-up."""
    exponents = torch.arange(0, head_dim, 2, dtype=torch.float, device=positions.device) / head_dim
    inv_freq = 1.0 / (theta**exponents)
    freqs = positions[..., None].float() * inv_freq
    angles = torch.cat((freqs, freqs), dim=-1)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate the pairs (i, i + d/2) of the last dimension of ``x`` by the positions' angles
    (the "rotate half" layout of GPT-NeoX, Llama and Mixtral checkpoints)."""
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin
