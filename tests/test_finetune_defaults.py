"""What ``zoo finetune`` does when a user gives no flag (`zoo.training.finetune.defaults`,
`zoo.training.finetune.stages`): a budget of steps and a batch size from the data's size, crop
augmentation for small images, a fresh head unless the data's classes are the weights' own (a
matching count is not enough), a head phase before the whole network trains, each said in the
run's first lines and on the card, each overridden by its flag; and ``--help`` shows the defaults."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import zoo
from zoo.cli import main
from zoo.store.weight_entries import load_categories
from zoo.training.data.images.augment import Augment
from zoo.training.data.kinds import open_data
from zoo.training.finetune import defaults
from zoo.training.finetune.stages import head_config, match_head, train_head
from zoo.training.loop.train_config import TrainConfig

pytestmark = pytest.mark.usefixtures("one_thread")
QUIET = ["--no-progress", "--no-post-training", "--no-tensorboard"]


def image_folder(root: Path, names: list[str], per_class: int = 3, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    for i, name in enumerate(names):
        (root / name).mkdir(parents=True)
        for j in range(per_class):
            pixels = rng.integers(0, 60, (28, 28)) + 19 * i  # classes told apart by brightness
            Image.fromarray(pixels.astype(np.uint8)).save(root / name / f"{j}.png")
    return root


def test_the_budget_and_batch_follow_the_data_size(tmp_path) -> None:
    source = open_data(image_folder(tmp_path / "d", ["a", "b"]))
    low, high = defaults.TRANSFER_EPOCHS
    assert defaults.transfer_batch_size(100) == 16 and defaults.transfer_batch_size(1_000) == 32
    assert defaults.transfer_batch_size(60_000) == TrainConfig.batch_size
    assert defaults.data_defaults(source, 100, 16)["epochs"] == high  # 7 steps an epoch: the most epochs
    assert defaults.data_defaults(source, 60_000, 64)["epochs"] == low  # 938 steps an epoch: the fewest
    assert defaults.data_defaults(source, 1_000, 32)["epochs"] == 13  # 32 steps an epoch: 400 steps in 13
    config, note = defaults.with_data_defaults(TrainConfig(), source, list(range(1_000)), given=set())
    assert (config.batch_size, config.epochs, config.warmup_epochs) == (32, 13, 0.65)
    assert note.startswith("defaults for images (1000 training samples; a flag overrides each): batch size 32")
    config, note = defaults.with_data_defaults(TrainConfig(epochs=4), source, list(range(100)), given={"epochs"})
    assert config.epochs == 4 and config.batch_size == 16 and "epochs 4" not in note
    everything = {f.name for f in dataclasses.fields(TrainConfig)}
    assert defaults.with_data_defaults(TrainConfig(), source, list(range(100)), everything) == (TrainConfig(), None)


def test_small_images_get_crop_augmentation_and_large_ones_none() -> None:
    assert defaults.default_augment({"resize": 28, "crop": 28}, (28, 28)) == Augment(crop_padding=2)
    assert defaults.default_augment({}, (8, 10)) == Augment(crop_padding=1)
    assert defaults.default_augment({"resize": 256, "crop": 224}, (28, 28)) == Augment()  # as the model sees them
    assert str(Augment()) == "none" and str(Augment(hflip=True)) == "Augment(hflip=True)"


def test_a_matching_count_of_other_classes_gets_a_fresh_head() -> None:
    torch.manual_seed(0)
    model = zoo.load("resnet20.fmnist")
    before = model.fc.weight.clone()
    fresh, line = match_head(model, [str(d) for d in range(10)])
    assert fresh and line.startswith("head: fresh, 10 outputs") and "'T-shirt/top'" in line
    assert not torch.equal(model.fc.weight, before) and model.pretrained_cfg.get("categories") is None


def test_the_weights_own_classes_in_another_order_keep_the_head_reordered() -> None:
    model = zoo.load("resnet20.fmnist").eval()
    x = torch.randn(2, 1, 28, 28)
    with torch.no_grad():
        logits = model(x)
    names = load_categories("fashion-mnist")
    folders = sorted(n.replace("/", "_").lower() for n in names)  # as an image folder's class folders sort
    fresh, line = match_head(model, folders)
    assert not fresh and "kept" in line and "data's order" in line
    order = [[n.replace("/", "_").lower() for n in names].index(f) for f in folders]
    with torch.no_grad():
        # the same values, the rows of the head's matrix moved: a GEMM may sum a moved row in another order
        torch.testing.assert_close(model(x), logits[:, order], rtol=1e-5, atol=1e-5)


def test_the_head_phase_trains_the_head_alone_and_leaves_all_trainable(tmp_path) -> None:
    source = open_data(image_folder(tmp_path / "d", ["a", "b"], per_class=8))
    model = zoo.load("resnet20.fmnist", num_classes=2)
    body = {k: v.clone() for k, v in model.state_dict().items() if not k.startswith("fc.")}
    head = model.fc.weight.clone()
    from torchvision.transforms import v2

    train_set, _ = source.split(0.0, 0, v2.Compose([v2.ToImage(), v2.ToDtype(torch.float32, scale=True)]), None)
    config = TrainConfig(batch_size=4, precision="fp32", num_workers=0, progress=False)
    line = train_head(model, train_set, config, 1.5)
    assert line is not None and "6 steps (1.5 epochs) at lr 0.01" in line
    after = model.state_dict()
    assert all(torch.equal(after[k], v) for k, v in body.items())  # BatchNorm statistics too: frozen in eval
    assert not torch.equal(model.fc.weight, head) and all(p.requires_grad for p in model.parameters())
    assert train_head(model, train_set, config, 0) is None
    phase = head_config(TrainConfig(lr="auto", precision="bf16", out_dir=str(tmp_path)), 2, 5, 10.0)
    assert phase.max_steps == 10 and phase.lr == pytest.approx(1e-2) and phase.precision == "bf16"
    assert phase.out_dir is None and not phase.tensorboard and phase.monitor is None


def test_zoo_finetune_says_its_defaults_head_and_recipe_first_and_on_the_card(tmp_path, capsys) -> None:
    data = image_folder(tmp_path / "d", ["zero", "one"], per_class=6)
    out = tmp_path / "run"
    argv = ["finetune", "resnet20.fmnist", "--data", str(data), "--val-fraction", "0.25", "--out", str(out)]
    assert main([*argv, "--max-steps", "4", "--no-post-training", "--no-tensorboard"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].startswith("defaults for images (") and "batch size 16" in lines[1]
    assert lines[2].startswith("head: fresh, 2 outputs") and lines[3].startswith("head phase:")
    card = (out / "README.md").read_text()
    for text in ("defaults for images", "head: fresh", "head phase:", "augmentation: Augment(crop_padding=2)"):
        assert text in card, text
    mine = ["--max-steps", "2", "--batch-size", "4", "--head-epochs", "0", "--no-augment", "--overwrite", *QUIET]
    assert main([*argv, *mine]) == 0
    card = (out / "README.md").read_text()
    assert "head phase" not in card and "augmentation: none" in card and "batch size 4" not in card
    assert main([*argv, "--no-augment", "--hflip", *QUIET]) == 2
    assert "--no-augment turns augmentation off" in capsys.readouterr().err


def test_the_help_shows_each_default(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["finetune", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--lr LR a number, or auto" in text and "(default: 0.001)" in text
    assert "--epochs EPOCHS default: from the data's size, about 400 optimizer steps" in text
    assert (
        "--weight-decay WEIGHT_DECAY (default: 0.05)" in text
        and "--label-smoothing LABEL_SMOOTHING (default: 0)" in text
    )
    assert "--head-epochs HEAD_EPOCHS epochs a fresh class head trains alone first" in text


def test_no_augment_is_taken_by_any_data_and_an_augmentation_only_by_images(tmp_path, capsys) -> None:
    g = torch.Generator().manual_seed(0)
    data = tmp_path / "data.pt"
    torch.save({"x": torch.rand(16, 6, generator=g), "y": torch.arange(16) % 2, "classes": ["a", "b"]}, data)
    argv = ["finetune", "dbn", "--data", str(data), "--model-kwargs", json.dumps({"sizes": [6, 4]})]
    argv += ["--max-steps", "1", "--batch-size", "4", *QUIET]
    with pytest.warns(UserWarning):
        assert main([*argv, "--out", str(tmp_path / "run"), "--no-augment"]) == 0
        assert main([*argv, "--out", str(tmp_path / "other"), "--hflip"]) == 2
    assert "augmentation applies to images, and the data is tensors" in capsys.readouterr().err  # vectors
