"""Trainer: every option on a real zoo model for a step or two, gradient accumulation,
bf16 on CPU, exact resume after SIGKILL, 2-process Gloo DDP (and FSDP2) against one process,
the pluggable step (MoE aux loss, DBN-style custom steps), checkpoints and logs."""

from __future__ import annotations

import copy
import dataclasses
import importlib.util
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.nn as nn
from torch.utils.data import TensorDataset

import zoo
from zoo.training.data.kinds import TextBatches
from zoo.training.loop.loaders import EpochSampler, ShardSampler
from zoo.training.loop.steps import ClassificationStep, DistillationStep, StepOutput
from zoo.training.loop.trainer import TrainConfig, Trainer, param_groups

REPO = Path(__file__).resolve().parents[1]
FAMILIES = ("resnet20", "densenet_bc_40", "mobilenet_v2_cifar")
QUIET = dict(progress=False, tensorboard=False, plot=False)


pytestmark = pytest.mark.usefixtures("one_thread")


def tiny_model(name: str = "resnet20", **kwargs) -> nn.Module:
    torch.manual_seed(0)
    return zoo.load(name, pretrained=False, in_chans=1, num_classes=3, **kwargs)


def tiny_data(n: int = 16, size: int = 8, seed: int = 1) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    return TensorDataset(torch.randn(n, 1, size, size, generator=g), torch.randint(0, 3, (n,), generator=g))


def freeze_norms(model: nn.Module) -> nn.Module:
    """BatchNorm with frozen affine parameters: the Trainer keeps it in eval mode, so no layer
    depends on the batch's composition and batch splits give identical gradients."""
    for module in model.modules():
        if isinstance(module, nn.BatchNorm2d):
            module.requires_grad_(False)
    return model


