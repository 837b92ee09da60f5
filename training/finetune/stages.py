"""Fine-tuning modes: which parameters of a model train. A model's stages are its depths
(`parameter_levels`); `apply_mode` freezes what a mode leaves out (``linear-probe``: all but
the classifier; ``partial``: all but the last stages and the head; ``full``: nothing), and
`layer_decay_scale` gives deeper stages smaller learning rates."""

from __future__ import annotations

from collections.abc import Callable

import torch.nn as nn

from zoo.errors import InvalidArgumentError

MODES = ("linear-probe", "partial", "full")


def parameter_levels(model: nn.Module) -> tuple[dict[str, int], int]:
    """Each parameter's depth: stage 0 (the input side) to L-1, or L for the head, and L.

    The stages are the ``feature_info`` levels of vision models (each ends at its module), or
    else item i of every top-level ModuleList (transformer blocks, graph layers with their
    norms, RBMs). A parameter inside a stage's module belongs to it; the classifier to the
    head; the input side (the ``first_conv`` module, embeddings, parameters of the model
    itself such as position embeddings) to stage 0; anything else to the first stage that ends
    after it in module order (a stem, a transition), or to the head when none does (final norm,
    readout)."""
    info = getattr(model, "feature_info", None)
    if info:
        stages = [[level["module"]] for level in info]
    else:
        lists = [name for name, child in model.named_children() if isinstance(child, nn.ModuleList) and len(child)]
        if not lists:
            raise InvalidArgumentError(
                f"{type(model).__name__} has no stages (feature_info or a list of blocks); "
                "use mode 'full' or 'linear-probe', without layer decay"
            )
        depth = max(len(getattr(model, name)) for name in lists)
        stages = [[f"{name}.{i}" for name in lists if i < len(getattr(model, name))] for i in range(depth)]
    order = {name: i for i, (name, _) in enumerate(model.named_modules())}
    missing = [m for stage in stages for m in stage if m not in order]
    if missing:
        raise InvalidArgumentError(f"{type(model).__name__}: feature_info names modules that do not exist: {missing}")

    def within(owner: str, module: str) -> bool:
        return owner == module or owner.startswith(module + ".")

    ends = [max(pos for name, pos in order.items() if any(within(name, m) for m in stage)) for stage in stages]
    num_levels = len(stages)
    classifier = {id(p) for p in model.get_classifier().parameters()} if hasattr(model, "get_classifier") else set()
    input_side = {id(p) for p in model.parameters(recurse=False)}
    input_side |= {id(p) for m in model.modules() if isinstance(m, nn.Embedding) for p in m.parameters()}
    first_conv = getattr(model, "first_conv", None)
    if isinstance(first_conv, str) and first_conv in order:
        input_side |= {id(p) for p in model.get_submodule(first_conv).parameters()}

    def level_of(name: str, param: nn.Parameter) -> int:
        if id(param) in classifier:
            return num_levels
        owner = name.rpartition(".")[0]
        for level, stage in enumerate(stages):
            if any(within(owner, m) for m in stage):
                return level
        if id(param) in input_side:
            return 0
        return next((level for level, end in enumerate(ends) if order[owner] <= end), num_levels)

    return {name: level_of(name, param) for name, param in model.named_parameters()}, num_levels


def apply_mode(model: nn.Module, mode: str, stages: int = 1) -> int:
    """Set requires_grad for a fine-tuning mode; returns the number of trainable parameters."""
    if mode not in MODES:
        raise InvalidArgumentError(f"mode must be one of {', '.join(MODES)}; got {mode!r}")
    if mode == "full":
        model.requires_grad_(True)
    elif mode == "linear-probe":
        classifier = model.get_classifier()
        if not any(True for _ in classifier.parameters()):
            raise InvalidArgumentError("linear-probe trains the classifier, and this model has none (num_classes=0)")
        model.requires_grad_(False)
        classifier.requires_grad_(True)
    else:
        levels, num_levels = parameter_levels(model)
        if not 1 <= stages <= num_levels:
            raise InvalidArgumentError(
                f"partial mode unfreezes 1..{num_levels} stages of {type(model).__name__}; got stages={stages}"
            )
        for name, param in model.named_parameters():
            param.requires_grad_(levels[name] >= num_levels - stages)
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def layer_decay_scale(model: nn.Module, decay: float) -> Callable[[str], float]:
    """Layer-wise learning-rate decay (Clark et al., 2020; BEiT): the head keeps the base lr,
    the stage below it ``decay`` times it, the next ``decay**2``, down to the stem."""
    if not 0.0 < decay <= 1.0:
        raise InvalidArgumentError(f"layer_decay must be in (0, 1], e.g. 0.75; got {decay}")
    levels, num_levels = parameter_levels(model)
    return lambda name: decay ** (num_levels - levels[name])
