"""zoo models inside PyTorch Lightning (a peer users train in): a LightningModule around a
zoo model trains its BatchNorm once the model is put in train mode, as docs/lightning.md
says, and Lightning keeps a model loaded in eval mode frozen (why the page says it)."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import zoo

L = pytest.importorskip("lightning")

pytestmark = pytest.mark.usefixtures("one_thread")


class Classifier(L.LightningModule):
    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def training_step(self, batch, batch_idx):
        images, labels = batch
        return F.cross_entropy(self.model(images), labels)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


def fit(model: nn.Module) -> list[str]:
    """Two Lightning steps on random images; returns Lightning's warnings."""
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(32, 1, 28, 28), torch.randint(0, 3, (32,)))
    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        max_steps=2,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(Classifier(model), DataLoader(data, batch_size=16))
    return [str(w.message) for w in caught]


def first_batchnorm(model: nn.Module) -> nn.BatchNorm2d:
    return next(m for m in model.modules() if isinstance(m, nn.BatchNorm2d))


def test_a_zoo_model_in_train_mode_trains_its_batchnorm_in_lightning() -> None:
    model = zoo.load("resnet20.fmnist", num_classes=3).train()
    norm = first_batchnorm(model)
    mean, weight = norm.running_mean.clone(), norm.weight.detach().clone()
    fit(model)
    assert not torch.equal(norm.running_mean, mean)  # batch statistics used and tracked
    assert not torch.equal(norm.weight.detach(), weight)
    assert model.training


def test_lightning_keeps_a_zoo_model_loaded_in_eval_mode_frozen() -> None:
    model = zoo.load("resnet20.fmnist", num_classes=3)
    assert not model.training  # zoo.load's contract (docs/loading.md)
    norm = first_batchnorm(model)
    mean = norm.running_mean.clone()
    caught = fit(model)
    assert torch.equal(norm.running_mean, mean)
    assert any("in eval mode at the start of training" in message for message in caught)
