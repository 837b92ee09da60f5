"""MobileNet family from one class driven by a block table: MobileNetV1 (Howard et al., 2017),
torchvision's MobileNetV2 and MobileNetV3 large/small, each with a width multiplier and a
small-input (CIFAR) variant.

The state-dict layout is torchvision's (features.0 the stem, then the blocks with ``conv.*``
(V2) or ``block.*`` (V3) inside, then the last 1x1 conv; classifier.1 (V2) or classifier.0/.3
(V3)), so torchvision checkpoints load without renaming keys. MobileNetV1 has no torchvision
model; it uses the same layout with ``dw``/``se``/``pw`` blocks, no last conv, classifier.1.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, Literal, NamedTuple

import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint

from ._errors import InvalidArgumentError
from ._registry import register_model
from .features import FeatureInfo, FeatureLevels, Indices, feature_take_indices
from .layers import (
    ConvNormAct,
    DefaultCfg,
    DepthwiseSeparable,
    GlobalPool,
    InvertedResidual,
    NormLayer,
    SqueezeExcite,
    check_float_option,
    check_image_input,
    check_int_option,
    check_rate_option,
    check_unpooled_head,
    is_capturing,
    linear_classifier,
    make_divisible,
)


class BlockSpec(NamedTuple):
    """One block of a MobileNet, channel counts already scaled by the width multiplier."""

    out_chs: int
    stride: int
    mid_chs: int | None = None  # expanded width of an inverted residual; None: depthwise-separable
    kernel_size: int = 3
    act_layer: type[nn.Module] = nn.ReLU
    se_layer: Callable[[int], nn.Module] | None = None


def _block(
    spec: BlockSpec, in_chs: int, stride: int, drop_path: float, norm_layer: NormLayer, layout: Literal["v2", "v3"]
) -> nn.Module:
    """The block of one spec: depthwise-separable (V1) or an inverted residual with stochastic
    depth ``drop_path`` (V2, V3)."""
    options = dict(act_layer=spec.act_layer, se_layer=spec.se_layer, norm_layer=norm_layer)
    if spec.mid_chs is None:
        return DepthwiseSeparable(in_chs, spec.out_chs, stride, **options)
    return InvertedResidual(
        in_chs,
        spec.out_chs,
        spec.mid_chs,
        spec.kernel_size,
        stride,
        drop_path_rate=drop_path,
        layout=layout,
        **options,
    )


class MobileNet(FeatureLevels, DefaultCfg, nn.Module):
    """A stem conv, one block per ``BlockSpec`` (``features.1``...), an optional 1x1 conv to
    ``head_chs`` channels, global pooling and the classifier: an optional hidden Linear +
    Hardswish of ``head_hidden`` units (V3), dropout and the final Linear. ``act_layer`` is
    the stem's and last conv's activation (each block names its own), ``norm_layer`` makes every
    BatchNorm, ``layout`` picks torchvision's V2 or V3 keys for the inverted residuals.

    ``small_input=True`` adapts the ImageNet layout to 28-32 px images: the stem and the first
    strided block keep the resolution, so the total stride is 8 instead of 32.
    ``drop_path_rate`` is stochastic depth on the residual blocks, rising linearly to that
    value over the depth (timm's schedule). ``global_pool`` is the head's pooling (timm's
    types: avg, max, avgmax, and catavgmax where no hidden layer needs a fixed width).
    Feature levels (``feature_info``): the last block at each reduction (timm's choice for
    MobileNets; V3's last conv counts as a block, V2's, timm's conv_head, does not).
    """

    first_conv = "features.0.0"

    def __init__(
        self,
        blocks: Sequence[BlockSpec],
        stem_chs: int,
        head_chs: int | None = None,
        head_hidden: int | None = None,
        act_layer: type[nn.Module] = nn.ReLU,
        norm_layer: NormLayer = nn.BatchNorm2d,
        layout: Literal["v2", "v3"] = "v2",
        num_classes: int = 1000,
        in_chans: int = 3,
        small_input: bool = False,
        drop_rate: float = 0.2,
        drop_path_rate: float = 0.0,
        global_pool: str = "avg",
        name: str = "mobilenet",
    ) -> None:
        super().__init__()
        check_int_option("in_chans", in_chans, what=" (the image channels: 1 gray, 3 RGB)")
        check_rate_option("drop_rate", drop_rate)
        check_rate_option("drop_path_rate", drop_path_rate)
        if not blocks:
            raise InvalidArgumentError("a MobileNet needs at least one block")
        self.name = name
        self.in_chans = in_chans
        self.pretrained_cfg = {}  # no annotation in __init__: TorchScript warns on annotated dicts there
        self.grad_checkpointing = False

        levels = self._build_features(
            blocks,
            stem_chs,
            head_chs,
            head_hidden,
            act_layer,
            norm_layer,
            layout,
            in_chans,
            small_input,
            drop_path_rate,
        )
        self.feature_info = FeatureInfo(
            [dict(num_chs=c, reduction=r, module=f"features.{i}") for r, (i, c) in levels.items()]
        )
        self._taps = [i for i, _ in levels.values()]
        # Every convolution is padded ((k - 1) // 2), so each stride keeps ceil(side / stride)
        # >= 1 and global pooling takes whatever is left: any side >= 1 runs, as with
        # torchvision's MobileNets. The total stride is feature_info[-1]["reduction"].
        self.min_input_size = 1

        chs = head_chs if head_chs is not None else blocks[-1].out_chs
        self.num_features = chs
        self.head_hidden = head_hidden
        hidden = [nn.Linear(chs, head_hidden), nn.Hardswish(inplace=True)] if head_hidden else []
        self.classifier = nn.Sequential(*hidden, nn.Dropout(drop_rate), nn.Identity())
        self.reset_classifier(num_classes, global_pool)
        self._init_weights()

    def _build_features(
        self,
        blocks: Sequence[BlockSpec],
        stem_chs: int,
        head_chs: int | None,
        head_hidden: int | None,
        act_layer: type[nn.Module],
        norm_layer: NormLayer,
        layout: Literal["v2", "v3"],
        in_chans: int,
        small_input: bool,
        drop_path_rate: float,
    ) -> dict[int, tuple[int, int]]:
        """``features``: the stem conv, one block per spec and the optional last 1x1 conv.
        Returns, per reduction, the index and channels of the last module there (the levels)."""
        reduction = 1 if small_input else 2
        stem = ConvNormAct(in_chans, stem_chs, 3, reduction, act_layer=act_layer, norm_layer=norm_layer)
        self.features = nn.Sequential(stem)
        levels = {reduction: (0, stem_chs)}  # reduction -> (index, channels) of the last module there
        first_strided = next(i for i, spec in enumerate(blocks) if spec.stride > 1)
        chs = stem_chs
        for i, spec in enumerate(blocks):
            stride = 1 if small_input and i == first_strided else spec.stride
            drop_path = drop_path_rate * i / len(blocks)
            self.features.append(_block(spec, chs, stride, drop_path, norm_layer, layout))
            chs, reduction = spec.out_chs, reduction * stride
            levels[reduction] = (len(self.features) - 1, chs)
        if head_chs is not None:
            self.features.append(ConvNormAct(chs, head_chs, 1, act_layer=act_layer, norm_layer=norm_layer))
            if head_hidden:  # timm's levels: V3's last conv is its last block, V2's is its conv_head (no level)
                levels[reduction] = (len(self.features) - 1, head_chs)
        return levels

    def _init_weights(self) -> None:
        """torchvision's: Kaiming-normal convolutions (fan out) with zero bias, BN scale 1 and
        shift 0, Linear weights normal(0, 0.01) with zero bias."""
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out")
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0, 0.01)
                nn.init.zeros_(m.bias)

    def get_classifier(self) -> nn.Module:
        """The final Linear (timm's name), inside ``classifier``."""
        return self.classifier[-1]

    def reset_classifier(self, num_classes: int, global_pool: str | None = None) -> None:
        """Replace the final Linear with a fresh ``num_classes``-way one; 0 leaves the identity,
        so the model returns the pooled features (V3: the hidden layer's ``head_hidden_size``
        features, which stays, as with timm). ``global_pool`` (unless None) replaces the
        pooling: timm's types, "" (no pooling, no head at all) needing ``num_classes=0``, and
        catavgmax only without V3's hidden layer, whose input width is fixed."""
        pool = GlobalPool(self.global_pool.pool_type if global_pool is None else global_pool)
        check_unpooled_head(pool.pool_type, num_classes)
        if self.head_hidden and pool.feat_mult() != 1:
            raise InvalidArgumentError(
                f"{self.name} cannot take global_pool={pool.pool_type!r}: its hidden head layer reads "
                f"{self.num_features} pooled features; use 'avg', 'max' or 'avgmax'"
            )
        self.global_pool = pool
        self.head_hidden_size = self.head_hidden or self.num_features * pool.feat_mult()
        self.classifier[-1] = linear_classifier(self.head_hidden_size, num_classes)
        self.num_classes = num_classes

    def set_grad_checkpointing(self, enable: bool = True) -> None:
        """Recompute each module of ``features`` (stem, blocks, last conv) in the backward pass
        instead of storing its activations (training only). As with timm, BatchNorm running
        statistics are updated once more by the recomputation; gradients are unchanged."""
        self.grad_checkpointing = enable

    def _run(self, x: torch.Tensor, take: list[int], last: int) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Run ``features`` up to feature level ``last`` (all of them for the deepest level),
        keeping the maps of the levels in ``take``: (the last tensor computed, those maps).
        Written for TorchScript too (its unrolled loops have no ``break`` or slices)."""
        if not torch.jit.is_scripting():
            check_image_input(x, self.in_chans, self.min_input_size, self.name, self.features[0][0].weight.dtype)
        taps = [self._taps[level] for level in take]
        intermediates: list[torch.Tensor] = []
        end = len(self.features) if last == len(self._taps) - 1 else self._taps[last] + 1
        for i, module in enumerate(self.features):
            if i < end:
                if torch.jit.is_scripting():
                    x = module(x)
                else:
                    x = self._run_module(module, x)
                if i in taps:
                    intermediates.append(x)
        return x, intermediates

    def _run_module(self, module: nn.Module, x: torch.Tensor) -> torch.Tensor:
        """One module of ``features``, checkpointed when `set_grad_checkpointing` asks (in training)."""
        if self.grad_checkpointing and self.training and torch.is_grad_enabled() and not is_capturing():
            return checkpoint(module, x, use_reentrant=False)
        return module(x)

    def prune_intermediate_layers(
        self, indices: Indices = 1, prune_norm: bool = False, prune_head: bool = True
    ) -> list[int]:
        """timm's: cut ``features`` after the deepest level of ``indices`` (V2's last conv goes
        unless that is the last level); with ``prune_head``, or when the features end earlier,
        drop the head (no pooling, no classifier). Returns the levels asked for, as absolute
        indices."""
        take, deepest = feature_take_indices(len(self.feature_info), indices)
        if deepest < len(self.feature_info) - 1:
            self.features = self.features[: self._taps[deepest] + 1]
            self.num_features = self.feature_info[deepest]["num_chs"]
        if prune_head or deepest < len(self.feature_info) - 1:
            self.head_hidden, self.classifier = None, nn.Sequential(nn.Identity())
            self.reset_classifier(0, "")
        return take

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """Unpooled feature map of shape (N, num_features, ceil(H / s), ceil(W / s)), s the total
        stride ``feature_info[-1]["reduction"]``."""
        return self._run(x, [], len(self._taps) - 1)[0]

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        """Global pooling (``global_pool``), V3's hidden layer (Linear + Hardswish: timm's
        conv_head), then unless ``pre_logits`` dropout and the final Linear, as timm's: so
        ``pre_logits`` gives ``head_hidden_size`` features. Without pooling (global_pool="")
        the maps stay maps; V3's hidden layer then acts at each position, as timm's 1x1 conv."""
        x = self.global_pool(x)
        unpooled = not self.global_pool.pool_type
        if unpooled:
            x = x.movedim(1, -1)  # channels last, for the Linear layers
        hidden = len(self.classifier) - 2  # [Linear, Hardswish,] Dropout, final Linear
        for i, layer in enumerate(self.classifier):
            if i < hidden or not pre_logits:
                x = layer(x)
        return x.movedim(-1, 1) if unpooled else x

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(x))


def _channels(chs: float) -> int:
    """Channel count scaled by a width multiplier, rounded to a multiple of 8 (torchvision's rule)."""
    return make_divisible(chs, 8)


def _hard_se(chs: int) -> SqueezeExcite:
    """MobileNetV3's gate: a quarter of the channels rounded as torchvision does, hard sigmoid."""
    return SqueezeExcite(chs, rd_channels=_channels(chs // 4), gate="hard_sigmoid")


def _se(se_ratio: float | None) -> Callable[[int], nn.Module] | None:
    """The optional V1/V2 gate: sigmoid, squeezing to ``se_ratio`` of the gated channels."""
    if se_ratio is None:
        return None
    check_float_option("se_ratio", se_ratio, 0.0, 1.0, low_open=True, high_open=False)
    return partial(SqueezeExcite, rd_ratio=se_ratio)


def _check_width_mult(width_mult: float) -> None:
    """The width multiplier scales every layer's channels (rounded to multiples of 8, at
    least 8): any positive finite number."""
    check_float_option("width_mult", width_mult, 0.0, low_open=True)


# MobileNetV1 (Howard et al., 2017, table 1): out channels, stride of each block. The paper's
# table prints stride 2 for the last block, but its 7x7 output (and every port) means stride 1.
_V1 = [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2), *[(512, 1)] * 5, (1024, 2), (1024, 1)]

# MobileNetV2 (Sandler et al., 2018, table 2): expansion t, out channels c, repeats n, first stride s.
_V2 = [
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
]

# MobileNetV3 (Howard et al., 2019, tables 1 and 2, as torchvision builds them): kernel,
# expanded channels, out channels, squeeze-excite, activation, stride.
_RE, _HS = nn.ReLU, nn.Hardswish
_V3_LARGE_BLOCKS = [
    (3, 16, 16, False, _RE, 1),
    (3, 64, 24, False, _RE, 2),
    (3, 72, 24, False, _RE, 1),
    (5, 72, 40, True, _RE, 2),
    (5, 120, 40, True, _RE, 1),
    (5, 120, 40, True, _RE, 1),
    (3, 240, 80, False, _HS, 2),
    (3, 200, 80, False, _HS, 1),
    (3, 184, 80, False, _HS, 1),
    (3, 184, 80, False, _HS, 1),
    (3, 480, 112, True, _HS, 1),
    (3, 672, 112, True, _HS, 1),
    (5, 672, 160, True, _HS, 2),
    (5, 960, 160, True, _HS, 1),
    (5, 960, 160, True, _HS, 1),
]
_V3_SMALL_BLOCKS = [
    (3, 16, 16, True, _RE, 2),
    (3, 72, 24, False, _RE, 2),
    (3, 88, 24, False, _RE, 1),
    (5, 96, 40, True, _HS, 2),
    (5, 240, 40, True, _HS, 1),
    (5, 240, 40, True, _HS, 1),
    (5, 120, 48, True, _HS, 1),
    (5, 144, 48, True, _HS, 1),
    (5, 288, 96, True, _HS, 2),
    (5, 576, 96, True, _HS, 1),
    (5, 576, 96, True, _HS, 1),
]


def _mobilenet_v1(name: str, width_mult: float = 1.0, se_ratio: float | None = None, **kwargs: Any) -> MobileNet:
    """MobileNetV1 at ``width_mult``: depthwise-separable blocks, optionally squeeze-excite."""
    _check_width_mult(width_mult)
    se_layer = _se(se_ratio)
    blocks = [BlockSpec(_channels(c * width_mult), s, se_layer=se_layer) for c, s in _V1]
    return MobileNet(blocks, stem_chs=_channels(32 * width_mult), name=name, **kwargs)


def _mobilenet_v2(name: str, width_mult: float = 1.0, se_ratio: float | None = None, **kwargs: Any) -> MobileNet:
    """MobileNetV2 at ``width_mult``: torchvision's inverted-residual table and 1280-channel last conv."""
    _check_width_mult(width_mult)
    se_layer = _se(se_ratio)
    stem_chs = chs = _channels(32 * width_mult)
    blocks = []
    for t, c, n, s in _V2:
        out_chs = _channels(c * width_mult)
        for i in range(n):
            blocks.append(BlockSpec(out_chs, s if i == 0 else 1, round(chs * t), 3, nn.ReLU6, se_layer))
            chs = out_chs
    head_chs = _channels(1280 * max(1.0, width_mult))
    return MobileNet(blocks, stem_chs, head_chs, act_layer=nn.ReLU6, layout="v2", name=name, **kwargs)


def _mobilenet_v3(
    name: str, table: Sequence[tuple], head_hidden: int, width_mult: float = 1.0, **kwargs: Any
) -> MobileNet:
    """MobileNetV3 from its block ``table`` at ``width_mult``, with torchvision's hidden head layer."""
    _check_width_mult(width_mult)
    blocks = [
        BlockSpec(_channels(out * width_mult), s, _channels(mid * width_mult), k, act, _hard_se if se else None)
        for k, mid, out, se, act, s in table
    ]
    return MobileNet(
        blocks,
        stem_chs=_channels(16 * width_mult),
        head_chs=6 * blocks[-1].out_chs,
        head_hidden=_channels(head_hidden * width_mult),
        act_layer=nn.Hardswish,
        norm_layer=partial(nn.BatchNorm2d, eps=0.001, momentum=0.01),
        layout="v3",
        name=name,
        **kwargs,
    )


_CIFAR_DEFAULTS = dict(small_input=True, num_classes=10)


@register_model(int8=True, timm_names={"mobilenetv1_100": {}})
def mobilenet_v1(**kwargs: Any) -> MobileNet:
    """MobileNetV1 (Howard et al., 2017): 13 depthwise-separable blocks, ReLU, 4.2M params;
    ``width_mult`` is the paper's alpha, ``se_ratio`` adds a squeeze-excite gate between each
    block's depthwise and pointwise convs."""
    return _mobilenet_v1("mobilenet_v1", **kwargs)


@register_model(
    int8=True,
    timm_names={"mobilenetv2_050": {"width_mult": 0.5}, "mobilenetv2_100": {}, "mobilenetv2_140": {"width_mult": 1.4}},
)
def mobilenet_v2(**kwargs: Any) -> MobileNet:
    """MobileNetV2 (Sandler et al., 2018); torchvision layout. ``se_ratio`` adds a
    squeeze-excite gate after each depthwise conv (no published weights have one)."""
    return _mobilenet_v2("mobilenet_v2", **kwargs)


@register_model(int8=True, timm_names={"mobilenetv3_large_100": {}})
def mobilenet_v3_large(**kwargs: Any) -> MobileNet:
    """MobileNetV3-Large (Howard et al., 2019); torchvision layout."""
    return _mobilenet_v3("mobilenet_v3_large", _V3_LARGE_BLOCKS, 1280, **kwargs)


@register_model(int8=True, timm_names={"mobilenetv3_small_100": {}})
def mobilenet_v3_small(**kwargs: Any) -> MobileNet:
    """MobileNetV3-Small (Howard et al., 2019); torchvision layout."""
    return _mobilenet_v3("mobilenet_v3_small", _V3_SMALL_BLOCKS, 1024, **kwargs)


@register_model(int8=True)
def mobilenet_v1_cifar(**kwargs: Any) -> MobileNet:
    """MobileNetV1 for 28-32 px images (``small_input``: total stride 8), 10 classes."""
    return _mobilenet_v1("mobilenet_v1_cifar", **{**_CIFAR_DEFAULTS, **kwargs})


@register_model(int8=True)
def mobilenet_v2_cifar(**kwargs: Any) -> MobileNet:
    """MobileNetV2 for 28-32 px images (``small_input``: total stride 8), 10 classes."""
    return _mobilenet_v2("mobilenet_v2_cifar", **{**_CIFAR_DEFAULTS, **kwargs})


@register_model(int8=True)
def mobilenet_v3_small_cifar(**kwargs: Any) -> MobileNet:
    """MobileNetV3-Small for 28-32 px images (``small_input``: total stride 8), 10 classes."""
    return _mobilenet_v3("mobilenet_v3_small_cifar", _V3_SMALL_BLOCKS, 1024, **{**_CIFAR_DEFAULTS, **kwargs})
