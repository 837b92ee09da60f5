"""Fine-tuning: data sources (image folders, text, tensors, PyG), the transfer modes on every
vision family (frozen weights bit-identical), `zoo finetune` end to end, the transfer script."""

from __future__ import annotations

import dataclasses
import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn as nn
from PIL import Image

import zoo
from zoo import cli
from zoo.errors import CheckpointError, DataError, InvalidArgumentError
from zoo.training.data.images.augment import Augment, image_transforms
from zoo.training.data.kinds import open_data
from zoo.training.finetune import (
    Distillation,
    FinetuneOptions,
    apply_mode,
    distillation_step,
    finetune_with_config,
    layer_decay_scale,
    parameter_levels,
)
from zoo.training.loop.trainer import TrainConfig, Trainer

FAMILIES = ("resnet20", "densenet_bc_40", "mobilenet_v2_cifar")
QUIET = dict(progress=False, tensorboard=False, plot=False)
NO_POST_TRAINING = FinetuneOptions(post_training=False)


pytestmark = pytest.mark.usefixtures("one_thread")


def write_image_folder(root: Path, mode: str = "RGB", per_class: int = 6, size: tuple[int, int] = (12, 10)) -> Path:
    """Three classes of small images, each class brighter in its own channel/region."""
    rng = np.random.default_rng(0)
    for c, name in enumerate(("ant", "bee", "cow")):
        (root / name).mkdir(parents=True)
        for i in range(per_class):
            pixels = rng.integers(0, 100, size=(*size, 3), dtype=np.uint8)
            pixels[..., c] = 250
            Image.fromarray(pixels).convert(mode).save(root / name / f"{i}.png")
    return root


TINY_MOE = dict(hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=2, intermediate_size=32, num_experts=4)
FAMILY_OPTIONS = {
    "resnet20": dict(in_chans=1),
    "densenet_bc_40": dict(in_chans=1),
    "mobilenet_v2_cifar": dict(in_chans=1),
    "moe_vit": dict(in_chans=1, img_size=12, patch_size=4, **TINY_MOE),
    "moe_encoder": TINY_MOE,
    "gin_sum": dict(in_channels=4, hidden_channels=16, num_layers=3),
    "dbn": dict(sizes=(64, 24, 16, 8)),
}


def saved_start(tmp_path: Path, name: str, **options) -> tuple[Path, dict[str, torch.Tensor]]:
    """A model written by zoo.save (a 'pretrained' NAME that needs no download) and its weights."""
    torch.manual_seed(0)
    model = zoo.load(name, pretrained=False, num_classes=3, **(options or FAMILY_OPTIONS[name]))
    directory = zoo.save(model, tmp_path / f"{name}-start")
    return directory, {k: v.clone() for k, v in model.state_dict().items()}


def family_data(name: str, tmp_path: Path):
    """Three-class data of the kind each family reads."""
    if name == "moe_encoder":
        return write_text_file(tmp_path / "texts.csv")
    if name == "gin_sum":
        from torch_geometric.datasets import FakeDataset

        torch.manual_seed(0)
        return FakeDataset(num_graphs=24, avg_num_nodes=6, num_channels=4, num_classes=3, task="graph")
    if name == "dbn":
        g = torch.Generator().manual_seed(0)
        path = tmp_path / "features.npz"
        np.savez(path, x=torch.rand(24, 64, generator=g).numpy(), y=(torch.arange(24) % 3).numpy())
        return path
    return write_tensor_file(tmp_path / "data.pt")


def write_text_file(path: Path) -> Path:
    rows = [("a good one", "pos"), ("so bad", "neg"), ("meh, fine", "mid"), ("great!", "pos")] * 6
    path.write_text("text,label\n" + "".join(f'"{t}",{label}\n' for t, label in rows), encoding="utf-8")
    return path


def write_tensor_file(path: Path, n: int = 24, size: int = 12) -> Path:
    g = torch.Generator().manual_seed(0)
    torch.save(
        {
            "x": torch.randint(0, 256, (n, size, size), dtype=torch.uint8, generator=g),
            "y": torch.arange(n) % 3,
            "classes": ["a", "b", "c"],
        },
        path,
    )
    return path


