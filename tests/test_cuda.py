"""The CUDA paths, run where a GPU is present (skipped elsewhere, CI included): `zoo.optimize`
on a GPU (fp16 / bf16 autocast + compile) agrees with fp32 eager on real Fashion-MNIST images
and reports what it measured, int8 is refused by name, `zoo predict --device cuda --optimize`
runs, and the compiled decode step of `generate` gives eager's tokens."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from PIL import Image

import zoo
from zoo.cli import main
from zoo.devices import model_device
from zoo.errors import InvalidArgumentError
from zoo.tokenizer import ByteTokenizer
from zoo.training.data.builtin import load_fashion_mnist

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
BATCH = 64


@pytest.fixture(scope="module")
def fmnist_images() -> torch.Tensor:
    """512 Fashion-MNIST test images, uint8 (512, 1, 28, 28)."""
    images, _ = load_fashion_mnist("test")
    return images[:512, None]


def _agreement(model: torch.nn.Module, optimized: torch.nn.Module, x: torch.Tensor) -> float:
    with torch.no_grad():
        expected, actual = model(x), optimized(x)
    assert actual.dtype == torch.float32 and actual.device == x.device  # autocast's output comes back as fp32
    return (expected.argmax(-1) == actual.argmax(-1)).float().mean().item()


@pytest.mark.parametrize("name", ["resnet20.fmnist", "moe_vit.fmnist"])
def test_auto_on_cuda_measures_fp16_and_bf16_and_keeps_top1(name: str, fmnist_images: torch.Tensor) -> None:
    model = zoo.load(name, device="cuda")
    batches = list(zoo.transforms(model)(fmnist_images).cuda().split(BATCH))
    optimized = zoo.optimize(model, batches[0], calibration=batches, repeats=5)
    report = optimized.optimize_report
    print(f"\n{name}, batch {BATCH}, {torch.cuda.get_device_name()}:\n{report}")
    ran = {c.name: c for c in report.candidates if c.median_s is not None}
    assert {"eager", "channels_last", "fp32", "fp16"} <= set(ran)
    assert ("bf16" in ran) == torch.cuda.is_bf16_supported()
    for precision in ("fp32", "fp16", "bf16"):
        if precision in ran:
            assert ran[precision].top1_agreement >= 0.99, (precision, ran[precision])
    assert report.device.startswith("cuda") and "int8" in {c.name for c in report.candidates if c.median_s is None}
    assert _agreement(model, optimized, batches[1]) >= 0.99
    assert _agreement(model, optimized, batches[2][:5]) >= 0.99  # another batch size: padded onto a graph, or compiled


def test_explicit_fp16_on_cuda_and_int8_refused(fmnist_images: torch.Tensor) -> None:
    model = zoo.load("resnet20.fmnist", device="cuda")
    x = zoo.transforms(model)(fmnist_images[:BATCH]).cuda()
    optimized = zoo.optimize(model, x, "fp16", repeats=3)
    assert optimized.optimize_report.precision == "fp16" and _agreement(model, optimized, x) >= 0.99
    with pytest.raises(InvalidArgumentError, match="int8 .* runs on the CPU"):
        zoo.optimize(model, x, "int8")


def test_predict_on_cuda_with_optimize(
    tmp_path: Path, fmnist_images: torch.Tensor, capsys: pytest.CaptureFixture
) -> None:
    paths = []
    for index, image in enumerate(fmnist_images[:10, 0]):
        paths.append(tmp_path / f"{index}.png")
        Image.fromarray(image.numpy()).save(paths[-1])
    files = [str(p) for p in paths]
    assert main(["predict", "resnet20.fmnist", *files, "--device", "cuda", "--topk", "1"]) == 0
    eager = capsys.readouterr().out
    assert (
        main(
            [
                "predict",
                "resnet20.fmnist",
                *files,
                "--device",
                "cuda",
                "--topk",
                "1",
                "--optimize",
                "fp16",
                "--batch-size",
                "4",
            ]
        )
        == 0
    )  # batches 4, 4, 2: the last one padded onto the first's graph
    captured = capsys.readouterr()
    assert "chose fp16" in captured.err and "on cuda" in captured.err

    def classes(out: str) -> list[str]:
        return [line.split(None, 1)[1] for line in out.splitlines() if line.startswith("  ")]

    assert len(classes(eager)) == 10 and classes(captured.out) == classes(eager)


def test_compiled_decode_step_on_cuda_gives_eager_tokens() -> None:
    model = zoo.load("moe_lm.stdlib", device="cuda")
    tokenizer = ByteTokenizer()
    rows = [[tokenizer.eos_token_id, *tokenizer.encode(p)] for p in ("import os\n\ndef main(", "    return self.")]
    length = max(map(len, rows))
    ids = torch.tensor([[tokenizer.pad_token_id] * (length - len(r)) + r for r in rows], device="cuda")
    mask = torch.tensor([[0] * (length - len(r)) + [1] * len(r) for r in rows], device="cuda")
    eager = model.generate(ids, 48, temperature=0, attention_mask=mask, compile=False)
    compiled = model.generate(ids, 48, temperature=0, attention_mask=mask)  # "auto" compiles off the CPU
    assert model_device(model).type == "cuda" and compiled.device.type == "cuda"
    assert torch.equal(eager, compiled), tokenizer.decode(compiled[0].tolist())
    # and a second call (a new cache, the weights laid out anew: a graph of its own), at batch 1
    one = model.generate(ids[1:, -6:], 40, temperature=0, compile=False)
    assert torch.equal(model.generate(ids[1:, -6:], 40, temperature=0), one)


def test_compiled_training_on_cuda_replays_cuda_graphs_and_learns() -> None:
    """compile=True on one GPU trains under "reduce-overhead" (CUDA graphs): the same first
    epoch's loss as eager from the same weights and batches, and a falling loss over 30 steps."""
    from zoo.training.loop.speed import compile_mode
    from zoo.training.loop.trainer import TrainConfig, Trainer

    images, labels = load_fashion_mnist("train")
    data = torch.utils.data.TensorDataset(images[:384, None].float().div(255), labels[:384])
    losses = {}
    for compiled in (False, True):
        torch.manual_seed(0)
        model = zoo.load("resnet20", pretrained=False, in_chans=1, num_classes=10)
        config = TrainConfig(
            epochs=10,
            batch_size=128,
            lr=0.05,
            optimizer="sgd",
            scheduler="none",
            precision="fp32",
            compile=compiled,
            device="cuda",
            seed=0,
            progress=False,
            tensorboard=False,
            plot=False,
        )
        trainer = Trainer(model, config)
        if compiled:
            assert compile_mode(trainer) == "reduce-overhead"
        history = trainer.fit(data)
        losses[compiled] = [h["train_loss"] for h in history]
    assert all(torch.isfinite(torch.tensor(v)).all() for v in losses.values())
    assert losses[True][-1] < 0.7 * losses[True][0], losses
    assert abs(losses[True][0] - losses[False][0]) < 0.05 * losses[False][0], losses