def weights(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


OPTIONS = {
    "sgd-nesterov": dict(optimizer="sgd", nesterov=True, lr=0.05),
    "adamw-cosine-warmup": dict(scheduler="cosine", warmup_epochs=0.5),  # below epochs (1)
    "onecycle": dict(scheduler="onecycle"),
    "step": dict(scheduler="step", step_epochs=0.25, gamma=0.5),
    "plateau": dict(scheduler="plateau", epochs=2),
    "none": dict(scheduler="none"),
    "bf16": dict(precision="bf16"),
    "accumulation": dict(accum_steps=2),
    "clip": dict(clip_grad_norm=0.01),
    "label-smoothing": dict(label_smoothing=0.1),
    "grad-checkpointing": dict(grad_checkpointing=True),
    "channels-last": dict(channels_last=True),
    "ema": dict(ema_decay=0.5),
    "early-stopping": dict(early_stopping_patience=1, epochs=2),
    "compile": dict(compile=True, compile_backend="eager"),
}


@pytest.mark.parametrize("option", OPTIONS)
def test_option_trains(option: str, tmp_path: Path) -> None:
    model = tiny_model()
    before = weights(model)
    settings = {"epochs": 1, "batch_size": 4, **OPTIONS[option]}
    trainer = Trainer(model, TrainConfig(**settings, **QUIET))
    history = trainer.fit(tiny_data(), tiny_data(8, seed=2))
    assert history and all(torch.isfinite(torch.tensor(row["train_loss"])) for row in history)
    assert "val_acc" in history[-1] and 0.0 <= history[-1]["val_acc"] <= 1.0
    changed = [k for k, v in model.state_dict().items() if v.is_floating_point() and not torch.equal(v, before[k])]
    assert changed, f"{option}: no weight changed"
    if option == "channels-last":
        assert model.conv1.weight.is_contiguous(memory_format=torch.channels_last)
    if option == "grad-checkpointing":
        assert model.grad_checkpointing
    if option == "ema":
        assert int(trainer.ema.n_averaged) == trainer.state.global_step == 4
        assert not torch.equal(trainer.ema.module.fc.weight, model.fc.weight)
    if option == "clip":
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        assert torch.linalg.vector_norm(torch.stack([g.norm() for g in grads])) <= 0.01 + 1e-6
    if option == "step":  # step_size = 1 optimizer step: halved after each of the 4
        assert trainer.optimizer.param_groups[0]["lr"] == pytest.approx(1e-3 * 0.5**4)
    if option == "adamw-cosine-warmup":
        assert isinstance(trainer.scheduler, torch.optim.lr_scheduler.SequentialLR)
    if option == "plateau":
        assert isinstance(trainer.scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau)
    if option == "compile":
        assert model._compiled_call_impl is not None


TINY_MOE = dict(hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=2, intermediate_size=32, num_experts=4)


def family_case(name: str, tmp_path: Path) -> tuple[nn.Module, object, object, object]:
    """(model, training set, validation set, collate_fn): a few samples for one family."""
    torch.manual_seed(0)
    if name in FAMILIES:
        return tiny_model(name), tiny_data(16, size=16), tiny_data(4, size=16, seed=2), None
    if name == "moe_vit":
        model = zoo.load("moe_vit", pretrained=False, num_classes=3, img_size=16, patch_size=4, in_chans=1, **TINY_MOE)
        return model, tiny_data(16, size=16), tiny_data(4, size=16, seed=2), None
    if name == "moe_encoder":
        rows = [
            (text, label) for text, label in (("a good one", 0), ("so bad", 1), ("meh, fine", 2), ("great!", 0))
        ] * 5
        model = zoo.load("moe_encoder", pretrained=False, num_classes=3, **TINY_MOE)
        return model, rows[:16], rows[16:], TextBatches(max_length=12)
    if name == "gin_sum":
        from torch_geometric.datasets import FakeDataset
        from torch_geometric.loader.dataloader import Collater

        graphs = FakeDataset(num_graphs=20, avg_num_nodes=6, num_channels=4, num_classes=3, task="graph")
        model = zoo.load("gin_sum", pretrained=False, in_channels=4, num_classes=3, hidden_channels=16, num_layers=2)
        return model, graphs[:16], graphs[16:], Collater(graphs)
    if name == "dbn":
        g = torch.Generator().manual_seed(1)
        data = TensorDataset(torch.rand(20, 64, generator=g), torch.randint(0, 3, (20,), generator=g))
        return (
            zoo.load("dbn", pretrained=False, sizes=(64, 16, 8), num_classes=3),
            data,
            TensorDataset(*data[16:]),
            None,
        )
    raise ValueError(name)


ALL_FAMILIES = (*FAMILIES, "moe_vit", "moe_encoder", "gin_sum", "dbn")


@pytest.mark.parametrize("name", ALL_FAMILIES)
def test_every_family_trains_with_all_speed_options(name: str, tmp_path: Path) -> None:
    """bf16 + channels_last (CNNs) + grad checkpointing (where the model has it) + EMA +
    accumulation + clipping + one-cycle, with checkpoints, logs, plots and a profiler trace."""
    model, train, val, collate = family_case(name, tmp_path)
    config = TrainConfig(
        epochs=1,
        max_steps=2,
        batch_size=4,
        accum_steps=2,
        precision="bf16",
        channels_last=name in FAMILIES,
        grad_checkpointing=hasattr(model, "set_grad_checkpointing"),
        ema_decay=0.9,
        clip_grad_norm=1.0,
        scheduler="onecycle",
        checkpoint_every=1,
        out_dir=str(tmp_path),
        profile=True,
        progress=False,
    )
    history = Trainer(model, config, collate_fn=collate).fit(train, val)
    assert history[-1]["step"] == 2 and 0.0 <= history[-1]["val_acc"] <= 1.0
    if name.startswith("moe"):
        loads = [v for k, v in history[-1].items() if k.startswith("train_expert_load/")]
        assert len(loads) == 4 and sum(loads) == pytest.approx(1.0) and history[-1]["train_aux_loss"] > 0
    for produced in (
        "metrics.csv",
        "metrics.json",
        "curves.png",
        "train.log",
        "checkpoints/last.pt",
        "checkpoints/best.pt",
    ):
        assert (tmp_path / produced).is_file(), produced
    assert list((tmp_path / "tensorboard").iterdir())
    assert list((tmp_path / "profile").iterdir()), "no profiler trace"
    assert not list((tmp_path / "checkpoints").glob(".*.tmp")), "a temporary checkpoint file was left behind"
    saved = json.loads((tmp_path / "metrics.json").read_text())
    assert saved["monitor"] == "val_acc" and saved["best_epoch"] == 1


def test_profile_names_the_ops_that_bound_a_step(tmp_path: Path) -> None:
    """profile=True: besides the trace, the operators by their share of a step's time, in a CSV
    and one line of train.log, the largest first and the shares adding up to at most 100%."""
    import csv

    torch.manual_seed(0)
    data = TensorDataset(torch.randn(48, 1, 28, 28), torch.randint(0, 3, (48,)))
    config = TrainConfig(epochs=1, batch_size=8, out_dir=str(tmp_path), profile=True, progress=False, plot=False)
    Trainer(tiny_model(), config).fit(data)
    rows = list(csv.DictReader((tmp_path / "profile" / "top_ops-rank0.csv").open()))
    shares = [float(row["share"].rstrip("%")) for row in rows]
    assert rows and shares == sorted(shares, reverse=True) and sum(shares) <= 100.05
    assert any("conv" in row["op"] for row in rows[:5]), rows[:5]  # a ResNet's step is convolutions
    assert float(rows[0]["ms_per_step"]) > 0 and float(rows[0]["calls_per_step"]) > 0
    line = next(line for line in (tmp_path / "train.log").read_text().splitlines() if "profile:" in line)
    assert "a step's CPU time went to" in line and rows[0]["op"] in line and "top_ops-rank0.csv" in line
    # a run that ends inside the profiled window: per step by the steps the trace holds (2 here)
    short = tmp_path / "short"
    config = TrainConfig(epochs=1, batch_size=12, out_dir=str(short), profile=True, progress=False, plot=False)
    model = tiny_model()
    Trainer(model, config).fit(data)  # 4 steps: one waited, one warm-up, two traced
    convs = sum(isinstance(m, nn.Conv2d) for m in model.modules())
    rows = list(csv.DictReader((short / "profile" / "top_ops-rank0.csv").open()))
    forward = next(row for row in rows if row["op"] in ("aten::mkldnn_convolution", "aten::_convolution"))
    assert float(forward["calls_per_step"]) == convs, (forward, convs)


def test_dbn_pretraining_with_a_contrastive_divergence_step() -> None:
    """Greedy pretraining of a DBN's first RBM: the step sets the CD gradients itself."""
    from sklearn.datasets import load_digits

    torch.manual_seed(0)
    model = zoo.load("dbn", pretrained=False, sizes=(64, 32, 16), num_classes=10)
    rbm = model.rbms[0]

    @torch.no_grad()
    def contrastive_divergence(model: nn.Module, batch: torch.Tensor) -> StepOutput:
        rbm.contrastive_divergence(batch)  # sets the parameters' .grad; the loss only logs progress
        return StepOutput(loss=(rbm.reconstruct(batch) - batch).pow(2).mean())

    digits = torch.tensor(load_digits().data[:400] / 16.0, dtype=torch.float32)
    initial_error = (rbm.reconstruct(digits) - digits).pow(2).mean().item()
    before = {k: v.clone() for k, v in model.rbms[1].state_dict().items()}
    config = TrainConfig(
        epochs=3, batch_size=20, optimizer="sgd", lr=0.1, momentum=0.5, weight_decay=0.0, scheduler="none", **QUIET
    )
    history = Trainer(model, config, step_fn=contrastive_divergence).fit(DigitsOnly(digits))
    assert history[-1]["train_loss"] < history[0]["train_loss"] < 0.7 * initial_error, (
        "reconstruction error should fall"
    )
    assert all(torch.equal(v, before[k]) for k, v in model.rbms[1].state_dict().items()), "only the first RBM trains"
    with pytest.raises(ValueError, match="cannot accumulate"):
        Trainer(model, dataclasses.replace(config, accum_steps=2), step_fn=contrastive_divergence).fit(
            DigitsOnly(digits)
        )


class DigitsOnly(torch.utils.data.Dataset):
    """Unlabelled rows of a tensor."""

    def __init__(self, x: torch.Tensor) -> None:
        self.x = x

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, index: int) -> torch.Tensor:
        return self.x[index]


