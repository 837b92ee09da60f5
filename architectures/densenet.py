"""DenseNet family from one class: torchvision's ImageNet DenseNets and Huang et al.'s
small-image (CIFAR) DenseNet-BC, optionally with squeeze-excite, with Pleiss et al.'s
memory-efficient mode.

The state-dict layout is torchvision's current one (features.conv0/norm0, features.denseblockN
.denselayerM.norm1/conv1/norm2/conv2, features.transitionN.norm/conv, features.norm5,
classifier), so torchvision's ``state_dict()`` loads unchanged; its published checkpoints use
an older naming that zoo.store.convert's "torchvision_densenet" converter renames.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, Literal

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from ._errors import InvalidArgumentError
from ._registry import register_model
from .features import FeatureInfo, FeatureLevels, Indices, feature_take_indices
from .layers import (
    PooledLinearClassifier,
    SqueezeExcite,
    check_float_option,
    check_image_input,
    check_int_option,
    check_rate_option,
    is_capturing,
)


class DenseLayer(nn.Module):
    """BN-ReLU-1x1 conv to ``bn_size * growth_rate`` channels (the bottleneck), then
    BN-ReLU-3x3 conv to ``growth_rate`` new channels, on the concatenation of all earlier
    feature maps of the block."""

    def __init__(self, in_channels: int, growth_rate: int, bn_size: int, drop_rate: float) -> None:
        super().__init__()
        width = bn_size * growth_rate
        self.norm1 = nn.BatchNorm2d(in_channels)
        self.relu1 = nn.ReLU(inplace=True)
        self.conv1 = nn.Conv2d(in_channels, width, 1, bias=False)
        self.norm2 = nn.BatchNorm2d(width)
        self.relu2 = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(width, growth_rate, 3, padding=1, bias=False)
        self.drop_rate = drop_rate

    def bottleneck(self, features: list[torch.Tensor]) -> torch.Tensor:
        """Concat-BN-ReLU-1x1 conv: the part whose large intermediates the memory-efficient
        mode recomputes instead of storing."""
        return self.conv1(self.relu1(self.norm1(torch.cat(features, 1))))

    def forward(self, features: list[torch.Tensor], use_checkpoint: bool = False) -> torch.Tensor:
        if torch.jit.is_scripting():
            x = self.bottleneck(features)
        else:
            x = self._eager_bottleneck(features, use_checkpoint)
        x = self.conv2(self.relu2(self.norm2(x)))
        return F.dropout(x, self.drop_rate, self.training) if self.drop_rate > 0 else x

    def _eager_bottleneck(self, features: list[torch.Tensor], use_checkpoint: bool) -> torch.Tensor:
        """`bottleneck`, recomputed in the backward pass with ``use_checkpoint`` (unless captured)."""
        if use_checkpoint and not is_capturing():  # the tensors, not the list the block goes on growing
            return checkpoint(lambda *tensors: self.bottleneck(list(tensors)), *features, use_reentrant=False)
        return self.bottleneck(features)


class DenseBlock(nn.Module):
    """``num_layers`` dense layers, each adding ``growth_rate`` channels; the output is the
    concatenation of the input and every new map, optionally rescaled by one squeeze-excite
    gate over all its channels (``se_ratio``)."""

    def __init__(
        self,
        num_layers: int,
        in_channels: int,
        growth_rate: int,
        bn_size: int,
        drop_rate: float,
        se_ratio: float | None = None,
    ) -> None:
        super().__init__()
        self.num_layers = num_layers
        for i in range(num_layers):
            layer = DenseLayer(in_channels + i * growth_rate, growth_rate, bn_size, drop_rate)
            self.add_module(f"denselayer{i + 1}", layer)
        self.out_channels = in_channels + num_layers * growth_rate
        self.se = SqueezeExcite(self.out_channels, se_ratio) if se_ratio is not None else nn.Identity()

    def forward(self, x: torch.Tensor, use_checkpoint: bool = False) -> torch.Tensor:
        features = [x]
        # The dense layers in order. TorchScript unrolls the loop; it needs hasattr, not
        # isinstance, to tell the children apart (its isinstance answers for the first layer only).
        for _, layer in self.named_children():
            if hasattr(layer, "conv2"):
                features.append(layer(features, use_checkpoint))
        return self.se(torch.cat(features, 1))


def _transition(in_channels: int, out_channels: int) -> nn.Sequential:
    """BN-ReLU-1x1 conv (compression) and 2x2 average pool between dense blocks."""
    return nn.Sequential(
        OrderedDict(
            norm=nn.BatchNorm2d(in_channels),
            relu=nn.ReLU(inplace=True),
            conv=nn.Conv2d(in_channels, out_channels, 1, bias=False),
            pool=nn.AvgPool2d(2, stride=2),
        )
    )


def _pooled_side(side: int, features: nn.Module) -> int:
    """The side of the feature map that an image side becomes after the convolutions and
    poolings of ``features``, in order (the dense layers keep it; the stem and each
    transition shrink it); 0 once a pooling has nothing left to pool."""
    for m in features.modules():
        if isinstance(m, (nn.Conv2d, nn.MaxPool2d, nn.AvgPool2d)):
            k, s, p = (v if isinstance(v, int) else v[0] for v in (m.kernel_size, m.stride, m.padding))
            d = 1 if isinstance(m, nn.AvgPool2d) else (m.dilation if isinstance(m.dilation, int) else m.dilation[0])
            side = (side + 2 * p - d * (k - 1) - 1) // s + 1
            if side < 1:
                return 0
    return side


def _smallest_side(features: nn.Module) -> int:
    """The smallest image side the net runs on. Unlike the ResNets' and MobileNets' padded
    strides, each transition's unpadded 2x2 average pool needs a map of at least 2 pixels, so
    small images fail there (torchvision's DenseNets alike): torchvision's densenet121 needs
    29 px, the CIFAR DenseNets 4 px."""
    side = 1
    while _pooled_side(side, features) < 1:
        side += 1
    return side


def _stem(in_chans: int, width: int, small: bool) -> tuple[nn.Sequential, dict[str, Any]]:
    """The start of ``features``: one 3x3/1 conv (CIFAR) or torchvision's 7x7/2 conv, BN,
    ReLU and 3x3/2 max-pool; and the stem's feature level."""
    if small:
        stem = nn.Sequential(OrderedDict(conv0=nn.Conv2d(in_chans, width, 3, padding=1, bias=False)))
        return stem, dict(num_chs=width, reduction=1, module="features.conv0")
    stem = nn.Sequential(
        OrderedDict(
            conv0=nn.Conv2d(in_chans, width, 7, stride=2, padding=3, bias=False),
            norm0=nn.BatchNorm2d(width),
            relu0=nn.ReLU(inplace=True),
            pool0=nn.MaxPool2d(3, stride=2, padding=1),
        )
    )
    return stem, dict(num_chs=width, reduction=2, module="features.relu0")


def _check_densenet_options(
    growth_rate: int,
    block_config: Sequence[int],
    num_init_features: int,
    in_chans: int,
    bn_size: int,
    drop_rate: float,
    se_ratio: float | None,
    stem: str,
) -> None:
    """Raise an InvalidArgumentError naming the option unless `DenseNet` can be built with these."""
    if stem not in ("imagenet", "cifar"):
        raise InvalidArgumentError(f"stem must be 'imagenet' or 'cifar', got {stem!r}")
    check_int_option("in_chans", in_chans, what=" (the image channels: 1 gray, 3 RGB)")
    if not block_config or any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in block_config):
        raise InvalidArgumentError(f"need one positive layer count (depth) per dense block, got {tuple(block_config)}")
    check_int_option("growth_rate", growth_rate)
    check_int_option("num_init_features", num_init_features)
    check_int_option("bn_size", bn_size)
    if se_ratio is not None:
        check_float_option("se_ratio", se_ratio, 0.0, 1.0, low_open=True, high_open=False)
    check_rate_option("drop_rate", drop_rate)


