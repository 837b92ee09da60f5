"""`zoo serve` under a bounded load, dynamic batching on against one request at a time.

For each mode a fresh ``zoo serve resnet20.fmnist`` process listens on 127.0.0.1; 32
concurrent clients (asyncio, one httpx connection each) send 2,000 single-image Open Inference
Protocol v2 requests (binary tensor extension, real Fashion-MNIST test images) after 64
warm-up requests, through tritonclient's asyncio client. The table gives requests/s, p50/p99 latency and the mean rows per forward
(from the server's /metrics), then the ratio and the machine. "off" is ``--max-batch 1``;
"on" is ``--max-batch 32 --max-wait-ms 2``. Issue's goal: on >= 3x off at 32 clients.

``--completions``: the same against ``zoo serve moe_lm.stdlib``, each client asking OpenAI's
``POST /v1/completions`` for ``--max-tokens`` new tokens of a prompt of its own (temperature
0.8, a seed per request): completions whose sampling agrees share one batched generation.

    .venv/bin/python benchmarks/serve.py [--clients 32] [--requests 2000] [--optimize auto]
    .venv/bin/python benchmarks/serve.py --completions [--clients 16] [--requests 64] [--max-tokens 64]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import httpx
import numpy as np
import torch
import tritonclient.http.aio as triton
from prometheus_client.parser import text_string_to_metric_families

import zoo
from zoo.training.data.builtin import load_fashion_mnist

MODEL, LM = "resnet20.fmnist", "moe_lm.stdlib"
PROMPTS = ["def ", "class ", "import ", "for i in ", "    return ", "# ", "if x:", "while "]
MODES = {
    "off (one at a time)": ["--max-batch", "1"],
    "on (dynamic batching)": ["--max-batch", "32", "--max-wait-ms", "2"],
}


def _images(count: int) -> list[np.ndarray]:
    """``count`` preprocessed Fashion-MNIST test images, each a (1, 1, 28, 28) float32 batch."""
    images, _ = load_fashion_mnist("test")
    preprocess = zoo.transforms(zoo.load(MODEL))
    return [preprocess(images[i].unsqueeze(0)).unsqueeze(0).numpy() for i in range(count)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(model: str, flags: list[str], optimize: str | None, threads: int | None) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    command = [sys.executable, "-m", "zoo", "serve", model, "--port", str(port), *flags]
    command += ["--optimize", optimize] if optimize else []
    command += ["--threads", str(threads)] if threads else []
    log = tempfile.TemporaryFile("w+")
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and process.poll() is None:
        try:
            if httpx.get(f"{url}/v2/health/ready", timeout=1).status_code == 200:
                return process, url
        except httpx.TransportError:
            time.sleep(0.2)
    process.kill()
    log.seek(0)
    raise RuntimeError(f"zoo serve did not become ready ({' '.join(command)}):\n{log.read()[-3000:]}")


async def _load(url: str, images: list[np.ndarray], clients: int, total: int) -> tuple[list[float], float]:
    """Latencies (s) of ``total`` requests from ``clients`` concurrent clients, and the wall time.
    tritonclient's asyncio client (aiohttp) sends each image as a binary tensor."""
    latencies: list[float] = []
    next_request = iter(range(total))
    async with triton.InferenceServerClient(url.removeprefix("http://"), conn_limit=clients) as server:

        async def client() -> None:
            for i in next_request:
                tensor = triton.InferInput("input", [1, 1, 28, 28], "FP32")
                tensor.set_data_from_numpy(images[i % len(images)], binary_data=True)
                start = time.perf_counter()
                await server.infer(MODEL, [tensor])  # raises on any answer but 200
                latencies.append(time.perf_counter() - start)

        start = time.perf_counter()
        await asyncio.gather(*(client() for _ in range(clients)))
    return latencies, time.perf_counter() - start


