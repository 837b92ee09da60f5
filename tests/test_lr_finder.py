"""``lr="auto"`` (`zoo.training.loop.lr_finder`): the sweep leaves weights, optimizer, BatchNorm
statistics, generators and data position as they were (a run with auto is the run with the value
it found), the suggestion is fastai's valley, ``zoo finetune --lr auto`` writes the curve and the
card's line, and a bad ``--lr`` is still one line naming it."""

from __future__ import annotations

import copy
import json
import math

import pytest
import torch
from test_finetune_defaults import image_folder
from torch.utils.data import TensorDataset

import zoo
from zoo.cli import main
from zoo.errors import InvalidArgumentError
from zoo.training.loop import lr_finder
from zoo.training.loop.epochs import plan_epochs
from zoo.training.loop.records.checkpoint import rng_state
from zoo.training.loop.trainer import TrainConfig, Trainer

QUIET = dict(progress=False, tensorboard=False, plot=False, precision="fp32", num_workers=0)

pytestmark = pytest.mark.usefixtures("one_thread")


def image_data(n: int = 48) -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    return TensorDataset(torch.randn(n, 1, 8, 8, generator=g), torch.randint(0, 3, (n,), generator=g))


def trainer(**config) -> Trainer:
    """A ResNet-20 (BatchNorm throughout) on AdamW, with an EMA: every kind of state there is."""
    torch.manual_seed(0)
    model = zoo.load("resnet20", pretrained=False, in_chans=1, num_classes=3)
    return Trainer(model, TrainConfig(batch_size=8, ema_decay=0.9, **{**QUIET, **config}))


def same(a, b) -> bool:
    """Bit-for-bit equality of nested state (tensors, dicts, lists, numbers)."""
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


def test_the_sweep_puts_weights_optimizer_and_batchnorm_back_bit_for_bit() -> None:
    run = trainer(epochs=3)
    data = image_data()
    epochs = plan_epochs(data, run.config, 1, 0, run._loader)
    run.train_mode()
    run.train_step([next(iter(epochs.loader))])  # the optimizer has state (AdamW's moments, a step) to keep
    before = {
        "model": copy.deepcopy(run.model.state_dict()),
        "optimizer": copy.deepcopy(run.optimizer.state_dict()),
        "ema": copy.deepcopy(run.ema.state_dict()),
        "rng": rng_state(),
        "data": (epochs.sampler.epoch, epochs.sampler.skip, epochs.generator.get_state()),
        "step": run.state.global_step,
    }
    assert any("running_mean" in key for key in before["model"])
    moved = []
    with lr_finder.kept(run, epochs):
        report = lr_finder.sweep(run, epochs, 20)
        moved = [k for k, v in run.model.state_dict().items() if not torch.equal(v, before["model"][k])]
    assert len(report.lrs) >= 10 and any("running_mean" in key for key in moved)  # the sweep trained
    after = {
        "model": run.model.state_dict(),
        "optimizer": run.optimizer.state_dict(),
        "ema": run.ema.state_dict(),
        "rng": rng_state(),
        "data": (epochs.sampler.epoch, epochs.sampler.skip, epochs.generator.get_state()),
        "step": run.state.global_step,
    }
    for part in before:
        assert same(before[part], after[part]), part


def test_a_run_with_lr_auto_is_the_run_with_the_value_it_found() -> None:
    """Same weights at the end, bit for bit: the sweep left nothing behind (data order, dropout
    and augmentation generators, BatchNorm, optimizer) but the learning rate."""
    auto = trainer(epochs=2, lr="auto")
    auto.fit(image_data())
    found = auto.lr_report.lr
    report = auto.lr_report
    assert report.index is not None and (found == report.lrs[report.index] or report.kept_default is not None)
    given = trainer(epochs=2, lr=found)
    given.fit(image_data())
    assert same(auto.model.state_dict(), given.model.state_dict())
    assert [row["train_loss"] for row in auto.state.history] == [row["train_loss"] for row in given.state.history]


def test_the_suggestion_is_fastais_valley_on_a_synthetic_curve() -> None:
    planned = 30  # fastai skips the first planned // 10 = 3 points and the last 5
    valley = [3.0, 3.0, 2.9, 2.7, 2.4, 2.0, 1.5, 1.1, 0.9, 0.8, 0.85, 1.5, 3.0, 2.5, 4.0, 6.0, 9.0]
    losses = [5.0, 1.0, 7.0, *valley, *[20.0] * 5, 50.0, 80.0, 90.0, 95.0, 99.0][:30]
    # the longest decreasing subsequence of the kept points is 3.0, 2.9, ..., 0.8 (9 points, ending
    # at kept index 9); fastai's start is 9 - 9 = 0, and the point 0 + int(9 / 3) + int(3 / 2) = 4
    assert lr_finder.valley(valley) == 4
    assert lr_finder.suggest(losses, planned) == 3 + 4
    cut = losses[:3] + valley[:6] + [math.nan] + valley[7:] + losses[20:]
    assert lr_finder.suggest(cut, planned) == 3 + lr_finder.valley(valley[:6])  # cut at the first NaN
    assert lr_finder.suggest(losses[:8], planned) is None  # 3 skipped, 5 left out: none to weigh