def test_plain_settings_equal_the_tutorial_loop() -> None:
    """SGD without weight decay or schedule in fp32 is exactly the textbook loop (same order)."""
    model = tiny_model()
    reference = copy.deepcopy(model)
    data = tiny_data(24)
    config = TrainConfig(
        max_steps=5, batch_size=4, optimizer="sgd", lr=0.05, momentum=0.9, weight_decay=0.0, scheduler="none", **QUIET
    )
    Trainer(model, config).fit(data)

    sampler = EpochSampler(data, seed=config.seed)
    sampler.set_epoch(0)
    optimizer = torch.optim.SGD(reference.parameters(), lr=0.05, momentum=0.9)
    reference.train()
    for step, (x, y) in enumerate(torch.utils.data.DataLoader(data, batch_size=4, sampler=sampler)):
        if step == 5:
            break
        nn.functional.cross_entropy(reference(x), y).backward()
        optimizer.step()
        optimizer.zero_grad()
    for key, value in reference.state_dict().items():
        torch.testing.assert_close(model.state_dict()[key], value, rtol=1e-6, atol=1e-7, msg=key)


def test_accumulation_equals_one_big_batch() -> None:
    model = freeze_norms(tiny_model())
    other = copy.deepcopy(model)
    x, y = tiny_data(8).tensors
    accumulated = Trainer(model, TrainConfig(optimizer="sgd", lr=0.1, scheduler="none", **QUIET))
    whole = Trainer(other, TrainConfig(optimizer="sgd", lr=0.1, scheduler="none", **QUIET))
    accumulated.train_mode()
    whole.train_mode()
    assert not model.bn1.training and model.conv1.training
    accumulated.train_step([(x[i : i + 2], y[i : i + 2]) for i in range(0, 8, 2)])
    whole.train_step([(x, y)])
    grads = {n: p.grad for n, p in model.named_parameters() if p.requires_grad}
    assert len(grads) > 10
    for name, param in other.named_parameters():
        if param.requires_grad:
            torch.testing.assert_close(grads[name], param.grad, rtol=1e-5, atol=1e-6, msg=name)


