"""The main job, until the transfer-learning demo lands: the registry, a weight entry, the
verified loading path (offline-aware), a fine-tuning head and one forward pass on real data."""
from __future__ import annotations

import tempfile
import time

import torch

import zoo
from training.data import FASHION_MNIST_CLASSES, load_fashion_mnist
from zoo import hub


def main() -> None:
    print(f"zoo {zoo.__version__}: {len(zoo.list_models())} architectures, "
          f"{len(zoo.list_models(pretrained=True))} weight entries")
    print("architectures:", ", ".join(zoo.list_models()))
    print("weights:      ", ", ".join(zoo.list_models(pretrained=True)))

    info = zoo.info("resnet50")
    print(f"\ndefault weights of resnet50: {info.name} from {info.url}")
    print(f"  sha256 prefix {info.sha256}, {info.num_params:,} params, ImageNet top-1 {info.metrics['imagenet-1k']['top1']}")
    try:
        model = zoo.load(info.name, num_classes=10)
        print(f"  loaded {info.name} with a fresh 10-way head")
    except hub.WeightsError as error:  # no internet on this machine: say so and go on without weights
        print(f"  cannot get {info.name} here ({type(error).__name__}): {str(error).splitlines()[0]}")
        model = zoo.load("resnet50", pretrained=False, num_classes=10)
        print("  built resnet50 without pretrained weights instead")

    images, labels = load_fashion_mnist("test")
    batch = images[:16, None].float().div(255).expand(-1, 3, -1, -1)
    batch = torch.nn.functional.interpolate(batch, size=64, mode="bilinear")
    start = time.perf_counter()
    with torch.inference_mode():
        logits = model(batch)
    print(f"\nresnet50 forward on 16 Fashion-MNIST images at 64 px: {tuple(logits.shape)} "
          f"in {time.perf_counter() - start:.2f} s")

    small = zoo.load("resnet20", pretrained=False, in_chans=1, num_classes=10)
    with torch.inference_mode():
        predictions = small(images[:8, None].float().div(255)).argmax(-1)
    print(f"resnet20 (1 channel, 28 px, {sum(p.numel() for p in small.parameters()):,} params), untrained guesses:")
    for label, guess in zip(labels[:8].tolist(), predictions.tolist()):
        print(f"  true {FASHION_MNIST_CLASSES[label]:<12} guessed {FASHION_MNIST_CLASSES[guess]}")

    with tempfile.TemporaryDirectory() as directory:
        zoo.save(small, directory)
        restored = zoo.load(directory)
        same = torch.equal(restored(images[:8, None].float().div(255)), small(images[:8, None].float().div(255)))
        print(f"\nzoo.save + zoo.load({directory!r}) restores the model exactly: {same}")


if __name__ == "__main__":
    main()
