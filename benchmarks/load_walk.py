"""The walk from a load call to the first line of model code, traced as for the peers: the
distinct named functions of the library's own package entered after the call and before the
first frame in its model files (comprehensions, lambdas and dunder methods left out), on a warm
load (modules imported, weights cached and verified once).

    python benchmarks/load_walk.py            # zoo.load vs timm.create_model vs torchvision get_model
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable


def walk(call: Callable[[], object], package: str, model_files: tuple[str, ...]) -> list[str]:
    """The stays: ``package``'s functions entered by ``call`` before a frame in ``model_files``."""
    stays: list[str] = []
    done = False

    def profile(frame, event, arg):  # noqa: ANN001 (sys.setprofile's signature)
        nonlocal done
        if done or event != "call":
            return
        where, name = frame.f_code.co_filename, frame.f_code.co_name
        if any(part in where for part in model_files):
            done = True
        elif package in where and not name.startswith("<") and not (name.startswith("__") and name.endswith("__")):
            stay = f"{os.path.relpath(where)}:{name}"
            if stay not in stays:
                stays.append(stay)

    call()  # warm: imports, downloads and verification records done
    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
    return stays


def main() -> None:
    import timm
    import torchvision

    import zoo

    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    walks = {
        'zoo.load("resnet20.fmnist")': walk(
            lambda: zoo.load("resnet20.fmnist"), os.path.join(here, "zoo"), (os.path.join(here, "architectures"),)
        ),
        'timm.create_model("resnet50")': walk(
            lambda: timm.create_model("resnet50"), "timm/models/_", ("timm/models/resnet.py",)
        ),
        'torchvision.models.get_model("resnet50")': walk(
            lambda: torchvision.models.get_model("resnet50"),
            "torchvision/models/_api",
            ("torchvision/models/resnet.py",),
        ),
    }
    for call, stays in walks.items():
        print(f"{call}: {len(stays)} stays")
        for stay in stays:
            print(f"    {stay}")


if __name__ == "__main__":
    main()