def test_bf16_autocast_runs_on_cpu() -> None:
    model = tiny_model()
    seen: list[torch.dtype] = []
    model.conv1.register_forward_hook(lambda module, args, out: seen.append(out.dtype))
    trainer = Trainer(model, TrainConfig(max_steps=1, batch_size=8, precision="bf16", **QUIET))
    assert trainer.device.type == "cpu"
    history = trainer.fit(tiny_data())
    assert seen and set(seen) == {torch.bfloat16}
    assert model.conv1.weight.dtype == torch.float32  # master weights stay fp32
    assert torch.isfinite(torch.tensor(history[-1]["train_loss"]))


def test_fp16_needs_cuda() -> None:
    if torch.cuda.is_available():
        pytest.skip("CUDA present: fp16 is allowed")
    with pytest.raises(ValueError, match="fp16.*CUDA.*bf16"):
        Trainer(tiny_model(), TrainConfig(precision="fp16", **QUIET))


def test_no_weight_decay_on_norms_and_biases() -> None:
    model = tiny_model()
    groups = param_groups(model, lr=0.1, weight_decay=0.05)
    decayed = {id(p) for g in groups if g["weight_decay"] > 0 for p in g["params"]}
    assert id(model.conv1.weight) in decayed and id(model.fc.weight) in decayed
    assert id(model.fc.bias) not in decayed and id(model.bn1.weight) not in decayed
    assert sum(len(g["params"]) for g in groups) == len(list(model.parameters()))


