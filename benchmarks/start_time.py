"""Start-up time of zoo's light entry points against ``python -c "import torch"``, side by side.

Each command runs as a fresh process, in turn with the others (interleaved rounds), ``--repeats``
times; the table gives each one's median wall time, its ratio to ``import torch`` and the
target it has (issue: `zoo list` at most 1.5x import torch, `zoo --help` under 0.5 s,
`import zoo` at most 1.2x import torch, `zoo predict resnet20.fmnist IMAGE` at most 1.15x importing
torch and torchvision's transforms, which its preprocessing needs anyway).

    .venv/bin/python benchmarks/start_time.py [--repeats 5] [--python .venv/bin/python]

``--python`` names another interpreter (another checkout's venv) to measure, e.g. before a change.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

ZOO_MAIN = "import sys; from zoo.cli import main; sys.exit(main())"
COMMANDS = {  # label -> (python arguments, target: ("ratio", x) to import torch, or ("seconds", s))
    "python -c 'import torch'": (["-c", "import torch"], None),
    "python -c 'import zoo'": (["-c", "import zoo"], ("ratio", 1.2)),
    "zoo --help": (["-c", ZOO_MAIN, "--help"], ("seconds", 0.5)),
    "zoo list": (["-c", ZOO_MAIN, "list"], ("ratio", 1.5)),
    "zoo info resnet20": (["-c", ZOO_MAIN, "info", "resnet20"], ("ratio", 1.5)),
    # what `zoo predict` needs anyway (torch and torchvision's transforms), then zoo predict itself
    "import torch + transforms.v2": (["-c", "import torch, torchvision.transforms.v2"], None),
    "zoo predict resnet20.fmnist": (["-c", ZOO_MAIN, "predict", "resnet20.fmnist", "IMAGE"], ("predict", 1.15)),
}
IMAGE = os.path.join(tempfile.gettempdir(), "zoo-start-time.png")  # a 28x28 gray image, written once


def _run(python: str, arguments: list[str]) -> float:
    """Seconds of one fresh process, run outside any checkout (``-c`` puts the working folder first on sys.path)."""
    arguments = [IMAGE if a == "IMAGE" else a for a in arguments]
    start = time.perf_counter()
    subprocess.run(
        [python, *arguments],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=tempfile.gettempdir(),
    )
    return time.perf_counter() - start


def measure(python: str, repeats: int) -> dict[str, float]:
    """Median seconds of each command, from ``repeats`` interleaved rounds (one warm-up round first)."""
    times: dict[str, list[float]] = {label: [] for label in COMMANDS}
    for round_ in range(repeats + 1):
        for label, (arguments, _) in COMMANDS.items():
            seconds = _run(python, arguments)
            if round_:
                times[label].append(seconds)
    return {label: statistics.median(values) for label, values in times.items()}


def _verdict(target: tuple[str, float] | None, seconds: float, ratio: float) -> str:
    if target is None:
        return "(reference)"
    kind, limit = target
    value = ratio if kind in ("ratio", "predict") else seconds
    unit = {"ratio": "x torch", "predict": "x torch+transforms", "seconds": " s"}[kind]
    return f"{'meets' if value <= limit else 'MISSES'} target <= {limit}{unit}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--python", default=sys.executable, help="the interpreter whose zoo is measured")
    args = parser.parse_args()
    from PIL import Image

    Image.new("L", (28, 28), 128).save(IMAGE)
    medians = measure(args.python, args.repeats)
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs; python: {args.python}; "
        f"medians of {args.repeats} interleaved rounds"
    )
    print(f"{'command':<28}{'median s':>10}{'x torch':>10}  target")
    for label, (_, target) in COMMANDS.items():
        reference = "import torch + transforms.v2" if target and target[0] == "predict" else "python -c 'import torch'"
        ratio = medians[label] / medians[reference]
        print(f"{label:<28}{medians[label]:>10.3f}{ratio:>10.2f}  {_verdict(target, medians[label], ratio)}")


if __name__ == "__main__":
    main()
