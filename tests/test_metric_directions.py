"""One table says which way each metric is better (`zoo.training.loop.steps.higher_is_better`),
read by the best epoch, early stopping, the plateau schedule and zoo tune's objective: issue 62's
``--monitor val_mae`` that kept the worst epoch and ``zoo tune --metric val_f1_micro`` that
minimised F1."""

from __future__ import annotations

import pytest
import torch

import zoo
from zoo.errors import InvalidArgumentError
from zoo.training.loop.optim import make_scheduler
from zoo.training.loop.steps import higher_is_better, improves, monitor_name
from zoo.training.loop.trainer import TrainConfig, Trainer

QUIET = dict(progress=False, tensorboard=False, plot=False, precision="fp32", num_workers=0)


@pytest.mark.parametrize(
    ("metric", "higher"),
    [("val_acc", True), ("val_top5", True), ("val_r2", True), ("val_map", True), ("val_f1_micro", True),
     ("val_f1_macro", True), ("val_loss", False), ("train_loss", False), ("val_mae", False), ("val_rmse", False),
     ("val_aux_loss", False)],
)  # fmt: skip
def test_each_metric_has_one_direction(metric, higher) -> None:
    assert higher_is_better(metric) is higher


def test_an_unknown_metric_is_refused_before_a_run(tmp_path) -> None:
    with pytest.raises(InvalidArgumentError, match=r"metric 'val_vibes': zoo does not know whether a higher value"):
        monitor_name("val_vibes", None, True)  # type: ignore[arg-type]


@pytest.mark.parametrize(("monitor", "values", "best"), [("val_mae", [8.02, 3.05, 2.63, 2.73], 3),
                                                        ("val_f1_micro", [0.2, 0.7, 0.5], 2)])  # fmt: skip
def test_the_best_epoch_follows_the_metrics_direction(monitor, values, best) -> None:
    model = zoo.load("resnet20", pretrained=False, in_chans=1, num_classes=3)
    trainer = Trainer(model, TrainConfig(monitor=monitor, early_stopping_patience=5, **QUIET))
    trainer.monitor = monitor
    for value in values:
        row = {"epoch": trainer.state.epoch + 1, monitor: value}
        trainer._judge_epoch(row)
        trainer.state.history.append(row)
        trainer.state.epoch += 1
    expected = min(values) if "mae" in monitor else max(values)
    assert trainer.state.best_epoch == best and trainer.state.best_metric == pytest.approx(expected)
    plateau = make_scheduler(trainer.optimizer, TrainConfig(scheduler="plateau"), 1, 10, monitor)
    assert plateau.mode == ("min" if "mae" in monitor else "max")
    assert isinstance(plateau, torch.optim.lr_scheduler.ReduceLROnPlateau)


@pytest.mark.parametrize(
    ("monitor", "rows", "best"),
    [("val_acc", [(0.9, 0.5), (1.0, 0.3), (1.0, 0.1), (1.0, 0.2)], 3),  # a tie goes to the lower val_loss
     ("val_acc", [(1.0, 0.3), (1.0, 0.3)], 1),  # a full tie keeps the first
     ("val_loss", [(0.4, 0.4), (0.4, 0.4)], 1),
     ("val_mae", [(2.0, 0.5), (2.0, 0.2), (3.0, 0.0)], 2)],
)  # fmt: skip
def test_a_tie_on_the_monitor_goes_to_the_lower_validation_loss(monitor, rows, best) -> None:
    best_row = None
    for epoch, (value, loss) in enumerate(rows, start=1):
        row = {"epoch": epoch, monitor: value, "val_loss": loss}
        if improves(monitor, row, best_row):
            best_row = row
    assert best_row is not None and best_row["epoch"] == best
    assert not improves(monitor, {monitor: 0.5}, {monitor: 0.5})  # no val_loss: no tie-break