class _MoEToy(nn.Module):
    """Logits, or with return_aux logits, aux_loss and expert_fractions, as the MoE models."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(4, 8)
        self.head = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor, return_aux: bool = False) -> torch.Tensor | SimpleNamespace:
        h = self.body(x)
        if not return_aux:
            return self.head(h)
        fractions = torch.tensor([[0.25, 0.75], [0.5, 0.5]])
        return SimpleNamespace(logits=self.head(h), aux_loss=h.pow(2).mean(), expert_fractions=fractions)


def test_aux_loss_is_added_and_expert_load_logged() -> None:
    torch.manual_seed(0)
    model = _MoEToy()
    x, y = torch.randn(8, 4), torch.randint(0, 3, (8,))
    out = ClassificationStep()(model, (x, y))
    expected = nn.functional.cross_entropy(model(x), y) + model(x, return_aux=True).aux_loss
    torch.testing.assert_close(out.loss, expected)
    history = Trainer(model, TrainConfig(max_steps=2, batch_size=4, **QUIET)).fit(TensorDataset(x, y))
    row = history[-1]
    assert row["train_aux_loss"] > 0
    assert row["train_expert_load/0"] == pytest.approx(0.375) and row["train_expert_load/1"] == pytest.approx(0.625)


def test_distillation_losses_match_their_definitions() -> None:
    """Hard: cross-entropy with the teacher's argmax; soft: T² KL(teacher_T || student_T);
    both mixed with the label loss by alpha, the student's aux loss added whole."""
    torch.manual_seed(0)
    student, teacher = _MoEToy(), nn.Linear(4, 3)
    x, y = torch.randn(8, 4), torch.randint(0, 3, (8,))
    out = student(x, return_aux=True)
    logits, aux, ce = out.logits, out.aux_loss, nn.functional.cross_entropy(out.logits, y)
    hard = DistillationStep(teacher=teacher, alpha=0.3)(student, (x, y))
    expected = 0.7 * ce + 0.3 * nn.functional.cross_entropy(logits, teacher(x).argmax(-1)) + aux
    torch.testing.assert_close(hard.loss, expected)
    soft = DistillationStep(teacher=teacher, alpha=1.0, kind="soft", temperature=2.0)(student, (x, y))
    p_teacher = (teacher(x) / 2).softmax(-1)
    kl = (p_teacher * (p_teacher.log() - (logits / 2).log_softmax(-1))).sum(-1).mean() * 4
    torch.testing.assert_close(soft.loss, kl + aux)
    torch.testing.assert_close(soft.logs["distill_loss"], kl)
    assert not any(p.requires_grad for p in teacher.parameters()) and not teacher.training


def test_distillation_ignores_masked_positions_and_maps_teacher_inputs() -> None:
    """Per-token logits [N, T, K] with -100 targets: masked positions add nothing; the teacher
    sees ``teacher_input(x)``."""
    torch.manual_seed(0)
    student, teacher = nn.Linear(4, 5), nn.Linear(4, 5)
    x, y = torch.randn(2, 3, 4), torch.tensor([[1, -100, 2], [-100, 0, 4]])
    valid = y != -100
    for kind in ("hard", "soft"):
        step = DistillationStep(teacher=teacher, alpha=1.0, kind=kind, teacher_input=lambda t: -t)
        targets = teacher(-x)
        if kind == "hard":
            expected = nn.functional.cross_entropy(student(x)[valid], targets[valid].argmax(-1))
        else:
            p_teacher = targets[valid].softmax(-1)
            expected = (p_teacher * (p_teacher.log() - student(x)[valid].log_softmax(-1))).sum(-1).mean()
        torch.testing.assert_close(step(student, (x, y)).loss, expected)