class DenseNet(FeatureLevels, PooledLinearClassifier, nn.Module):
    """Densely connected network (Huang et al., 2017), DenseNet-BC: bottleneck dense layers
    and transitions that halve the channels (compression 0.5) and the resolution.

    ``stem="imagenet"``: 7x7/2 conv, BN, ReLU, 3x3/2 max-pool (torchvision's DenseNets).
    ``stem="cifar"``: one 3x3/1 conv, nothing else, as in the authors' CIFAR code (each dense
    layer starts with its own BN-ReLU); meant for 28-32 px images with three blocks.
    ``drop_rate`` is dropout on each dense layer's new features (torchvision's meaning);
    ``se_ratio`` adds a squeeze-excite gate at the end of each dense block; ``global_pool`` is
    the head's pooling (timm's types: avg, max, avgmax, catavgmax).
    Feature levels (``feature_info``): the stem before the pool, each dense block's output
    before its transition, and for the last block the output after the final BN-ReLU.
    """

    first_conv = "features.conv0"

    def __init__(
        self,
        growth_rate: int,
        block_config: Sequence[int],
        num_init_features: int,
        num_classes: int = 1000,
        in_chans: int = 3,
        bn_size: int = 4,
        drop_rate: float = 0.0,
        se_ratio: float | None = None,
        stem: Literal["imagenet", "cifar"] = "imagenet",
        global_pool: str = "avg",
        name: str = "densenet",
    ) -> None:
        super().__init__()
        _check_densenet_options(
            growth_rate, block_config, num_init_features, in_chans, bn_size, drop_rate, se_ratio, stem
        )
        small = stem == "cifar"
        self.name = name
        self.in_chans = in_chans
        self.pretrained_cfg = {}  # no annotation in __init__: TorchScript warns on annotated dicts there
        self.grad_checkpointing = False

        self.features, stem_info = _stem(in_chans, num_init_features, small)
        block_info = self._add_blocks(growth_rate, block_config, num_init_features, bn_size, drop_rate, se_ratio, small)
        self.feature_info = FeatureInfo([stem_info, *block_info])
        self.min_input_size = _smallest_side(self.features)
        self._taps = [info["module"].removeprefix("features.") for info in self.feature_info]

        self.num_features = block_info[-1]["num_chs"]
        self.reset_classifier(num_classes, global_pool)
        self._init_weights()

    def _add_blocks(
        self,
        growth_rate: int,
        block_config: Sequence[int],
        channels: int,
        bn_size: int,
        drop_rate: float,
        se_ratio: float | None,
        small: bool,
    ) -> list[dict[str, Any]]:
        """Append the dense blocks, the transitions between them and the final BN-ReLU
        (norm5, relu5) to ``features``, which ends with ``channels`` channels; returns the
        feature levels of the blocks."""
        feature_info = []
        for i, num_layers in enumerate(block_config):
            block = DenseBlock(num_layers, channels, growth_rate, bn_size, drop_rate, se_ratio)
            self.features.add_module(f"denseblock{i + 1}", block)
            channels = block.out_channels
            if i < len(block_config) - 1:
                reduction = (1 if small else 4) * 2**i
                tap = f"features.denseblock{i + 1}"
                feature_info.append(dict(num_chs=channels, reduction=reduction, module=tap))
                self.features.add_module(f"transition{i + 1}", _transition(channels, channels // 2))
                channels //= 2
        self.features.add_module("norm5", nn.BatchNorm2d(channels))
        self.features.add_module("relu5", nn.ReLU(inplace=True))
        stride = (1 if small else 4) * 2 ** (len(block_config) - 1)
        feature_info.append(dict(num_chs=channels, reduction=stride, module="features.relu5"))
        return feature_info

    def _init_weights(self) -> None:
        """torchvision's: Kaiming-normal convolutions, BN scale 1 and shift 0, zero linear bias."""
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight)
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                nn.init.zeros_(m.bias)

    def set_grad_checkpointing(self, enable: bool = True) -> None:
        """Memory-efficient mode (Pleiss et al., 2017; torchvision's ``memory_efficient``): in
        training, each dense layer's concat-BN-ReLU-1x1 conv is recomputed in the backward pass
        instead of storing the concatenation and its normalised copy, so memory grows linearly
        rather than quadratically with depth. As with torchvision, norm1's running statistics
        are updated once more by the recomputation; gradients are unchanged."""
        self.grad_checkpointing = enable

    def final_map_size(self, height: int, width: int) -> tuple[int, int]:
        """(H, W) of ``forward_features``' map for a height x width input: the transitions'
        unpadded average pools round down (timm's ``pool_size`` at ``input_size``)."""
        return _pooled_side(height, self.features), _pooled_side(width, self.features)

    def _run(self, x: torch.Tensor, take: list[int], last: int) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Run ``features`` up to feature level ``last``, keeping the maps of the levels in
        ``take``: (the last tensor computed, those maps). Written for TorchScript too (its
        unrolled loops have no ``break``: the modules after level ``last`` are skipped)."""
        if not torch.jit.is_scripting():
            check_image_input(x, self.in_chans, self.min_input_size, self.name, self.features.conv0.weight.dtype)
        use_checkpoint = self.grad_checkpointing and self.training and torch.is_grad_enabled()
        intermediates: list[torch.Tensor] = []
        done = False
        for name, module in self.features.named_children():
            if hasattr(module, "denselayer1"):  # a DenseBlock (TorchScript: hasattr, first, outside other tests)
                if not done:
                    x = module(x, use_checkpoint)
            elif not done:
                x = module(x)
            if not done:
                if name in self._taps:
                    level = self._taps.index(name)
                    if level in take:
                        intermediates.append(x)
                    done = level == last
        return x, intermediates

    def prune_intermediate_layers(
        self, indices: Indices = 1, prune_norm: bool = False, prune_head: bool = True
    ) -> list[int]:
        """timm's: cut ``features`` after the deepest level of ``indices``; with ``prune_head``,
        or when the features end earlier, drop the head (no pooling, no classifier). Returns
        the levels asked for, as absolute indices."""
        take, deepest = feature_take_indices(len(self.feature_info), indices)
        names = list(self.features._modules)
        self.features = self.features[: names.index(self._taps[deepest]) + 1]
        if deepest < len(self.feature_info) - 1:
            self.num_features = self.feature_info[deepest]["num_chs"]
        if prune_head or deepest < len(self.feature_info) - 1:
            self.reset_classifier(0, "")
        return take

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """Unpooled feature map of shape (N, num_features, about H / s, W / s), s the total
        stride ``feature_info[-1]["reduction"]`` (the transitions' pooling rounds down)."""
        return self._run(x, [], len(self._taps) - 1)[0]

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        """Global pooling (``global_pool``), then (unless ``pre_logits``) the classifier."""
        x = self.global_pool(x)
        return x if pre_logits else self.classifier(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(x))


_CIFAR_DEFAULTS = dict(stem="cifar", num_classes=10)


@register_model(int8=True, timm_checkpoints=True)
def densenet121(**kwargs: Any) -> DenseNet:
    """DenseNet-121 (Huang et al., 2017): growth 32, blocks (6, 12, 24, 16); torchvision layout."""
    return DenseNet(32, (6, 12, 24, 16), 64, name="densenet121", **kwargs)


@register_model(int8=True, timm_checkpoints=True)
def densenet161(**kwargs: Any) -> DenseNet:
    """DenseNet-161: growth 48, blocks (6, 12, 36, 24), 96 stem channels; torchvision layout."""
    return DenseNet(48, (6, 12, 36, 24), 96, name="densenet161", **kwargs)


@register_model(int8=True, timm_checkpoints=True)
def densenet169(**kwargs: Any) -> DenseNet:
    """DenseNet-169: growth 32, blocks (6, 12, 32, 32); torchvision layout."""
    return DenseNet(32, (6, 12, 32, 32), 64, name="densenet169", **kwargs)


@register_model(int8=True, timm_checkpoints=True)
def densenet201(**kwargs: Any) -> DenseNet:
    """DenseNet-201: growth 32, blocks (6, 12, 48, 32); torchvision layout."""
    return DenseNet(32, (6, 12, 48, 32), 64, name="densenet201", **kwargs)


@register_model(int8=True)
def densenet_bc_100(**kwargs: Any) -> DenseNet:
    """CIFAR DenseNet-BC, depth 100, growth 12 (Huang et al., 2017, table 2): 3 blocks of
    16 bottleneck layers, 0.8M params."""
    return DenseNet(12, (16, 16, 16), 24, name="densenet_bc_100", **{**_CIFAR_DEFAULTS, **kwargs})


@register_model(int8=True)
def densenet_bc_40(**kwargs: Any) -> DenseNet:
    """CIFAR DenseNet-BC, depth 40, growth 12: 3 blocks of 6 bottleneck layers, 0.19M params."""
    return DenseNet(12, (6, 6, 6), 24, name="densenet_bc_40", **{**_CIFAR_DEFAULTS, **kwargs})


@register_model(int8=True)
def sedensenet_bc_100(**kwargs: Any) -> DenseNet:
    """CIFAR DenseNet-BC-100 with a squeeze-excite gate (reduction 16) at the end of each dense block."""
    return DenseNet(12, (16, 16, 16), 24, se_ratio=1 / 16, name="sedensenet_bc_100", **{**_CIFAR_DEFAULTS, **kwargs})
