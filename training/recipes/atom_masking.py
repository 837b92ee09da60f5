"""Atom masking beside the descriptor regression while a molecule backbone pretrains: Hu et al.
(2020, "Strategies for Pre-training Graph Neural Networks") found that a graph-level objective
alone can transfer negatively, and that adding a node-level one (their attribute masking) makes
the pretrained body help on more sets. In training, each atom is hidden with probability
``share`` (all its features zeroed, as their mask token replaces an atom's: with the degree,
hydrogens and hybridization in view the element would be all but given) and a linear node head
predicts its element from the body's node embeddings of that masked copy; the cross-entropy is
the model's auxiliary loss, which the training step adds to its own (`forward_with_aux`). The
graph outputs, which the descriptors are regressed on, come from a second pass over the whole
molecules, and the masked pass leaves the BatchNorm running statistics to that one (the first
form, one masked pass for both, and the measurements: the graph model's page). In evaluation
nothing is hidden and the wrapped model's output is returned as it is."""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from zoo.errors import InvalidArgumentError
from zoo.loading.smiles import element_channels


@contextlib.contextmanager
def _kept_norm_statistics(model: nn.Module) -> Iterator[None]:
    """``model``'s BatchNorm running statistics as they were before, once the block ends: a pass
    over masked molecules normalises by its own batch, as training does, and leaves what the model
    normalises whole ones by in evaluation to the whole molecules. The pass updates copies, which
    are swapped out after: autograd may hold the buffers it read, so they are not written over."""
    norms = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.track_running_stats]
    saved = [(m.running_mean, m.running_var, m.num_batches_tracked) for m in norms]
    for norm in norms:
        norm.running_mean, norm.running_var = norm.running_mean.clone(), norm.running_var.clone()
        norm.num_batches_tracked = norm.num_batches_tracked.clone()
    try:
        yield
    finally:
        for norm, (mean, var, count) in zip(norms, saved):
            norm.running_mean, norm.running_var, norm.num_batches_tracked = mean, var, count


class MaskedAtomsOutput(NamedTuple):
    """What `forward_with_aux` reads: the graph outputs, the masked atoms' cross-entropy (None in
    evaluation) and no expert fractions (an empty tensor: no experts)."""

    logits: Tensor
    aux_loss: Tensor | None
    expert_fractions: Tensor


class AtomMasking(nn.Module):
    """``model`` (a GIN: ``forward_node_features``, ``forward_readout``, ``forward_head``) trained
    with atom masking: ``share`` of the atoms hidden per step (at least one per batch) and their
    elements (the one-hot block `element_channels` that leads the features) predicted by
    ``node_head``. Only ``model`` is kept after pretraining. Not with gradient checkpointing: its
    recompute of the masked pass would run outside the statistics' swap."""

    def __init__(self, model: nn.Module, share: float) -> None:
        super().__init__()
        if not 0.0 < share < 1.0:
            raise InvalidArgumentError(f"share (--mask-atoms) must be in (0, 1), got {share}")
        self.model, self.share, self.elements = model, share, element_channels()
        size = model.size_kwargs
        self.node_head = nn.Linear(size["hidden_channels"] * size["num_layers"], self.elements)

    def forward(self, data: object, return_aux: bool = False) -> Tensor | MaskedAtomsOutput:
        if not self.training:
            output = self.model(data)
            return MaskedAtomsOutput(output, None, output.new_zeros(0)) if return_aux else output
        if getattr(self.model, "grad_checkpointing", False):
            raise InvalidArgumentError("atom masking does not run with gradient checkpointing; turn it off")
        x = data.x
        hidden = torch.rand(x.shape[0], device=x.device) < self.share
        if not bool(hidden.any()):  # a batch with no atom hidden would have no node loss
            hidden[torch.randint(x.shape[0], (1,), device=x.device)] = True
        elements = x[hidden, : self.elements].argmax(-1)
        masked = copy.copy(data)  # the batch's other tensors shared, not copied
        masked.x = x.masked_fill(hidden[:, None], 0.0)
        with _kept_norm_statistics(self.model):  # the BatchNorm statistics stay the whole molecules'
            h = self.model.forward_node_features(masked)
        aux_loss = F.cross_entropy(self.node_head(h[hidden]), elements)
        output = self.model(data)  # the descriptors from the whole molecules, as without masking
        return MaskedAtomsOutput(output, aux_loss, output.new_zeros(0)) if return_aux else output