async def _load_completions(url: str, clients: int, total: int, max_tokens: int) -> tuple[list[float], float]:
    """Latencies (s) of ``total`` completions of ``max_tokens`` tokens from ``clients``
    concurrent clients, and the wall time."""
    latencies: list[float] = []
    next_request = iter(range(total))
    async with httpx.AsyncClient(base_url=url, timeout=600) as http:

        async def client() -> None:
            for i in next_request:
                body = {"model": LM, "prompt": PROMPTS[i % len(PROMPTS)], "max_tokens": max_tokens}
                start = time.perf_counter()
                answer = await http.post("/v1/completions", json={**body, "temperature": 0.8, "seed": i})
                answer.raise_for_status()
                latencies.append(time.perf_counter() - start)

        start = time.perf_counter()
        await asyncio.gather(*(client() for _ in range(clients)))
    return latencies, time.perf_counter() - start


def _mean_batch(url: str) -> float:
    families = {f.name: f for f in text_string_to_metric_families(httpx.get(f"{url}/metrics").text)}
    samples = {s.name: s.value for s in families["zoo_serve_batch_size"].samples if not s.name.endswith("_bucket")}
    return samples["zoo_serve_batch_size_sum"] / max(1.0, samples["zoo_serve_batch_size_count"])


def _measure(flags: list[str], args: argparse.Namespace, images: list[np.ndarray]) -> dict[str, float]:
    process, url = _start(LM if args.completions else MODEL, flags, args.optimize, args.threads)

    def load(total: int) -> tuple[list[float], float]:
        if args.completions:
            return asyncio.run(_load_completions(url, args.clients, total, args.max_tokens))
        return asyncio.run(_load(url, images, args.clients, total))

    try:
        load(min(64, args.requests))  # warm-up
        latencies, seconds = load(args.requests)
        batch = _mean_batch(url)
    finally:
        process.terminate()
        process.wait(timeout=60)
    cuts = statistics.quantiles(latencies, n=100)
    return {
        "rps": len(latencies) / seconds,
        "p50": cuts[49] * 1000,
        "p99": cuts[98] * 1000,
        "batch": batch,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--threads", type=int, help="zoo serve --threads: torch threads for the server's forwards")
    parser.add_argument("--optimize", choices=("auto", "fp32", "bf16", "int8"), help="serve through zoo.optimize")
    parser.add_argument("--completions", action="store_true", help=f"completions of {LM} instead of images")
    parser.add_argument("--max-tokens", type=int, default=64, help="new tokens per completion (--completions)")
    args = parser.parse_args()
    if not 1 <= args.clients <= 256 or not 1 <= args.requests <= 100_000:
        parser.error("the load is bounded: 1-256 clients, 1-100000 requests")
    images = [] if args.completions else _images(256)
    load = os.getloadavg()[0]
    rows = {mode: _measure(flags, args, images) for mode, flags in MODES.items()}
    what = (
        f"{LM}, completions of {args.max_tokens} tokens at temperature 0.8"
        if args.completions
        else f"{MODEL}, v2 binary, one image each"
    )
    print(
        f"zoo serve {what}: {args.clients} clients, {args.requests} requests, "
        f"{'eager' if not args.optimize else 'optimize=' + args.optimize}"
    )
    print(f"{'batching':<24}{'requests/s':>12}{'p50 ms':>10}{'p99 ms':>10}{'rows/forward':>14}")
    for mode, row in rows.items():
        print(f"{mode:<24}{row['rps']:>12.1f}{row['p50']:>10.1f}{row['p99']:>10.1f}{row['batch']:>14.1f}")
    off, on = rows.values()
    tokens = f", {on['rps'] * args.max_tokens:.0f} against {off['rps'] * args.max_tokens:.0f} tokens/s"
    print(
        f"ratio on/off: {on['rps'] / off['rps']:.2f}x requests/s" + (tokens if args.completions else " (goal: >= 3x)")
    )
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}, "
        f"cpu capability {torch.backends.cpu.get_cpu_capability()}, {args.threads or torch.get_num_threads()} torch threads in the server "
        f"(server and clients share the cores); load average {load:.1f} before the run"
    )


if __name__ == "__main__":
    main()
