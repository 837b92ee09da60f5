"""Warm-cache load time: `zoo.load("resnet50.tv_in1k")` against
`torchvision.models.resnet50(weights=ResNet50_Weights.IMAGENET1K_V1)`, side by side.

No internet here, so both caches are filled with the same randomly initialised checkpoint:
torchvision's under $TORCH_HOME/hub/checkpoints/ with its published file name, zoo's through its
real download path from a local HTTP server (the entry re-pointed there, with the file's hash).
Each timed call is a fresh load from a warm cache (zoo re-verifies its file every time).

    .venv/bin/python benchmarks/load_time.py [--repeats 9]
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import hashlib
import http.server
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path

import torch
import torchvision


def _serve(directory: Path) -> tuple[http.server.ThreadingHTTPServer, str]:
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args()
    torch.set_num_threads(os.cpu_count() or 1)

    work = Path(tempfile.mkdtemp(prefix="zoo-bench-"))
    os.environ["ZOO_HOME"] = str(work / "zoo")
    os.environ["TORCH_HOME"] = str(work / "torch")
    import zoo
    from zoo.store import weight_entries

    weights = torchvision.models.ResNet50_Weights.IMAGENET1K_V1
    published = Path(weights.url).name
    checkpoints = work / "torch" / "hub" / "checkpoints"
    checkpoints.mkdir(parents=True)
    torch.save(torchvision.models.resnet50().state_dict(), checkpoints / published)
    data = (checkpoints / published).read_bytes()
    served = work / "served"
    served.mkdir()
    (served / f"resnet50-{hashlib.sha256(data).hexdigest()[:8]}.pth").write_bytes(data)
    server, base = _serve(served)
    entry = weight_entries.info("resnet50.tv_in1k")
    prefix = hashlib.sha256(data).hexdigest()[:8]
    weight_entries.register_weights(dataclasses.replace(entry, url=f"{base}/resnet50-{prefix}.pth", sha256=prefix))
    zoo.load("resnet50.tv_in1k")  # warm zoo's cache: download, verify, convert to safetensors once
    server.shutdown()
    server.server_close()
    os.environ["ZOO_OFFLINE"] = "1"

    def load_zoo() -> torch.nn.Module:
        return zoo.load("resnet50.tv_in1k")

    def load_torchvision() -> torch.nn.Module:
        return torchvision.models.resnet50(weights=weights).eval()

    ours, theirs = load_zoo().state_dict(), load_torchvision().state_dict()
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours), "loads differ"

    times: dict[str, list[float]] = {"zoo": [], "torchvision": []}
    for _ in range(args.repeats):
        for name, load in (("zoo", load_zoo), ("torchvision", load_torchvision)):
            start = time.perf_counter()
            load()
            times[name].append(time.perf_counter() - start)
    zoo_s, tv_s = statistics.median(times["zoo"]), statistics.median(times["torchvision"])
    print(
        f"resnet50 warm-cache load, median of {args.repeats} (torch {torch.__version__}, {torch.get_num_threads()} threads)"
    )
    print(
        f"  zoo.load('resnet50.tv_in1k')                  {zoo_s * 1000:7.1f} ms  (verifies sha256 record, safetensors)"
    )
    print(f"  torchvision.models.resnet50(weights=V1)       {tv_s * 1000:7.1f} ms  (random init, then pickle load)")
    print(f"  ratio torchvision / zoo                       {tv_s / zoo_s:7.2f}x")


if __name__ == "__main__":
    main()