def test_a_flat_curve_or_a_valley_on_its_flat_part_keeps_the_default() -> None:
    """The guards of the pick (`lr_finder.guarded`): a curve that hardly falls says nothing,
    and neither does a valley in the noise before the fall."""
    planned = 100  # 10 skipped at the start, 5 at the end; 8 decades in 99 steps: ~12 points a decade
    flat = [2.30 + 0.01 * math.sin(i) for i in range(planned)]
    index, why = lr_finder.guarded(flat, planned, lr_finder.suggest(flat, planned))
    assert index is None and "a flat curve" in why and "default stays" in why
    falling = [2.3] * 40 + [2.3 - 0.05 * i for i in range(40)] + [0.3 + 0.5 * i for i in range(20)]
    good = lr_finder.suggest(falling, planned)
    assert 40 <= good < 80 and lr_finder.guarded(falling, planned, good) == (good, "")
    # a long, barely falling stretch of noise, then the real fall: fastai's valley sits in the stretch
    noisy = [2.3 - 1e-4 * i for i in range(70)] + [2.29 - 0.1 * i for i in range(20)] + [1.0 + i for i in range(10)]
    early = lr_finder.suggest(noisy, planned)
    assert early < 70 and noisy[0] - noisy[early] < 0.01
    index, why = lr_finder.guarded(noisy, planned, early)
    assert index is None and "flat, noisy part" in why and "default stays" in why


@pytest.mark.parametrize(("picked", "used"), [(4e-4, 1e-3), (2.9e-3, 1e-3), (3.1e-3, 3.1e-3), (1e-5, 1e-5)])
def test_a_pick_near_the_default_keeps_the_default(picked, used) -> None:
    report = lr_finder.LRFinderReport(1e-3, lrs=[picked], losses=[1.0], index=0, planned=50)
    lr_finder.take(report, picked)
    assert report.lr == used and (report.kept_default == picked) is (used == 1e-3)
    assert str(report).startswith(f"{used:.3g} (") and (("within 3x" in str(report)) is (used == 1e-3))


def test_the_smoothing_is_a_debiased_running_average() -> None:
    average, values = 0.0, []
    for count in range(1, 6):
        average, value = lr_finder.smoothed(2.0, average, count, 0.9)
        values.append(value)
    assert values == pytest.approx([2.0] * 5)  # debiased: a constant loss stays itself from the first step
    steps = lr_finder.sweep_lrs(20)
    assert steps[0] == pytest.approx(1e-7) and steps[-1] == pytest.approx(10.0)
    assert [lr_finder.sweep_steps(n) for n in (10, 400, 2000)] == [50, 80, 100]


def test_a_sweep_that_diverges_stops_and_still_suggests() -> None:
    run = trainer(epochs=50, optimizer="sgd", momentum=0.0)
    data = image_data(24)
    epochs = plan_epochs(data, run.config, 1, 0, run._loader)
    with lr_finder.kept(run, epochs):
        report = lr_finder.sweep(run, epochs, 100)
    assert len(report.lrs) < 100 and "diverged" in report.note
    assert report.index is None or report.lr == report.lrs[report.index] or report.kept_default is not None


def test_zoo_finetune_lr_auto_writes_the_curve_and_the_card_line(tmp_path, capsys) -> None:
    out = tmp_path / "run"
    argv = ["finetune", "resnet20.fmnist", "--data", str(image_folder(tmp_path / "pngs", ["a", "b"], per_class=10)),
            "--out", str(out), "--epochs", "1", "--batch-size", "4", "--lr", "auto", "--precision", "fp32",
            "--num-workers", "0", "--no-post-training", "--no-tensorboard"]  # fmt: skip
    assert main(argv) == 0
    printed = capsys.readouterr().out
    line = next(line for line in printed.splitlines() if line.startswith("lr auto: "))
    assert "fastai's valley" in line and "lr_finder.png" in line
    assert (out / "lr_finder.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    card = (out / "README.md").read_text()
    assert f"- {line}" in card
    assert "lr_finder.png" in json.loads((out / "run_files.json").read_text())["files"]
    assert "lr auto: " in (out / "train.log").read_text()


@pytest.mark.parametrize("value", ["abc", "-1"])
def test_a_bad_lr_is_one_line_naming_lr(value, tmp_path, capsys) -> None:
    argv = ["finetune", "resnet20", "--data", str(tmp_path), "--out", str(tmp_path / "o"), "--lr", value]
    with pytest.raises(SystemExit) as exit:
        main(argv)
    err = capsys.readouterr().err
    assert exit.value.code == 2 and len(err.strip().splitlines()) == 1
    assert "--lr: must be" in err and "or auto" in err and "Traceback" not in err
    with pytest.raises(InvalidArgumentError, match=r"TrainConfig\.lr \(--lr\) must be .* or auto"):
        zoo.finetune("resnet20", tmp_path, tmp_path / "p", lr=value if value == "abc" else -1.0)


def test_fsdp_is_refused_in_one_line_naming_lr() -> None:
    run = trainer(lr="auto")
    run.fsdp = True
    epochs = plan_epochs(image_data(), run.config, 1, 0, run._loader)
    with pytest.raises(InvalidArgumentError, match=r"TrainConfig\.lr \(--lr\) auto does not run under FSDP"):
        lr_finder.find_lr(run, epochs)