def test_distillation_trains_the_student_towards_the_teacher() -> None:
    """With alpha = 1 the labels are ignored: a student trained on random labels learns the
    teacher's decisions instead, and validation still reports plain cross-entropy on the labels."""
    torch.manual_seed(0)
    x = torch.randn(256, 4)
    teacher = nn.Linear(4, 3)
    labels = torch.randint(0, 3, (256,))  # unrelated to the teacher
    student = nn.Linear(4, 3)
    config = TrainConfig(epochs=30, batch_size=32, lr=0.05, weight_decay=0.0, precision="fp32", **QUIET)  # exact losses
    trainer = Trainer(student, config, step_fn=DistillationStep(teacher=teacher, alpha=1.0))
    history = trainer.fit(TensorDataset(x, labels), TensorDataset(x, labels))
    with torch.no_grad():
        agreement = (student(x).argmax(-1) == teacher(x).argmax(-1)).float().mean()
        val_ce = nn.functional.cross_entropy(student(x), labels)
    assert agreement > 0.95
    assert history[-1]["val_acc"] < 0.6 and "train_distill_loss" in history[-1]
    assert history[-1]["val_loss"] == pytest.approx(float(val_ce), rel=1e-4)


def test_distillation_step_rejects_bad_settings() -> None:
    with pytest.raises(ValueError, match="needs a teacher"):
        DistillationStep()
    with pytest.raises(ValueError, match="0 <= alpha <= 1"):
        DistillationStep(teacher=nn.Linear(2, 2), alpha=1.5)
    with pytest.raises(ValueError, match="kind 'hard' or 'soft'"):
        DistillationStep(teacher=nn.Linear(2, 2), kind="medium")


def test_custom_step_for_unlabelled_pretraining() -> None:
    """A DBN-style step: batches are bare tensors, the step returns only a loss."""
    torch.manual_seed(0)
    model = nn.Linear(6, 6)

    def reconstruction(model: nn.Module, batch: torch.Tensor) -> StepOutput:
        return StepOutput(loss=(model(batch) - batch).pow(2).mean(), logs={"energy": batch.sum()})

    data = torch.utils.data.TensorDataset(torch.randn(32, 6))
    unwrap = torch.utils.data.default_collate
    trainer = Trainer(
        model,
        TrainConfig(epochs=3, batch_size=8, lr=0.05, **QUIET),
        step_fn=reconstruction,
        collate_fn=lambda rows: unwrap([r[0] for r in rows]),
    )
    history = trainer.fit(data)
    assert trainer.monitor == "train_loss"
    assert "train_acc" not in history[-1] and "train_energy" in history[-1]
    assert history[-1]["train_loss"] < history[0]["train_loss"]


