"""Training deep belief nets: RBMs by contrastive divergence with the defaults of Hinton's
"A Practical Guide to Training Restricted Boltzmann Machines" (2010), greedy layer-wise
pretraining, supervised fine-tuning with backprop (through `zoo.training.loop.trainer.Trainer`, like
every other zoo model), and two scikit-learn estimators: `DBNClassifier` around all three, and
`BernoulliRBM`, scikit-learn's RBM estimator (its training rule and random numbers) on a zoo `RBM`.

A recipe pretrains and fine-tunes a zoo model in a few lines::

    model = zoo.load("dbn", pretrained=False, sizes=(784, 500, 500, 2000), num_classes=10)
    pretrain(model, images, RBMConfig(epochs=10), valid=held_out_images)
    finetune_dbn(model, images, labels, BackpropConfig(epochs=30), valid=(held_out_images, held_out_labels))

Data are float tensors (or arrays) of shape (N, sizes[0]), or image batches that flatten to it,
with values in [0, 1] for binary visible units and standardised for Gaussian ones; they are
moved to the model's device and dtype whole. Pass a ``generator`` on that device for
reproducible sampling and shuffling.

The parts live beside this module, which gathers them: `zoo.training.belief_nets.contrastive` (RBMs and
greedy pretraining), `zoo.training.belief_nets.backprop` (supervised fine-tuning) and
`zoo.training.belief_nets.estimators` (the scikit-learn estimators).
"""

from __future__ import annotations

from zoo.training.belief_nets.backprop import BackpropConfig, BackpropEpochStats, finetune_dbn
from zoo.training.belief_nets.contrastive import RBMConfig, RBMEpochStats, init_visible_bias, pretrain, train_rbm
from zoo.training.belief_nets.estimators import BernoulliRBM, DBNClassifier

__all__ = [
    "BernoulliRBM",
    "DBNClassifier",
    "BackpropConfig",
    "BackpropEpochStats",
    "RBMConfig",
    "RBMEpochStats",
    "finetune_dbn",
    "init_visible_bias",
    "pretrain",
    "train_rbm",
]