def test_zoo_finetune_image_folder_saves_a_model_zoo_load_restores(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    data = write_image_folder(tmp_path / "images")
    out = tmp_path / "out"
    argv = [
        "finetune",
        "resnet20",
        "--data",
        str(data),
        "--out",
        str(out),
        "--epochs",
        "2",
        "--batch-size",
        "4",
        "--hflip",
        "--crop-padding",
        "2",
        "--no-progress",
        "--val-fraction",
        "0.25",
        "--compression",
    ]
    with pytest.warns(UserWarning, match="bare architecture: training it from scratch"):
        assert cli.main(argv) == 0
    assert "saved" in capsys.readouterr().out
    for produced in (
        "config.json",
        "model.safetensors",
        "README.md",
        "metrics.csv",
        "metrics.json",
        "curves.png",
        "train.log",
        "eval_report.json",
        "confusion_matrix.png",
        "model.torchscript.pt",
        "model.pt2",
        "model.onnx",
        "post_training.json",
    ):
        assert (out / produced).is_file(), produced
    assert list((out / "tensorboard").iterdir())

    model = zoo.load(out)
    assert model.num_classes == 3 and model.pretrained_cfg["class_names"] == ["ant", "bee", "cow"]
    preprocess = zoo.transforms(model)
    batch = torch.stack([preprocess(Image.open(p).convert("RGB")) for p in sorted((data / "bee").iterdir())[:2]])
    assert batch.shape == (2, 3, 12, 10)
    best = torch.load(out / "checkpoints/best.pt", weights_only=True)["model"]
    for key, value in model.state_dict().items():
        assert torch.equal(value, best[key]), key
    card = (out / "README.md").read_text()
    assert "zoo finetune resnet20 --data" in card and "val_acc" in card and "from scratch" in card
    assert "macro-F1" in card and "magnitude pruning 50%" in card and "torch.export: model.pt2" in card
    metrics = json.loads((out / "metrics.json").read_text())
    assert len(metrics["history"]) == 2 and metrics["monitor"] == "val_acc"


def saved_teacher(tmp_path: Path, num_classes: int = 3, in_chans: int = 3) -> Path:
    """A resnet20 folder that normalises images with its own mean and std."""
    torch.manual_seed(1)
    teacher = zoo.load("resnet20", pretrained=False, num_classes=num_classes, in_chans=in_chans)
    teacher.pretrained_cfg["preprocess"] = {"mean": [0.2, 0.3, 0.4], "std": [0.5, 0.25, 0.125]}
    return zoo.save(teacher, tmp_path / f"teacher-{num_classes}-{in_chans}")


def test_distillation_renormalises_images_for_the_teacher(tmp_path: Path) -> None:
    """The teacher sees (pixels - its mean) / its std whatever the student's normalisation."""
    data = open_data(write_image_folder(tmp_path / "images"))
    student = zoo.load("resnet20", pretrained=False, num_classes=3, in_chans=3)
    student.pretrained_cfg["preprocess"] = {"mean": [0.5, 0.5, 0.5], "std": [0.5, 0.5, 0.5]}
    step = distillation_step(Distillation(str(saved_teacher(tmp_path)), bf16=True), data, student)
    pixels = torch.rand(2, 3, 8, 8)
    expected = (pixels - torch.tensor([0.2, 0.3, 0.4])[:, None, None]) / torch.tensor([0.5, 0.25, 0.125])[:, None, None]
    torch.testing.assert_close(step.teacher_input((pixels - 0.5) / 0.5), expected)
    assert step.teacher_dtype == torch.bfloat16 and step.kind == "hard" and step.alpha == 0.5


def test_distillation_needs_a_teacher_of_the_datas_classes_and_channels(tmp_path: Path) -> None:
    data = write_image_folder(tmp_path / "images")
    config = TrainConfig(max_steps=1, batch_size=4, **QUIET)
    for teacher, problem in (
        (saved_teacher(tmp_path, num_classes=4), "predicts 4 classes"),
        (saved_teacher(tmp_path, in_chans=1), "takes 1-channel images"),
    ):
        with pytest.raises(ValueError, match=problem), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            finetune_with_config(
                "resnet20",
                data,
                tmp_path / "out",
                config=config,
                options=FinetuneOptions(distill=Distillation(str(teacher)), post_training=False),
            )


def test_zoo_finetune_with_a_teacher(tmp_path: Path) -> None:
    """``--teacher`` and its options reach the step; the card and the metrics record it."""
    data, out = write_image_folder(tmp_path / "images"), tmp_path / "out"
    argv = [
        "finetune",
        "resnet20",
        "--data",
        str(data),
        "--out",
        str(out),
        "--epochs",
        "1",
        "--batch-size",
        "4",
        "--no-progress",
        "--no-post-training",
        "--no-tensorboard",
        "--teacher",
        str(saved_teacher(tmp_path)),
        "--distill-kind",
        "soft",
        "--distill-temperature",
        "2",
        "--distill-alpha",
        "0.7",
        "--teacher-bf16",
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert cli.main(argv) == 0
    card = (out / "README.md").read_text()
    assert (
        f"- distillation: soft labels at temperature 2 of {tmp_path / 'teacher-3-3'} (run in bf16), weight 0.7" in card
    )
    history = json.loads((out / "metrics.json").read_text())["history"]
    assert history[0]["train_distill_loss"] > 0 and "val_distill_loss" not in history[0]


def test_grayscale_folder_gives_a_one_channel_model(tmp_path: Path) -> None:
    data = write_image_folder(tmp_path / "gray", mode="L")
    assert open_data(data).in_chans == 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = finetune_with_config(
            "mobilenet_v2_cifar",
            data,
            tmp_path / "out",
            config=TrainConfig(max_steps=1, batch_size=4, **QUIET),
            options=NO_POST_TRAINING,
        )
    restored = zoo.load(tmp_path / "out")
    assert restored.in_chans == 1 and restored.pretrained_cfg["preprocess"]["channels"] == 1
    x = zoo.transforms(restored)(Image.open(next((data / "ant").iterdir())).convert("RGB")).unsqueeze(0)
    torch.testing.assert_close(restored(x), result.model(x))


@pytest.mark.parametrize("mode", ["linear-probe", "partial", "full"])
@pytest.mark.parametrize("name", list(FAMILY_OPTIONS))
def test_modes_on_every_family(name: str, mode: str, tmp_path: Path) -> None:
    start, before = saved_start(tmp_path, name)
    data = family_data(name, tmp_path)
    config = TrainConfig(max_steps=2, batch_size=4, optimizer="sgd", lr=0.5, **QUIET)
    options = FinetuneOptions(mode=mode, stages=1, layer_decay=0.5 if mode == "full" else None, post_training=False)
    result = finetune_with_config(str(start), data, tmp_path / "out", options, config=config)
    after = result.model.state_dict()
    levels, num_levels = parameter_levels(result.model)
    classifier = {
        n for n, p in result.model.named_parameters() if any(p is q for q in result.model.get_classifier().parameters())
    }
    module_level = {n.rpartition(".")[0]: level for n, level in levels.items()}
    for key, value in after.items():
        owner = key.rpartition(".")[0]
        level = module_level.get(owner)
        if key in classifier:
            assert not torch.equal(value, before[key]), f"{key}: the classifier did not train"
        elif mode == "linear-probe" or (mode == "partial" and level is not None and level < num_levels - 1):
            assert torch.equal(value, before[key]), f"{key} (frozen, buffers included) changed"
    trained_levels = {levels[n] for n, p in result.model.named_parameters() if not torch.equal(after[n], before[n])}
    expected = (
        {num_levels}
        if mode == "linear-probe"
        else {num_levels - 1, num_levels}
        if mode == "partial"
        else set(range(num_levels + 1))
    )
    assert trained_levels == expected
    assert zoo.load(tmp_path / "out").pretrained_cfg["finetuned_from"] == str(start)


@pytest.mark.parametrize("name", FAMILIES)
def test_parameter_levels_follow_feature_info(name: str) -> None:
    model = zoo.load(name, pretrained=False, num_classes=5)
    levels, num_levels = parameter_levels(model)
    assert num_levels == len(model.feature_info)
    order = list(levels.values())
    assert order == sorted(order) and order[0] == 0, "levels must grow with depth"
    head = {n for n, level in levels.items() if level == num_levels}
    assert {
        f"{n}" for n, p in model.named_parameters() if any(p is q for q in model.get_classifier().parameters())
    } <= head
    scale = layer_decay_scale(model, 0.5)
    first, last = next(iter(levels)), next(n for n in levels if levels[n] == num_levels)
    assert scale(last) == 1.0 and scale(first) == 0.5**num_levels


def test_layer_decay_sets_each_stage_lr() -> None:
    model = zoo.load("resnet20", pretrained=False)
    trainer = Trainer(model, TrainConfig(lr=0.1, **QUIET), lr_scale=layer_decay_scale(model, 0.5))
    lrs = sorted({group["lr"] for group in trainer.optimizer.param_groups})
    assert lrs == pytest.approx(sorted(0.1 * 0.5**k for k in range(5)))  # head, layer3, layer2, layer1, stem
    head = next(g for g in trainer.optimizer.param_groups if any(p is model.fc.weight for p in g["params"]))
    assert head["lr"] == 0.1


def test_mode_errors() -> None:
    model = zoo.load("resnet20", pretrained=False)
    with pytest.raises(ValueError, match=r"partial mode unfreezes 1\.\.4 stages"):
        apply_mode(model, "partial", stages=9)
    with pytest.raises(ValueError, match="mode must be one of"):
        apply_mode(model, "half")
    with pytest.raises(ValueError, match="layer_decay must be in"):
        layer_decay_scale(model, 1.5)


def test_split_is_fixed_by_the_seed(tmp_path: Path) -> None:
    source = open_data(write_tensor_file(tmp_path / "d.pt", n=40))
    a_train, a_val = source.split(0.25, seed=7)
    b_train, b_val = source.split(0.25, seed=7)
    c_train, _ = source.split(0.25, seed=8)
    assert a_val.indices == b_val.indices and a_train.indices == b_train.indices and len(a_val) == 10
    assert a_train.indices != c_train.indices
    assert not set(a_train.indices) & set(a_val.indices)
    assert len(source.split(0.25, seed=7, limit=5)[0]) == 5


def test_augmentations_keep_the_eval_geometry() -> None:
    preprocess = {"resize": 20, "crop": 16, "mean": [0.5], "std": [0.5], "channels": 1}
    image = Image.fromarray(np.random.default_rng(0).integers(0, 255, (24, 30, 3), dtype=np.uint8))
    evaluation = image_transforms(preprocess, (24, 30), in_chans=1)(image)
    assert evaluation.shape == (1, 16, 16)
    for augment in (
        Augment(hflip=True, crop_padding=3),
        Augment(random_resized_crop=0.5, color_jitter=0.3),
        Augment(trivial_augment=True, random_erasing=1.0),
    ):
        assert image_transforms(preprocess, (24, 30), augment, in_chans=1)(image).shape == evaluation.shape
    tensor = torch.randint(0, 255, (1, 12, 12), dtype=torch.uint8)
    rgb = image_transforms({"mean": [0.5] * 3, "std": [0.5] * 3}, (12, 12), Augment(hflip=True), in_chans=3)(tensor)
    assert rgb.shape == (3, 12, 12)
    with pytest.raises(ValueError, match=r"Augment.random_resized_crop \(--random-resized-crop\) must be in \(0, 1\]"):
        Augment(random_resized_crop=0.0)


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_text_rows_become_byte_tokens(suffix: str, tmp_path: Path) -> None:
    rows = [("good film", "pos"), ("awful", "neg"), ("fine é", "pos"), ("bad bad", "neg")] * 3
    path = tmp_path / f"reviews{suffix}"
    if suffix == ".csv":
        path.write_text("text,label\n" + "".join(f'"{t}",{label}\n' for t, label in rows), encoding="utf-8")
    else:
        path.write_text("".join(json.dumps({"text": t, "label": label}) + "\n" for t, label in rows), encoding="utf-8")
    source = open_data(path, max_length=6)
    assert source.kind == "text" and source.class_names == ["neg", "pos"]
    train, val = source.split(0.25, seed=0)
    batch = source.collate_fn([train[i] for i in range(len(train))])
    assert batch["input_ids"].shape == batch["attention_mask"].shape == (9, 6) and set(batch["labels"].tolist()) <= {
        0,
        1,
    }
    ids = source.collate_fn([("fine é", 1), ("bad", 0)])
    assert ids["input_ids"].tolist() == [list("fine é".encode())[:6], [*b"bad", 256, 256, 256]]  # bytes, then padding
    assert ids["attention_mask"].tolist() == [[1] * 6, [1, 1, 1, 0, 0, 0]] and ids["labels"].tolist() == [1, 0]

    class Bag(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.EmbeddingBag(259, 8)
            self.fc = nn.Linear(8, 2)

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
            return self.fc(self.embed(input_ids, per_sample_weights=None) * attention_mask.any(1, keepdim=True))

    history = Trainer(Bag(), TrainConfig(max_steps=2, batch_size=4, **QUIET), collate_fn=source.collate_fn).fit(
        train, val
    )
    assert "val_acc" in history[-1]


def test_finetune_a_text_classifier_from_a_csv(tmp_path: Path) -> None:
    out = tmp_path / "out"
    config = TrainConfig(max_steps=2, batch_size=4, **QUIET)
    result = finetune_with_config(
        "moe_encoder",
        write_text_file(tmp_path / "t.csv"),
        out,
        FinetuneOptions(model_kwargs=TINY_MOE, pretrained=False, val_fraction=0.25),
        config=config,
    )
    assert result.model.head == "sequence_classification" and result.model.num_classes == 3
    assert (out / "eval_report.json").is_file() and (out / "confusion_matrix.png").is_file()
    restored = zoo.load(out)
    batch = open_data(tmp_path / "t.csv").collate_fn([("so bad", 1), ("great!", 2)])
    torch.testing.assert_close(
        restored(batch["input_ids"], batch["attention_mask"]), result.model(batch["input_ids"], batch["attention_mask"])
    )


def test_text_file_errors(tmp_path: Path) -> None:
    path = tmp_path / "bad.csv"
    path.write_text("sentence,label\nhi,1\n")
    with pytest.raises(ValueError, match=r"needs the fields \('text', 'label'\); missing \['text'\]"):
        open_data(path)


def test_tensor_files(tmp_path: Path) -> None:
    images = open_data(write_tensor_file(tmp_path / "d.pt"))
    assert (images.kind, images.in_chans, images.image_size, images.class_names) == (
        "images",
        1,
        (12, 12),
        ["a", "b", "c"],
    )
    np.savez(tmp_path / "f.npz", x=np.random.rand(10, 5).astype(np.float32), y=np.arange(10) % 2)
    features = open_data(tmp_path / "f.npz")
    assert features.kind == "tensors" and features.num_classes == 2
    x, y = features.full()[3]
    assert x.shape == (5,) and y.dtype == torch.long
    np.save(tmp_path / "u.npy", np.random.rand(10, 5).astype(np.float32))
    unlabelled = open_data(tmp_path / "u.npy")
    assert unlabelled.num_classes is None and unlabelled.full()[0].shape == (5,)
    with pytest.raises(ValueError, match="has no labels"):
        finetune_with_config("resnet20", tmp_path / "u.npy", tmp_path / "out")
    with pytest.raises(FileNotFoundError, match="image folder, a .csv/.jsonl"):
        open_data(tmp_path / "missing")


def test_pyg_dataset_passes_through(tmp_path: Path) -> None:
    from torch_geometric.datasets import FakeDataset
    from torch_geometric.nn import GCNConv, global_mean_pool

    torch.manual_seed(0)
    graphs = FakeDataset(num_graphs=12, avg_num_nodes=6, num_channels=4, num_classes=2, task="graph")
    source = open_data(graphs)
    assert source.kind == "graphs" and source.num_classes == 2
    train, val = source.split(0.25, seed=0)

    class GraphNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = GCNConv(4, 8)
            self.fc = nn.Linear(8, 2)

        def forward(self, batch) -> torch.Tensor:
            return self.fc(global_mean_pool(self.conv(batch.x, batch.edge_index).relu(), batch.batch))

    history = Trainer(GraphNet(), TrainConfig(max_steps=2, batch_size=4, **QUIET), collate_fn=source.collate_fn).fit(
        train, val
    )
    assert 0.0 <= history[-1]["val_acc"] <= 1.0


def test_transfer_compares_pretrained_with_scratch(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from zoo.training import transfer

    start, _ = saved_start(tmp_path, "resnet20", in_chans=3)
    data = write_image_folder(tmp_path / "images")
    out = tmp_path / "transfer"
    argv = [
        str(start),
        "--data",
        str(data),
        "--out",
        str(out),
        "--max-steps",
        "2",
        "--batch-size",
        "4",
        "--no-progress",
        "--no-tensorboard",
        "--no-post-training",
        "--mode",
        "linear-probe",
    ]
    assert transfer.main(argv) == 0
    summary = json.loads((out / "transfer.json").read_text())
    assert summary["runs"]["pretrained"]["mode"] == "linear-probe" and summary["runs"]["scratch"]["mode"] == "full"
    assert (out / "transfer.png").stat().st_size > 0
    assert zoo.load(out / "pretrained").pretrained_cfg["finetuned_from"] == str(start)
    assert zoo.load(out / "scratch").pretrained_cfg.get("finetuned_from") is None  # unset: not in config.json
    assert transfer.main(["resnet20", "--data", str(data), "--out", str(out)]) == 2
    assert "not the bare architecture 'resnet20'" in capsys.readouterr().err


def test_out_must_be_empty_unless_resuming_or_overwriting(tmp_path: Path) -> None:
    data, out = write_image_folder(tmp_path / "images"), tmp_path / "out"
    config = TrainConfig(max_steps=1, batch_size=4, **QUIET)
    out.mkdir()
    (out / "my_notes.txt").write_text("the user's own file")
    with pytest.raises(InvalidArgumentError, match=r"--out .*out is not empty \(my_notes.txt\)"):
        finetune_with_config("resnet20", data, out, config=config, options=NO_POST_TRAINING)
    finetune_with_config(
        "resnet20", data, out, config=config, options=FinetuneOptions(post_training=False, overwrite=True)
    )
    assert (out / "my_notes.txt").read_text() == "the user's own file"  # not a run's file: kept
    (out / "model.torchscript.pt").write_bytes(b"not an export a run wrote")  # where a run writes one: refused
    with pytest.raises(InvalidArgumentError, match=r"model.torchscript.pt \(not written by a run\)"):
        finetune_with_config(
            "resnet20", data, out, config=config, options=FinetuneOptions(post_training=False, overwrite=True)
        )
    assert (out / "model.torchscript.pt").exists()
    with pytest.raises(InvalidArgumentError, match=r"--resume: .*typo holds no run to resume"):
        finetune_with_config(
            "resnet20",
            data,
            tmp_path / "typo",
            config=dataclasses.replace(config, resume=True, out_dir=str(tmp_path)),
            options=NO_POST_TRAINING,
        )


def test_a_truncated_checkpoint_names_its_file(tmp_path: Path) -> None:
    data, out = write_image_folder(tmp_path / "images"), tmp_path / "out"
    config = TrainConfig(max_steps=2, batch_size=4, checkpoint_every=1, out_dir=str(out), **QUIET)
    finetune_with_config("resnet20", data, out, config=config, options=NO_POST_TRAINING)
    last = out / "checkpoints" / "last.pt"
    last.write_bytes(last.read_bytes()[: last.stat().st_size // 2])
    with pytest.raises(CheckpointError, match=f"{last} is not a readable checkpoint"):
        finetune_with_config(
            "resnet20",
            data,
            out,
            config=dataclasses.replace(config, resume=True, out_dir=str(tmp_path)),
            options=NO_POST_TRAINING,
        )


def test_a_saved_gray_model_adapts_to_colour_data(tmp_path: Path) -> None:
    gray = write_image_folder(tmp_path / "gray", mode="L")
    first = finetune_with_config(
        "resnet20.fmnist",
        gray,
        tmp_path / "a",
        config=TrainConfig(max_steps=1, batch_size=4, **QUIET),
        options=NO_POST_TRAINING,
    )
    assert first.model.in_chans == 1
    colour = write_image_folder(tmp_path / "rgb", mode="RGB")
    second = finetune_with_config(
        str(tmp_path / "a"),
        colour,
        tmp_path / "b",
        config=TrainConfig(max_steps=1, batch_size=4, **QUIET),
        options=NO_POST_TRAINING,
    )
    assert second.model.in_chans == 3 and len(second.model.pretrained_cfg["preprocess"]["mean"]) == 3


@pytest.mark.parametrize(
    "name,data",
    [("dbn.digits", "images"), ("gin3.fmnist", "images"), ("moe_lm.stdlib", "images"), ("resnet20.fmnist", "text")],
)
def test_data_a_model_cannot_read_is_refused_before_training(tmp_path: Path, name: str, data: str) -> None:
    path = write_image_folder(tmp_path / "images") if data == "images" else write_text_file(tmp_path / "t.csv")
    with pytest.raises(DataError, match=f"{name} reads .* but .* holds {data}: fine-tune a model that reads {data}"):
        finetune_with_config(name, path, tmp_path / "out", config=TrainConfig(max_steps=1, **QUIET))
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "name,head,num_classes",
    [
        ("moe_lm.stdlib", "sequence_classification", 3),
        ("moe_lm.stdlib", "token_classification", 5),
        ("gin3.fmnist", "node_classification", 4),
        ("gin3.triangles_er", "graph_classification", 2),
    ],
)
def test_weights_load_under_another_head(name: str, head: str, num_classes: int) -> None:
    own = zoo.load(name)
    model = zoo.load(name, head=head, num_classes=num_classes)
    assert model.head == head and model.num_classes == num_classes
    heads = {name for m in (own, model) for name, module in m.named_modules() if module is m.get_classifier()}
    body = {k: v for k, v in own.state_dict().items() if k in model.state_dict() and k.rsplit(".", 1)[0] not in heads}
    assert body and all(torch.equal(model.state_dict()[k], v) for k, v in body.items())
    with pytest.raises(zoo.ZooError, match="needs num_classes=N"):
        zoo.load(name, head=head)


def test_a_folder_of_mixed_sizes_and_modes_trains_from_scratch(tmp_path: Path) -> None:
    root = tmp_path / "mixed"
    for c, name in enumerate(("ant", "bee")):
        (root / name).mkdir(parents=True)
        for i, (size, mode) in enumerate([((12, 10), "RGB"), ((20, 9), "L"), ((7, 16), "RGBA"), ((12, 12), "P")]):
            Image.new("RGB", size, (250 * c, 40 * i, 90)).convert(mode).save(root / name / f"{i}.png")
    result = finetune_with_config(
        "resnet20",
        root,
        tmp_path / "out",
        config=TrainConfig(max_steps=1, batch_size=4, **QUIET),
        options=NO_POST_TRAINING,
    )
    assert result.model.in_chans == 3 and result.model.pretrained_cfg["preprocess"]["resize"] == [10, 12]


KILLER = """
import importlib, os, signal, sys
from zoo import cli

point, calls = sys.argv[1], int(sys.argv[2])
module_name, attr = point.rsplit(".", 1)
module = importlib.import_module(module_name)
original, seen = getattr(module, attr), [0]

def kill_at_call(*args, **kwargs):
    seen[0] += 1
    if seen[0] == calls:
        os.kill(os.getpid(), signal.SIGKILL)
    return original(*args, **kwargs)

setattr(module, attr, kill_at_call)
sys.exit(cli.main(sys.argv[3:]))
"""


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], Path]:
    """The `zoo finetune` arguments of the kill test and the folder of their uninterrupted run."""
    root = tmp_path_factory.mktemp("uninterrupted")
    args = [
        "finetune",
        "resnet20",
        "--data",
        str(write_image_folder(root / "images", per_class=8)),
        "--epochs",
        "2",
        "--batch-size",
        "8",
        "--no-progress",
        "--no-tensorboard",
        "--image-size",
        "8",
    ]
    assert cli.main([*args, "--out", str(root / "reference")]) == 0
    return args, root / "reference"


@pytest.mark.parametrize(
    "point,calls",
    [
        ("zoo.training.loop.trainer.write_checkpoint", 2),  # training, after the first epoch's checkpoint
        ("safetensors.torch.save_model", 1),  # writing the final model
        ("zoo.training.finetune.card.write_card", 1),  # the model saved, its card not written
        ("zoo.training.finetune.post_training.post_training", 1),  # the card written, the exports not
    ],
)
def test_a_killed_finetune_leaves_a_folder_that_resumes_to_the_same_model(
    uninterrupted: tuple[list[str], Path], tmp_path: Path, point: str, calls: int
) -> None:
    """SIGKILL at several points of `zoo finetune`: the output folder is then either complete or
    resumable, and `--resume` finishes it with the model an uninterrupted run makes."""
    import subprocess
    import sys

    args, reference = uninterrupted
    (tmp_path / "killer.py").write_text(KILLER)
    out = str(tmp_path / "killed")
    killed = subprocess.run(
        [sys.executable, str(tmp_path / "killer.py"), point, str(calls), *args, "--out", out],
        capture_output=True,
        text=True,
    )
    assert killed.returncode == -9, killed.stderr[-2000:]
    if (tmp_path / "killed" / "config.json").is_file():  # whatever was saved is whole
        zoo.load(tmp_path / "killed")
    assert cli.main([*args, "--out", out, "--resume"]) == 0
    x = torch.randn(3, 3, 8, 8)
    torch.testing.assert_close(zoo.load(tmp_path / "killed")(x), zoo.load(reference)(x))
    assert (tmp_path / "killed" / "README.md").is_file() and (tmp_path / "killed" / "model.pt2").is_file()