def test_early_stopping_stops() -> None:
    model = nn.Linear(2, 2)
    epoch_losses = iter([1.0] * 4 + [2.0] * 4 + [3.0] * 4 + [4.0] * 4)

    def worsening(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> StepOutput:
        return StepOutput(loss=model(batch[0]).sum() * 0 + next(epoch_losses))

    config = TrainConfig(epochs=4, batch_size=2, early_stopping_patience=2, **QUIET)
    trainer = Trainer(model, config, step_fn=worsening)
    history = trainer.fit(TensorDataset(torch.randn(8, 2), torch.zeros(8, dtype=torch.long)))
    assert len(history) == 3 and trainer.state.stopped_early and trainer.state.best_epoch == 1


def test_checkpoint_for_other_data_or_budget_is_refused(tmp_path: Path) -> None:
    config = TrainConfig(max_steps=2, batch_size=4, out_dir=str(tmp_path), **QUIET)
    Trainer(tiny_model(), config).fit(tiny_data())
    other = TrainConfig(max_steps=4, batch_size=8, out_dir=str(tmp_path), resume=True, **QUIET)
    with pytest.raises(ValueError, match="same data, batch size"):
        Trainer(tiny_model(), other).fit(tiny_data())
    longer = TrainConfig(max_steps=4, batch_size=4, out_dir=str(tmp_path), resume=True, **QUIET)
    with pytest.raises(ValueError, match="same epochs and max_steps"):
        Trainer(tiny_model(), longer).fit(tiny_data())


def test_samplers_resume_and_shard() -> None:
    data = list(range(10))
    sampler = EpochSampler(data, seed=3)
    sampler.set_epoch(1)
    full = list(sampler)
    sampler.skip = 4
    assert list(sampler) == full[4:] and len(sampler) == 6
    shards = [ShardSampler(data, 3, rank) for rank in range(3)]
    assert [len(s) for s in shards] == [4, 4, 4] and sorted(i for s in shards for i in s.indices[: s.num_valid]) == data


RESUME_SCRIPT = textwrap.dedent(
    """
    import os, signal, sys
    import torch
    import zoo
    from zoo.training.loop.trainer import Trainer, TrainConfig
    from zoo.training.loop.steps import ClassificationStep

    class Flips(torch.utils.data.Dataset):
        # random augmentation drawn from the global RNG, as torchvision transforms do
        def __init__(self, x, y):
            self.x, self.y = x, y
        def __len__(self):
            return len(self.x)
        def __getitem__(self, i):
            x = self.x[i].flip(-1) if torch.rand(()) < 0.5 else self.x[i]
            return x, self.y[i]

    def main(out, kill_at):
        torch.set_num_threads(1)
        torch.manual_seed(0)
        model = zoo.load("resnet20", pretrained=False, in_chans=1, num_classes=3, drop_rate=0.3)
        g = torch.Generator().manual_seed(1)
        x, y = torch.randn(28, 1, 8, 8, generator=g), torch.randint(0, 3, (28,), generator=g)
        step, calls = ClassificationStep(label_smoothing=0.1), [0]
        def killing_step(model, batch):
            calls[0] += 1
            if calls[0] == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)
            return step(model, batch)
        config = TrainConfig(epochs=2, batch_size=4, optimizer="sgd", lr=0.05, scheduler="cosine", warmup_epochs=0.5,
                             ema_decay=0.8, checkpoint_every=4, out_dir=out, resume=True,
                             progress=False, tensorboard=False, plot=False)
        trainer = Trainer(model, config, step_fn=killing_step, eval_step_fn=ClassificationStep())
        trainer.fit(Flips(x[:24], y[:24]), Flips(x[24:], y[24:]))
        return model, trainer

    def save(out, model, trainer):
        torch.save({"model": model.state_dict(), "ema": trainer.ema.state_dict(), "history": trainer.state.history},
                   os.path.join(out, "final.pt"))

    if __name__ == "__main__":
        save(sys.argv[1], *main(sys.argv[1], int(sys.argv[2])))
    """
)


def load_script(path: Path, text: str):
    """Write a script and import it, to run its main() in this process too."""
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_resume_after_sigkill_matches_uninterrupted_run(tmp_path: Path) -> None:
    script = tmp_path / "run_resume.py"
    module = load_script(script, RESUME_SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(REPO)}

    def run(out: Path, kill_at: int) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, str(script), str(out), str(kill_at)], env=env, capture_output=True, text=True, timeout=300
        )

    # 6 steps per epoch, a checkpoint every 4 steps and at each epoch end; the process kills
    # itself with SIGKILL during step 11 (epoch 2), so the resume starts mid-epoch from step 8.
    killed = run(tmp_path / "b", kill_at=11)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    checkpoint = torch.load(tmp_path / "b/checkpoints/last.pt", weights_only=True)
    assert checkpoint["state"]["global_step"] == 8 and checkpoint["state"]["batches_done"] == 2
    resumed = run(tmp_path / "b", kill_at=0)
    assert resumed.returncode == 0, resumed.stderr
    module.save(tmp_path / "a", *module.main(str(tmp_path / "a"), 0))  # the uninterrupted run, in this process

    a, b = (torch.load(tmp_path / d / "final.pt", weights_only=True) for d in ("a", "b"))
    for part in ("model", "ema"):
        for key, value in a[part].items():
            assert torch.equal(value, b[part][key]), f"{part}.{key} differs after resume"
    assert [row["train_loss"] for row in a["history"]] == pytest.approx([row["train_loss"] for row in b["history"]])
    # wall time adds up over the killed and the resumed process
    assert 0 < b["history"][0]["elapsed_s"] <= checkpoint["state"]["elapsed_s"] < b["history"][1]["elapsed_s"]


