"""`zoo serve` as Ray Serve replicas: a local Ray cluster of 2 CPUs, 2 replicas of the same app
behind Ray Serve's proxy on 127.0.0.1; concurrent clients get the model's own answers."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pytest
import torch
from serve_support import free_port

import zoo
import zoo.serve

ray = pytest.importorskip("ray")
serve = pytest.importorskip("ray.serve")
IMAGES = "resnet20.fmnist"


def test_two_ray_serve_replicas_answer_as_the_model_does(monkeypatch: pytest.MonkeyPatch) -> None:
    from zoo.serve.ray_serve import run_ray, shutdown_ray

    # Ray Serve waits a fixed 60 s for its HTTP proxy to start (no setting changes it): beside two busy
    # processes and a test run, on 2 cores, that start took longer; a generous ceiling, not a wait
    monkeypatch.setattr("ray.serve._private.api.HTTP_PROXY_TIMEOUT", 300)
    port = free_port()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        run_ray(zoo.serve.ray_deployment(IMAGES, replicas=2, max_wait_ms=2), "127.0.0.1", port)
        status = serve.status().applications["zoo"].deployments["zoo-serve"]
        assert status.replica_states == {"RUNNING": 2}
        url = f"http://127.0.0.1:{port}"
        rows = torch.rand(24, 1, 28, 28) * 2 - 1
        with torch.no_grad():
            expected = zoo.load(IMAGES)(rows).numpy()

        def infer(i: int) -> np.ndarray:
            body = {"inputs": [{"name": "input", "shape": [1, 1, 28, 28], "datatype": "FP32",
                                "data": rows[i].flatten().tolist()}]}  # fmt: skip
            answer = httpx.post(f"{url}/v2/models/{IMAGES}/infer", json=body, timeout=60)
            assert answer.status_code == 200, answer.text
            return np.asarray(answer.json()["outputs"][0]["data"], np.float32)

        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(infer, range(len(rows))))
        np.testing.assert_allclose(np.stack(answers), expected, rtol=1e-4, atol=1e-4)
        bad = httpx.post(f"{url}/v2/models/{IMAGES}/infer", content=b"{", timeout=30)
        assert bad.status_code == 400 and "Invalid JSON" in bad.json()["error"]
    finally:
        shutdown_ray()
