"""Per-image preprocessing, side by side in one process: zoo's pipeline for a model's
preprocessing (`zoo.loading.transforms.build_transforms`: `ConvertChannels`, `ResizeIfNeeded`,
`ToNormalized`) against the torchvision v2 pipeline a user would write for the same
preprocessing (``Resize``, ``ToImage``, ``ToDtype(scale=True)``, ``Normalize``), on the same uint8
images, one image at a time as a DataLoader's worker calls them. Every image's output is
checked bit for bit before anything is timed. Prints the machine, the median microseconds per
image over interleaved rounds (`zoo.deploy.bench.time_in_turn`) and zoo's ratio to torchvision.

    .venv/bin/python benchmarks/preprocess_speed.py [--rounds 15] [--images 256] [--csv OUT.csv]
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

import torch
from torchvision.transforms import v2

from zoo.bounds import count
from zoo.deploy.bench import load_average, machine_line, time_in_turn
from zoo.loading.transforms import build_transforms

# (name, images' shape, preprocess): at the model's size (Fashion-MNIST on a model trained on
# it), and two that do resize (a larger gray image, an RGB photo for an ImageNet model)
CASES = [
    ("28x28 gray, kept at 28x28", (1, 28, 28), {"resize": [28, 28], "mean": [0.5], "std": [0.5]}),
    ("28x28 gray, resized to 32", (1, 28, 28), {"resize": 32, "mean": [0.5], "std": [0.5]}),
    (
        "3x256x256, resize 232, crop 224",
        (3, 256, 256),
        {"resize": 232, "crop": 224, "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]},
    ),
]


def torchvision_pipeline(preprocess: dict) -> v2.Compose:
    steps = [v2.Resize(preprocess["resize"], antialias=True)]
    steps += [v2.CenterCrop(preprocess["crop"])] if "crop" in preprocess else []
    steps += [v2.ToImage(), v2.ToDtype(torch.float32, scale=True), v2.Normalize(preprocess["mean"], preprocess["std"])]
    return v2.Compose(steps)


def each_image(transform: Callable) -> Callable[[torch.Tensor], list]:
    return lambda images: [transform(image) for image in images]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=count(1, 1000).parse, default=15)
    parser.add_argument("--images", type=count(1, 100_000).parse, default=256, help="images per round")
    parser.add_argument("--threads", type=count(1, 1024).parse, default=1, help="torch threads (a worker's: 1)")
    parser.add_argument("--csv", type=Path)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(machine_line())
    rows = []
    for name, shape, preprocess in CASES:
        images = torch.randint(
            0, 256, (args.images, *shape), dtype=torch.uint8, generator=torch.Generator().manual_seed(0)
        )
        zoo_tf, theirs = build_transforms(preprocess), torchvision_pipeline(preprocess)
        for image in images[:32]:
            assert torch.equal(zoo_tf(image), theirs(image).as_subclass(torch.Tensor)), name  # the same numbers
        times = time_in_turn({"zoo": each_image(zoo_tf), "torchvision": each_image(theirs)}, images, args.rounds)
        us = {variant: statistics.median(t) / args.images * 1e6 for variant, t in times.items()}
        per_round = [z / t for z, t in zip(times["torchvision"], times["zoo"])]
        rows.append(
            {"images": name, "zoo_us": f"{us['zoo']:.1f}", "torchvision_us": f"{us['torchvision']:.1f}",
             "zoo_speedup": f"{us['torchvision'] / us['zoo']:.2f}",
             "speedup_rounds_min_max": f"{min(per_round):.2f}-{max(per_round):.2f}"}
        )  # fmt: skip
        print(f"  {name:<34} zoo {us['zoo']:7.1f} us  torchvision {us['torchvision']:7.1f} us  "
              f"zoo {us['torchvision'] / us['zoo']:.2f}x (rounds {min(per_round):.2f}-{max(per_round):.2f}x)")  # fmt: skip
    print(
        f"{args.rounds} interleaved rounds of {args.images} images, {args.threads} thread(s); load average now {load_average()}"
    )
    if args.csv:
        args.csv.parent.mkdir(parents=True, exist_ok=True)
        with open(args.csv, "w", newline="") as file:
            writer = csv.DictWriter(file, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