DISTRIBUTED_SCRIPT = textwrap.dedent(
    """
    import os
    import sys
    import torch
    import torch.nn as nn
    import zoo
    from zoo.training.loop.records.checkpoint import full_model_state
    from zoo.training.loop.trainer import Trainer, TrainConfig

    def main(kind, batch_size):
        torch.set_num_threads(1)
        torch.manual_seed(0)
        if kind == "fsdp":  # the MoE transformer, sharded block by block
            model = zoo.load("moe_vit", pretrained=False, num_classes=3, img_size=8, patch_size=4, hidden_size=32,
                             num_layers=2, num_heads=2, num_kv_heads=2, intermediate_size=32, num_experts=4,
                             router_aux_loss_coef=0.0, router_z_loss_coef=0.0)
            # the routing losses are batch statistics (like BatchNorm's): off, so half batches add up
        else:
            model = zoo.load("resnet20", pretrained=False, in_chans=1, num_classes=3)
            for m in model.modules():
                if isinstance(m, nn.BatchNorm2d):
                    m.requires_grad_(False)  # batch statistics differ per process; frozen BN doesn't use them
        g = torch.Generator().manual_seed(1)
        data = torch.utils.data.TensorDataset(torch.randn(32, 1, 8, 8, generator=g), torch.randint(0, 3, (32,), generator=g))
        sharded = kind == "fsdp" and os.environ.get("WORLD_SIZE") == "2"
        config = TrainConfig(max_steps=3, batch_size=batch_size, accum_steps=2, optimizer="sgd", lr=0.1, weight_decay=1e-3,
                             scheduler="none", distributed="fsdp" if sharded else "auto",
                             progress=False, tensorboard=False, plot=False)
        trainer = Trainer(model, config)
        trainer.fit(data, data)
        state = full_model_state(trainer.wrapped, sharded=trainer.fsdp)
        return {"model": state, "world": trainer.world_size, "val_acc": trainer.state.history[-1]["val_acc"]}, trainer.rank

    if __name__ == "__main__":
        result, rank = main(sys.argv[1], int(sys.argv[2]))
        if rank == 0:
            torch.save(result, sys.argv[3])
    """
)


@pytest.mark.parametrize("kind", ["ddp", "fsdp"])
def test_two_process_gloo_equals_one_process(kind: str, tmp_path: Path) -> None:
    """DDP on resnet20 (BatchNorm frozen) and FSDP2 on the MoE ViT, 2 Gloo processes with
    half the batch each, against one process with the whole batch."""
    script = tmp_path / "run_distributed.py"
    module = load_script(script, DISTRIBUTED_SCRIPT)
    one, _ = module.main(kind, 4)  # one process, batch 4 x 2 micro-batches
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    double = subprocess.run(
        [*torchrun, str(script), kind, "2", str(tmp_path / "two.pt")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert double.returncode == 0, double.stderr[-3000:]
    two = torch.load(tmp_path / "two.pt", weights_only=True)
    assert one["world"] == 1 and two["world"] == 2
    assert one["val_acc"] == two["val_acc"]
    for key, value in one["model"].items():
        torch.testing.assert_close(two["model"][key], value, rtol=1e-5, atol=1e-6, msg=key)
