"""ResNet family from one class: torchvision's ImageNet ResNets (V1.5), ResNeXt and wide
ResNets, timm's SE-ResNets, and He et al.'s small-image (CIFAR) ResNets.

The state-dict layout is torchvision's (conv1, bn1, layer1..layerN, fc; blocks with
conv1/bn1/conv2/bn2[/conv3/bn3], downsample.0/.1 and timm's ``se``), so torchvision and timm
checkpoints load without renaming keys.
"""

from __future__ import annotations

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


def _conv3x3(in_channels: int, out_channels: int, stride: int = 1, groups: int = 1) -> nn.Conv2d:
    """3x3 convolution padded to keep the size, without bias (a BatchNorm follows)."""
    return nn.Conv2d(in_channels, out_channels, 3, stride, padding=1, groups=groups, bias=False)


def _conv1x1(in_channels: int, out_channels: int, stride: int = 1) -> nn.Conv2d:
    """1x1 convolution without bias (a BatchNorm follows): bottleneck and projection shortcut."""
    return nn.Conv2d(in_channels, out_channels, 1, stride, bias=False)


class PadShortcut(nn.Module):
    """Parameter-free shortcut (He et al.'s option A): subsample by the stride and zero-pad the
    new channels, half on each side as in akamaster/pytorch_resnet_cifar10, whose CIFAR
    checkpoints therefore give the same outputs here."""

    def __init__(self, in_channels: int, out_channels: int, stride: int) -> None:
        super().__init__()
        self.stride = stride
        self.pad = ((out_channels - in_channels) // 2, (out_channels - in_channels + 1) // 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x[:, :, :: self.stride, :: self.stride]
        return F.pad(x, (0, 0, 0, 0, *self.pad))


class BasicBlock(nn.Module):
    """Two 3x3 convolutions plus shortcut (ResNet-18/34, CIFAR ResNets)."""

    expansion = 1

    def __init__(
        self,
        inplanes: int,
        planes: int,
        stride: int = 1,
        downsample: nn.Module | None = None,
        groups: int = 1,
        base_width: int = 64,
        se_ratio: float | None = None,
    ) -> None:
        super().__init__()
        if groups != 1 or base_width != 64:
            raise InvalidArgumentError("BasicBlock supports only groups=1 and width_per_group=64")
        self.conv1 = _conv3x3(inplanes, planes, stride)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = _conv3x3(planes, planes)
        self.bn2 = nn.BatchNorm2d(planes)
        self.se = SqueezeExcite(planes, se_ratio) if se_ratio is not None else nn.Identity()
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def zero_init_last(self) -> None:
        """Zero the last BN scale so the block starts as the identity (Goyal et al., 2017)."""
        nn.init.zeros_(self.bn2.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shortcut = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.se(self.bn2(self.conv2(out)))
        return self.relu(out + shortcut)


class Bottleneck(nn.Module):
    """1x1 reduce, 3x3 (grouped for ResNeXt, carrying the stride: V1.5), 1x1 expand by 4."""

    expansion = 4

    def __init__(
        self,
        inplanes: int,
        planes: int,
        stride: int = 1,
        downsample: nn.Module | None = None,
        groups: int = 1,
        base_width: int = 64,
        se_ratio: float | None = None,
    ) -> None:
        super().__init__()
        width = int(planes * (base_width / 64.0)) * groups
        outplanes = planes * self.expansion
        self.conv1 = _conv1x1(inplanes, width)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = _conv3x3(width, width, stride, groups)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = _conv1x1(width, outplanes)
        self.bn3 = nn.BatchNorm2d(outplanes)
        self.se = SqueezeExcite(outplanes, se_ratio) if se_ratio is not None else nn.Identity()
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def zero_init_last(self) -> None:
        """Zero the last BN scale so the block starts as the identity (Goyal et al., 2017)."""
        nn.init.zeros_(self.bn3.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shortcut = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.se(self.bn3(self.conv3(out)))
        return self.relu(out + shortcut)


def _shortcut(inplanes: int, outplanes: int, stride: int, small: bool) -> nn.Module | None:
    """A stage's first-block shortcut where the shape changes: parameter-free (option A) for
    the CIFAR stem, 1x1 conv + BN (projection) otherwise; None where the shape is kept."""
    if stride == 1 and inplanes == outplanes:
        return None
    if small:
        return PadShortcut(inplanes, outplanes, stride)
    return nn.Sequential(_conv1x1(inplanes, outplanes, stride), nn.BatchNorm2d(outplanes))


def _check_resnet_options(
    layers: Sequence[int],
    in_chans: int,
    groups: int,
    width_per_group: int,
    se_ratio: float | None,
    drop_rate: float,
    stem: str,
    stage_channels: Sequence[int],
) -> None:
    """Raise an InvalidArgumentError naming the option unless `ResNet` can be built with these."""
    if stem not in ("imagenet", "cifar"):
        raise InvalidArgumentError(f"stem must be 'imagenet' or 'cifar', got {stem!r}")
    check_int_option("in_chans", in_chans, what=" (the image channels: 1 gray, 3 RGB)")
    if (
        not layers
        or len(layers) != len(stage_channels)
        or any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in (*layers, *stage_channels))
    ):
        raise InvalidArgumentError(
            f"need one positive block count (depth) and one positive width per stage: "
            f"layers={tuple(layers)}, stage_channels={tuple(stage_channels)}"
        )
    check_int_option("groups", groups)
    check_int_option("width_per_group", width_per_group)
    if se_ratio is not None:
        check_float_option("se_ratio", se_ratio, 0.0, 1.0, low_open=True, high_open=False)
    check_rate_option("drop_rate", drop_rate)


class ResNet(FeatureLevels, PooledLinearClassifier, nn.Module):
    """Residual network with one stage per entry of ``layers``; the first stage keeps the
    resolution, every later one halves it.

    ``stem="imagenet"``: 7x7/2 conv + 3x3/2 max-pool, projection shortcuts (1x1 conv + BN).
    ``stem="cifar"``: He et al.'s small-image ResNet, 3x3/1 conv and no pool, parameter-free
    (option A) shortcuts; meant for 28-32 px images with ``stage_channels=(16, 32, 64)``.
    ``groups``/``width_per_group`` give ResNeXt and wide ResNets, ``se_ratio`` adds a
    squeeze-excite gate before each residual add (timm's SE-ResNet). ``global_pool`` is the
    head's pooling (timm's types: avg, max, avgmax, catavgmax).
    Feature levels (``feature_info``): the stem's activation, then each stage's output.
    """

    classifier_attr = "fc"

    first_conv = "conv1"

    def __init__(
        self,
        block: type[BasicBlock | Bottleneck],
        layers: Sequence[int],
        num_classes: int = 1000,
        in_chans: int = 3,
        groups: int = 1,
        width_per_group: int = 64,
        se_ratio: float | None = None,
        drop_rate: float = 0.0,
        zero_init_residual: bool = False,
        stem: Literal["imagenet", "cifar"] = "imagenet",
        stage_channels: Sequence[int] = (64, 128, 256, 512),
        global_pool: str = "avg",
        name: str = "resnet",
    ) -> None:
        super().__init__()
        _check_resnet_options(layers, in_chans, groups, width_per_group, se_ratio, drop_rate, stem, stage_channels)
        small = stem == "cifar"
        self.name = name
        self.in_chans = in_chans
        self.pretrained_cfg = {}  # no annotation in __init__: TorchScript warns on annotated dicts there
        self.grad_checkpointing = False
        # Every convolution and pooling is padded ((k - 1) // 2), so each halving keeps
        # ceil(side / 2) >= 1 and global pooling takes whatever is left: any side >= 1 runs,
        # as with torchvision's adaptive pooling. The total stride is feature_info[-1]["reduction"].
        self.min_input_size = 1

        stem_info = self._build_stem(in_chans, stage_channels[0], small)
        options = dict(groups=groups, base_width=width_per_group, se_ratio=se_ratio)
        stage_info = self._build_stages(block, layers, stage_channels, small, options)
        self.feature_info = FeatureInfo([stem_info, *stage_info])

        self.num_features = stage_info[-1]["num_chs"]
        self.drop = nn.Dropout(drop_rate)
        self.reset_classifier(num_classes, global_pool)
        self._init_weights(zero_init_residual)

    def _build_stem(self, in_chans: int, width: int, small: bool) -> dict[str, Any]:
        """conv1, bn1, relu and maxpool (3x3/1 conv and no pool for the CIFAR stem); returns
        the stem's feature level."""
        if small:
            self.conv1 = _conv3x3(in_chans, width)
        else:
            self.conv1 = nn.Conv2d(in_chans, width, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.Identity() if small else nn.MaxPool2d(3, stride=2, padding=1)
        return dict(num_chs=width, reduction=1 if small else 2, module="relu")

    def _build_stages(
        self,
        block: type[BasicBlock | Bottleneck],
        layers: Sequence[int],
        stage_channels: Sequence[int],
        small: bool,
        options: dict[str, Any],
    ) -> list[dict[str, Any]]:
        """layer1..layerN, the first keeping the resolution and each later one halving it;
        returns their feature levels."""
        inplanes = stage_channels[0]
        feature_info = []
        self.stage_names: list[str] = []
        for i, (planes, depth) in enumerate(zip(stage_channels, layers)):
            stride = 1 if i == 0 else 2
            outplanes = planes * block.expansion
            downsample = _shortcut(inplanes, outplanes, stride, small)
            blocks = [block(inplanes, planes, stride, downsample, **options)]
            blocks += [block(outplanes, planes, **options) for _ in range(depth - 1)]
            self.add_module(f"layer{i + 1}", nn.Sequential(*blocks))
            self.stage_names.append(f"layer{i + 1}")
            reduction = (1 if small else 4) * 2**i
            feature_info.append(dict(num_chs=outplanes, reduction=reduction, module=f"layer{i + 1}"))
            inplanes = outplanes
        return feature_info

    def _init_weights(self, zero_init_residual: bool) -> None:
        """torchvision's: Kaiming-normal convolutions (fan out), BN scale 1 and shift 0, and
        with ``zero_init_residual`` each block's last BN scale 0."""
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
        if zero_init_residual:
            for m in self.modules():
                if isinstance(m, (BasicBlock, Bottleneck)):
                    m.zero_init_last()

    def set_grad_checkpointing(self, enable: bool = True) -> None:
        """Recompute each residual block in the backward pass instead of storing its
        activations (training only). As with timm, BatchNorm running statistics are updated
        once more by the recomputation; gradients are unchanged."""
        self.grad_checkpointing = enable

    def _run(self, x: torch.Tensor, take: list[int], last: int) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Run up to feature level ``last`` (then, as timm, past the stem's max-pool), keeping
        the maps of the levels in ``take``: (the last tensor computed, those maps). Written
        for TorchScript and FX too: the stages are found among the children by name."""
        if not torch.jit.is_scripting():
            check_image_input(x, self.in_chans, self.min_input_size, self.name, self.conv1.weight.dtype)
        x = self.relu(self.bn1(self.conv1(x)))
        intermediates: list[torch.Tensor] = []
        if 0 in take:
            intermediates.append(x)
        x = self.maxpool(x)
        level = 0
        for name, stage in self.named_children():
            if name in self.stage_names:
                level += 1
                if level <= last:
                    if torch.jit.is_scripting():
                        x = stage(x)
                    else:
                        x = self._run_stage(stage, x)
                    if level in take:
                        intermediates.append(x)
        return x, intermediates

    def _run_stage(self, stage: nn.Sequential, x: torch.Tensor) -> torch.Tensor:
        """One stage, each block checkpointed when `set_grad_checkpointing` asks (in training)."""
        if self.grad_checkpointing and self.training and torch.is_grad_enabled() and not is_capturing():
            for block in stage:
                x = checkpoint(block, x, use_reentrant=False)
            return x
        return stage(x)

    def prune_intermediate_layers(
        self, indices: Indices = 1, prune_norm: bool = False, prune_head: bool = True
    ) -> list[int]:
        """timm's: empty the stages after the deepest level of ``indices`` (the stem's pool too
        for level 0); with ``prune_head``, or when the features end earlier, drop the head (no
        pooling, no classifier). Returns the levels asked for, as absolute indices."""
        take, deepest = feature_take_indices(len(self.feature_info), indices)
        for stage in self.stage_names[deepest:]:
            setattr(self, stage, nn.Sequential())
        if deepest == 0:
            self.maxpool = nn.Identity()
        if deepest < len(self.feature_info) - 1:
            self.num_features = self.feature_info[deepest]["num_chs"]
        if prune_head or deepest < len(self.feature_info) - 1:
            self.reset_classifier(0, "")
        return take

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """Unpooled feature map of shape (N, num_features, ceil(H / s), ceil(W / s)), s the total
        stride ``feature_info[-1]["reduction"]``."""
        return self._run(x, [], len(self.stage_names))[0]

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        """Global pooling (``global_pool``), then (unless ``pre_logits``) dropout and the classifier."""
        x = self.global_pool(x)
        return x if pre_logits else self.fc(self.drop(x))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(x))


_CIFAR_DEFAULTS = dict(stem="cifar", stage_channels=(16, 32, 64), num_classes=10)


@register_model(int8=True, timm_checkpoints=True)
def resnet18(**kwargs: Any) -> ResNet:
    """ResNet-18 (He et al., 2016); torchvision layout."""
    return ResNet(BasicBlock, (2, 2, 2, 2), name="resnet18", **kwargs)


@register_model(int8=True, timm_checkpoints=True)
def resnet34(**kwargs: Any) -> ResNet:
    """ResNet-34 (He et al., 2016); torchvision layout."""
    return ResNet(BasicBlock, (3, 4, 6, 3), name="resnet34", **kwargs)


@register_model(int8=True, timm_checkpoints=True)
def resnet50(**kwargs: Any) -> ResNet:
    """ResNet-50 V1.5 (stride on the 3x3 conv); torchvision layout."""
    return ResNet(Bottleneck, (3, 4, 6, 3), name="resnet50", **kwargs)


@register_model(int8=True, timm_checkpoints=True)
def resnet101(**kwargs: Any) -> ResNet:
    """ResNet-101 V1.5; torchvision layout."""
    return ResNet(Bottleneck, (3, 4, 23, 3), name="resnet101", **kwargs)


@register_model(int8=True, timm_checkpoints=True)
def resnet152(**kwargs: Any) -> ResNet:
    """ResNet-152 V1.5; torchvision layout."""
    return ResNet(Bottleneck, (3, 8, 36, 3), name="resnet152", **kwargs)


@register_model(int8=True, timm_checkpoints=True)
def resnext50_32x4d(**kwargs: Any) -> ResNet:
    """ResNeXt-50 (Xie et al., 2017), 32 groups of width 4; torchvision layout."""
    return ResNet(Bottleneck, (3, 4, 6, 3), groups=32, width_per_group=4, name="resnext50_32x4d", **kwargs)


@register_model(int8=True, timm_checkpoints=True)
def wide_resnet50_2(**kwargs: Any) -> ResNet:
    """Wide ResNet-50-2 (Zagoruyko & Komodakis, 2016): bottlenecks twice as wide; torchvision layout."""
    return ResNet(Bottleneck, (3, 4, 6, 3), width_per_group=128, name="wide_resnet50_2", **kwargs)


@register_model(int8=True, timm_checkpoints=True)
def seresnet50(**kwargs: Any) -> ResNet:
    """SE-ResNet-50 (Hu et al., 2018), reduction 16; timm's seresnet50 layout."""
    return ResNet(Bottleneck, (3, 4, 6, 3), se_ratio=1 / 16, name="seresnet50", **kwargs)


@register_model(int8=True, finetune_example="resnet20.fmnist")
def resnet20(**kwargs: Any) -> ResNet:
    """CIFAR ResNet-20 (He et al., 2016, sec. 4.2): 3 stages of 3 basic blocks, 0.27M params."""
    return ResNet(BasicBlock, (3, 3, 3), name="resnet20", **{**_CIFAR_DEFAULTS, **kwargs})


@register_model(int8=True)
def resnet56(**kwargs: Any) -> ResNet:
    """CIFAR ResNet-56 (He et al., 2016, sec. 4.2): 3 stages of 9 basic blocks, 0.85M params."""
    return ResNet(BasicBlock, (9, 9, 9), name="resnet56", **{**_CIFAR_DEFAULTS, **kwargs})


@register_model(int8=True)
def seresnet20(**kwargs: Any) -> ResNet:
    """CIFAR ResNet-20 with squeeze-excite (reduction 16, at least 8 channels as in timm)."""
    return ResNet(BasicBlock, (3, 3, 3), se_ratio=1 / 16, name="seresnet20", **{**_CIFAR_DEFAULTS, **kwargs})
