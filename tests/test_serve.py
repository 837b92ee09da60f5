"""`zoo serve` against clients written elsewhere: tritonclient (Open Inference Protocol v2,
JSON and binary tensors), the openai client (completions, streamed and not), httpx for the
convenience routes, prometheus_client's parser for /metrics; every answer checked against the
model's own output, every bad request against its 4xx. One real uvicorn server on 127.0.0.1."""

from __future__ import annotations

import argparse
import io
import json
import random
import re
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import openai
import pytest
import torch
import tritonclient.http as triton
from PIL import Image
from prometheus_client.parser import text_string_to_metric_families
from serve_support import fashion_mnist_pngs, running
from tritonclient.utils import InferenceServerException

import zoo
import zoo.serve
from zoo.cli.commands import run_predict
from zoo.errors import InvalidArgumentError
from zoo.serve.serve_options import ServeConfig
from zoo.tokenizer import complete

IMAGES, TEXT = "resnet20.fmnist", "moe_lm.stdlib"


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    app = zoo.serve.app(IMAGES, TEXT, max_batch=16, max_wait_ms=5, max_body_bytes=2 * 2**20)
    with running(app) as url:
        yield url


@pytest.fixture(scope="module")
def models() -> dict[str, torch.nn.Module]:
    return {IMAGES: zoo.load(IMAGES), TEXT: zoo.load(TEXT)}


@pytest.fixture(scope="module")
def pngs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return fashion_mnist_pngs(tmp_path_factory.mktemp("fmnist"), 48)[0]


def batch_of(model: torch.nn.Module, paths: list[Path]) -> torch.Tensor:
    preprocess = zoo.transforms(model)
    return torch.stack([preprocess(Image.open(p)) for p in paths])


def own_logits(model: torch.nn.Module, batch: torch.Tensor) -> np.ndarray:
    with torch.no_grad():
        return model(batch).numpy()


def test_health_and_metadata_through_tritonclient(server: str) -> None:
    client = triton.InferenceServerClient(server.removeprefix("http://"))
    assert client.is_server_live() and client.is_server_ready()
    assert client.is_model_ready(IMAGES) and client.is_model_ready(TEXT)
    assert client.get_server_metadata()["name"] == "zoo"
    metadata = client.get_model_metadata(IMAGES)
    assert metadata["inputs"] == [{"name": "input", "datatype": "FP32", "shape": [-1, 1, 28, 28]}]
    assert metadata["outputs"] == [{"name": "logits", "datatype": "FP32", "shape": [-1, 10]}]
    assert metadata["parameters"]["class_names"][:2] == ["T-shirt/top", "Trouser"]
    assert client.get_model_metadata(TEXT)["inputs"][0] == {"name": "text_input", "datatype": "BYTES", "shape": [-1]}


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
def test_v2_infer_equals_the_models_own_output(server: str, models: dict, pngs: list[Path], binary: bool) -> None:
    batch = batch_of(models[IMAGES], pngs[:4])
    client = triton.InferenceServerClient(server.removeprefix("http://"))
    tensor = triton.InferInput("input", list(batch.shape), "FP32")
    tensor.set_data_from_numpy(batch.numpy(), binary_data=binary)
    outputs = [triton.InferRequestedOutput("logits", binary_data=binary)]
    result = client.infer(IMAGES, [tensor], outputs=outputs)
    np.testing.assert_allclose(result.as_numpy("logits"), own_logits(models[IMAGES], batch), rtol=1e-4, atol=1e-4)
    top = client.infer(IMAGES, [tensor], outputs=[triton.InferRequestedOutput("logits", class_count=2)])
    best = own_logits(models[IMAGES], batch).argmax(-1)
    names = zoo.info(IMAGES).category_names()
    assert [row[0].decode().split(":")[1:] for row in top.as_numpy("logits")] == [[str(i), names[i]] for i in best]


def test_tritonclient_hears_the_servers_error(server: str) -> None:
    client = triton.InferenceServerClient(server.removeprefix("http://"))
    tensor = triton.InferInput("input", [1, 3, 28, 28], "FP32")
    tensor.set_data_from_numpy(np.zeros((1, 3, 28, 28), np.float32))
    with pytest.raises(InferenceServerException, match=r"has shape \[-1, 1, 28, 28\] \(-1: any size\); got \[1, 3"):
        client.infer(IMAGES, [tensor])


def test_v2_text_generation_through_tritonclient(server: str, models: dict) -> None:
    client = triton.InferenceServerClient(server.removeprefix("http://"))
    prompt = triton.InferInput("text_input", [1], "BYTES")
    prompt.set_data_from_numpy(np.array([b"import "], dtype=object))
    result = client.infer(TEXT, [prompt], parameters={"max_tokens": 24, "temperature": 0})
    expected = complete(models[TEXT], "import ", 24, temperature=0).removeprefix("import ")
    assert result.as_numpy("text_output")[0].decode() == expected


def test_predict_route_gives_the_numbers_of_zoo_predict(server: str, pngs: list[Path], capsys) -> None:
    args = argparse.Namespace(
        name=IMAGES,
        images=[str(p) for p in pngs[:3]],
        top_k=3,
        batch_size=64,
        device="cpu",
        optimize=None,
        no_progress=False,
    )
    run_predict(args)
    printed = [
        re.match(r"\s+(\S+%)\s+(.+) \((\d+)\)$", line).groups()
        for line in capsys.readouterr().out.splitlines()
        if line.startswith("  ")
    ]
    files = [("image", (p.name, p.read_bytes(), "image/png")) for p in pngs[:3]]
    answer = httpx.post(f"{server}/v1/models/{IMAGES}:predict?top_k=3", files=files).json()
    served = [(f"{c['score']:.2%}", c["label"], str(c["index"])) for p in answer["predictions"] for c in p["classes"]]
    assert served == printed
    assert [p["file"] for p in answer["predictions"]] == [p.name for p in pngs[:3]]


def test_openai_client_completions_plain_streamed_and_stopped(server: str, models: dict) -> None:
    client = openai.OpenAI(base_url=f"{server}/v1", api_key="unused")
    expected = complete(models[TEXT], "def fib(", 40, temperature=0).removeprefix("def fib(")
    plain = client.completions.create(model=TEXT, prompt="def fib(", max_tokens=40, temperature=0)
    assert plain.choices[0].text == expected and plain.usage.completion_tokens == len(expected.encode())
    chunks = list(client.completions.create(model=TEXT, prompt="def fib(", max_tokens=40, temperature=0, stream=True))
    assert "".join(c.choices[0].text for c in chunks) == expected
    assert len(chunks) > 10 and chunks[-1].choices[0].finish_reason in ("length", "stop")
    stop = expected[len(expected) // 2 : len(expected) // 2 + 2]
    stopped = client.completions.create(model=TEXT, prompt="def fib(", max_tokens=40, temperature=0, stop=[stop])
    assert stopped.choices[0].text == expected[: expected.index(stop)]
    assert stopped.choices[0].finish_reason == "stop"
    with pytest.raises(openai.BadRequestError, match="context is 256 tokens"):
        client.completions.create(model=TEXT, prompt="x" * 300, max_tokens=8)


def test_concurrent_completions_share_batches_and_answer_as_alone(server: str, models: dict) -> None:
    """Eight clients at once, with their own prompts, seeds, limits and stops: fewer generation
    batches than completions (the metrics' batch sizes), and each answer is what the model
    gives that prompt alone; a list prompt batches its prompts too."""
    from concurrent.futures import ThreadPoolExecutor as Pool

    def batches() -> tuple[float, float]:
        text = httpx.get(f"{server}/metrics").text
        count = re.search(rf'zoo_serve_batch_size_count{{model="{TEXT}"}} (\S+)', text)
        total = re.search(rf'zoo_serve_batch_size_sum{{model="{TEXT}"}} (\S+)', text)
        return (float(count.group(1)), float(total.group(1))) if count and total else (0.0, 0.0)

    prompts = ["def ", "class ", "import ", "for i in ", "    return ", "# ", "if x:", "while "]
    client = openai.OpenAI(base_url=f"{server}/v1", api_key="unused")

    def ask(i: int) -> str:
        answer = client.completions.create(model=TEXT, prompt=prompts[i], max_tokens=8 + i, temperature=0.8, seed=i)
        return answer.choices[0].text

    before = batches()
    with Pool(len(prompts)) as pool:
        answers = list(pool.map(ask, range(len(prompts))))
    count, rows = (a - b for a, b in zip(batches(), before))
    assert rows == len(prompts) and count < len(prompts), (count, rows)
    alone = [complete(models[TEXT], p, 8 + i, seed=i, temperature=0.8).removeprefix(p) for i, p in enumerate(prompts)]
    assert answers == alone
    before = batches()
    listed = client.completions.create(model=TEXT, prompt=prompts[:4], max_tokens=6, temperature=0)
    assert [c.text for c in listed.choices] == [
        complete(models[TEXT], p, 6, temperature=0)[len(p) :] for p in prompts[:4]
    ]
    assert [a - b for a, b in zip(batches(), before)] == [1, 4]
    too_many = httpx.post(f"{server}/v1/completions", json={"model": TEXT, "prompt": ["x"] * 40, "max_tokens": 200})
    assert too_many.status_code == 413 and "at most 32 at once" in too_many.json()["error"]["message"]
    streamed = httpx.post(f"{server}/v1/completions", json={"model": TEXT, "prompt": ["x"] * 40, "stream": True})
    assert streamed.status_code == 413 and "at most 32 at once" in streamed.json()["error"]["message"]
    assert [a - b for a, b in zip(batches(), before)] == [1, 4]  # refused whole: nothing of it ran


def test_worker_threads_are_measured_or_set_by_threads() -> None:
    """Without --threads the worker keeps whichever of torch's count and 1 ran the model's own
    work faster there; with --threads that count is set on the worker itself (a count set on
    the main thread does not reach other threads' OpenMP)."""
    from fastapi.testclient import TestClient

    from zoo.serve.threads import pick_threads

    # 20 ms apart (medians of 3): a sleep on a busy machine wakes a few ms late (4 ms apart, medians
    # of 2, was a coin toss there)
    def work() -> None:  # slower on more threads, as the LM's decoding was on 2 cores
        time.sleep(0.02 * torch.get_num_threads())

    choice = pick_threads(work, threads=2, repeats=3)
    assert choice.threads == 1 and set(choice.seconds) == {1, 2} and "the faster of" in str(choice)
    choice = pick_threads(lambda: time.sleep(0.04 / torch.get_num_threads()), threads=2, repeats=3)
    assert choice.threads == 2
    before = torch.get_num_threads()
    with TestClient(zoo.serve.app(IMAGES, threads=1)) as client:
        state = client.app.state.server
        assert state.threads[IMAGES].threads == 1 and not state.threads[IMAGES].seconds
        assert state.executors[IMAGES].submit(torch.get_num_threads).result() == 1
    assert torch.get_num_threads() == before  # the process's count is put back when the server stops
    with TestClient(zoo.serve.app(IMAGES)) as client:
        choice = client.app.state.server.threads[IMAGES]
        assert choice.threads in choice.seconds and 1 in choice.seconds


def _bomb_png() -> bytes:
    buffer = io.BytesIO()
    Image.new("1", (6000, 6000)).save(buffer, "PNG")  # a few KB that decode to 36 megapixels
    return buffer.getvalue()


def _v2(data: object, shape: list[int], datatype: str = "FP32") -> dict:
    return {"inputs": [{"name": "input", "shape": shape, "datatype": datatype, "data": data}]}


INFER, PREDICT = f"/v2/models/{IMAGES}/infer", f"/v1/models/{IMAGES}:predict"
BAD_REQUESTS = {  # name -> (method, path, request keywords, status, words the error names)
    "wrong shape": ("POST", INFER, {"json": _v2([0.0] * 756, [1, 1, 28, 27])}, 400, "has shape [-1, 1, 28, 28]"),
    "wrong datatype": ("POST", INFER, {"json": _v2([0] * 784, [1, 1, 28, 28], "INT64")}, 400, "is FP32; got INT64"),
    "data not fitting shape": ("POST", INFER, {"json": _v2([0.0] * 10, [1, 1, 28, 28])}, 400, "holds 784 values"),
    "unknown model": ("POST", "/v2/models/resnet99/infer", {"json": {}}, 404, "no model 'resnet99'"),
    "malformed JSON": ("POST", INFER, {"content": b'{"inputs": [', "headers": {"content-type": "application/json"}},
                       400, "Invalid JSON"),
    "missing field": ("POST", INFER, {"json": {"inputs": [{"name": "input"}]}}, 400, "inputs.0.shape"),
    "corrupt image": ("POST", PREDICT, {"files": {"image": ("x.png", b"\x89PNG\r\n\x1a\nnot really", "image/png")}},
                      400, "x.png is not a readable image"),
    "decompression bomb": ("POST", PREDICT, {"files": {"image": ("bomb.png", _bomb_png(), "image/png")}}, 413,
                           "36,000,000 pixels"),
    "body over the limit": ("POST", INFER, {"content": b"0" * (3 * 2**20)}, 413, "this server takes up to 2,097,152"),
    "prompt too long": ("POST", "/v1/completions", {"json": {"model": TEXT, "prompt": "x" * 400}}, 400,
                        "context is 256 tokens"),
    "seed beyond 64 bits": ("POST", "/v1/completions", {"json": {"model": TEXT, "prompt": "x", "seed": 2**70}}, 400,
                            "seed"),
    "classifier asked to complete": ("POST", "/v1/completions", {"json": {"model": IMAGES, "prompt": "x"}}, 400,
                                     "is a classifier"),
    "no such route": ("GET", "/v3/everything", {}, 404, "no route GET /v3/everything"),
}  # fmt: skip


@pytest.mark.parametrize("name", BAD_REQUESTS)
def test_a_bad_request_gets_a_4xx_naming_the_problem(server: str, name: str) -> None:
    method, path, keywords, status, words = BAD_REQUESTS[name]
    response = httpx.request(method, server + path, timeout=30, **keywords)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert words in (error if isinstance(error, str) else error["message"])


def test_a_mixed_stream_gets_right_answers_and_4xx_and_the_server_lives(server: str, models: dict, pngs: list) -> None:
    """400 requests from 16 clients, one in ten bad: each good answer equals the model's own
    output for its image, each bad one its 4xx; the batcher ran batches of more than one."""
    batch = batch_of(models[IMAGES], pngs)
    expected = own_logits(models[IMAGES], batch)
    bad = [v for k, v in BAD_REQUESTS.items() if v[0] == "POST" and k != "body over the limit"]

    local, clients = threading.local(), []  # one keep-alive connection per client thread

    def one(i: int) -> tuple[int, int, int, httpx.Response]:
        if not hasattr(local, "client"):
            local.client = httpx.Client(base_url=server, timeout=60)
            clients.append(local.client)
        if i % 10 == 9:
            method, path, keywords, status, _ = bad[i % len(bad)]
            return i, -1, status, local.client.request(method, path, **keywords)
        k = i % len(pngs)
        return i, k, 200, local.client.post(INFER, json=_v2(batch[k : k + 1].flatten().tolist(), [1, 1, 28, 28]))

    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(one, range(400)))
    for client in clients:
        client.close()
    for i, k, status, response in results:
        assert response.status_code == status, (i, response.text)
        if k >= 0:
            logits = np.asarray(response.json()["outputs"][0]["data"], dtype=np.float32)
            np.testing.assert_allclose(logits, expected[k], rtol=1e-4, atol=1e-4)
    assert httpx.get(f"{server}/v2/health/ready").status_code == 200
    families = {f.name: f for f in text_string_to_metric_families(httpx.get(f"{server}/metrics").text)}
    sizes = [s for s in families["zoo_serve_batch_size"].samples if s.name.endswith("_sum")]
    counts = [s for s in families["zoo_serve_batch_size"].samples if s.name.endswith("_count")]
    assert sum(s.value for s in sizes) > sum(s.value for s in counts)  # some forwards held several requests


def test_metrics_count_requests_errors_and_latency(server: str) -> None:
    httpx.get(f"{server}/v2/models/nothing")
    families = {f.name: f for f in text_string_to_metric_families(httpx.get(f"{server}/metrics").text)}
    requests = {
        (s.labels["route"], s.labels["status"]): s.value
        for s in families["zoo_serve_requests"].samples
        if s.name == "zoo_serve_requests_total"
    }
    assert requests[("/v2/models/{name}", "404")] >= 1
    errors = families["zoo_serve_errors"].samples
    assert any(s.labels["status"] == "404" for s in errors)
    assert any(s.name == "zoo_serve_request_seconds_bucket" for s in families["zoo_serve_request_seconds"].samples)


def test_an_api_key_guards_every_route_but_health() -> None:
    from fastapi.testclient import TestClient

    with TestClient(zoo.serve.app(IMAGES, api_key="s3cret")) as client:
        assert client.get("/v2/health/ready").status_code == 200
        assert client.get("/").status_code == 200  # the page's shell holds no data; what it shows is guarded
        paths = ("/v2", f"/v2/models/{IMAGES}", f"/v2/models/{IMAGES}/ready", "/page/models", "/metrics", "/v1/models")
        for path in paths:
            answer = client.get(path)
            assert answer.status_code == 401 and "Authorization: Bearer KEY" in json.dumps(answer.json()), path
        assert client.get("/v2", headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert client.get("/v2", headers={"Authorization": "Bearer s3cret"}).status_code == 200


def test_config_refuses_what_it_cannot_serve() -> None:
    with pytest.raises(ValueError, match=r"max_batch \(--max-batch\) must be from 1 to 4096, got 0"):
        ServeConfig(models=(IMAGES,), max_batch=0)
    with pytest.raises(ValueError, match="reads graphs"):
        zoo.serve.app("gin3.fmnist")
    with pytest.raises(ValueError, match="two models would be served under one name"):
        zoo.serve.app(IMAGES, IMAGES)


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({"max_batchs": 4}, "zoo.serve.app has no option max_batchs; its options: device, "),
        ({"models": (IMAGES,)}, "takes the models as positional arguments"),
        ({"max_batch": "4"}, "max_batch (--max-batch) must be a whole number from 1 to 4096, got '4'"),
        ({"max_wait_ms": float("inf")}, "max_wait_ms (--max-wait-ms) must be a finite number in [0, 60000]"),
        ({"max_wait_ms": 1e12}, "max_wait_ms (--max-wait-ms) must be in [0, 60000], got 1000000000000.0"),
        ({"threads": 1.5}, "threads (--threads) must be a whole number from 1 to 1024"),
        ({"threads": 100_000}, "threads (--threads) must be from 1 to 1024, got 100000"),
        ({"api_key": 123}, "api_key must be a string or None"),
        ({"max_queue": 0}, "ServeConfig.max_queue must be from 1 to 1048576, got 0"),
    ],
)
def test_options_a_user_gets_wrong_are_zoo_errors(options: dict[str, object], problem: str) -> None:
    """Refused before any model loads, as an InvalidArgumentError (a TypeError and a ValueError)."""
    with pytest.raises(InvalidArgumentError, match=re.escape(problem)):
        zoo.serve.app(IMAGES, **options)


def test_card_rendering_escapes_html_and_drops_foreign_addresses() -> None:
    from zoo.serve.routes.cards import render_card

    html = render_card(
        "# t <script>x()</script>\n\n[a](javascript:x()) ![c](c.png) ![d](http://e/d.png)",
        {"c.png": "/page/models/m/curves.png"},
    )
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert "javascript:" not in html and 'src="/page/models/m/curves.png"' in html and "http://e" not in html


def test_the_batcher_fills_batches_up_to_max_batch() -> None:
    import asyncio

    from zoo.serve.batching import Batcher, tensor_batches

    sizes: list[int] = []

    async def main() -> list[torch.Tensor]:
        with ThreadPoolExecutor(1) as pool:
            batcher = Batcher(
                tensor_batches(lambda x: x * 2),
                pool,
                max_batch=4,
                max_wait_ms=50,
                max_queue=100,
                on_batch=sizes.append,
                size=lambda rows: rows.shape[0],
            )
            batcher.start()
            rows = [torch.full((random.choice([1, 2]), 3), float(i)) for i in range(10)]
            answers = await asyncio.gather(*(batcher.submit(r) for r in rows))
            await batcher.stop()
            return [a - 2 * r for a, r in zip(answers, rows)]

    assert all(not d.any() for d in asyncio.run(main()))
    assert max(sizes) <= 4 and len(sizes) < 10


def test_the_batcher_batches_only_items_whose_key_agrees() -> None:
    """Items of another key wait for the next call (completions with other sampling options)."""
    import asyncio

    from zoo.serve.batching import Batcher

    calls: list[list[tuple[str, int]]] = []

    def run(items: list[tuple[str, int]]) -> list[int]:
        calls.append(items)
        return [n * 10 for _, n in items]

    async def main() -> list[int]:
        with ThreadPoolExecutor(1) as pool:
            batcher = Batcher(run, pool, max_batch=8, max_wait_ms=50, max_queue=100, key=lambda item: item[0])
            batcher.start()
            items = [("greedy", 1), ("greedy", 2), ("t=0.7", 3), ("t=0.7", 4), ("greedy", 5)]
            answers = await asyncio.gather(*(batcher.submit(item) for item in items))
            await batcher.stop()
            return answers

    assert asyncio.run(main()) == [10, 20, 30, 40, 50]
    assert all(len({key for key, _ in call}) == 1 for call in calls) and len(calls) == 3


def test_optimize_serves_the_same_classes_through_compiled_graphs(models: dict, pngs: list[Path]) -> None:
    """--optimize fp32: zoo.optimize's compiled module answers (any batch size up to max_batch,
    on graphs compiled at start) what the eager model does."""
    from fastapi.testclient import TestClient

    batch = batch_of(models[IMAGES], pngs[:5])
    expected = own_logits(models[IMAGES], batch)
    with TestClient(zoo.serve.app(IMAGES, optimize="fp32", max_batch=4)) as client:
        assert client.app.state.server.models[IMAGES].runner is not None
        for rows in (batch[:1], batch[1:4]):
            answer = client.post(INFER, json=_v2(rows.flatten().tolist(), list(rows.shape))).json()
            logits = np.asarray(answer["outputs"][0]["data"], np.float32).reshape(len(rows), -1)
            start = 0 if len(rows) == 1 else 1
            np.testing.assert_allclose(logits, expected[start : start + len(rows)], rtol=1e-3, atol=1e-3)
        too_many = client.post(INFER, json=_v2(batch.flatten().tolist(), list(batch.shape)))
        assert too_many.status_code == 413 and "at most 4 per forward (--max-batch)" in too_many.json()["error"]


def test_a_saved_folder_is_served_with_its_card_metrics_and_curves(tmp_path: Path, models: dict) -> None:
    from fastapi.testclient import TestClient

    folder = tmp_path / "shirts"
    zoo.save(models[IMAGES], folder)
    (folder / "README.md").write_text("# shirts\n\n<script>alert(1)</script>\n\n![training curves](curves.png)\n")
    Image.new("RGB", (40, 20), "white").save(folder / "curves.png")
    (folder / "metrics.json").write_text(json.dumps({"history": [{"epoch": 1, "val_acc": 0.9}], "test_top1": 0.91}))
    with TestClient(zoo.serve.app(str(folder))) as client:
        described = client.get("/page/models").json()["models"][0]
        assert described["name"] == "shirts" and described["kind"] == "images"
        assert described["metrics"] == {"last epoch": {"epoch": 1, "val_acc": 0.9}, "test_top1": 0.91}
        assert "&lt;script&gt;" in described["card_html"] and "<script>" not in described["card_html"]
        assert 'src="/page/models/shirts/curves.png"' in described["card_html"]
        curves = client.get("/page/models/shirts/curves.png")
        assert curves.status_code == 200 and curves.headers["content-type"] == "image/png"
        for path in ("/page/models/shirts/confusion.png", "/page/models/shirts/..%2F..%2Fconfig.json.png"):
            assert client.get(path).status_code == 404, path
        page = client.get("/")
        assert "script-src 'self'" in page.headers["content-security-policy"] and "/page.js" in page.text


@pytest.mark.parametrize(
    ("flag", "value", "said"),
    [
        ("--threads", "100000", "argument --threads: must be from 1 to 1024, got '100000'"),
        ("--max-wait-ms", "1e12", "argument --max-wait-ms: must be in [0, 60000], got '1e12'"),
        ("--max-batch", "0", "argument --max-batch: must be from 1 to 4096, got '0'"),
        ("--replicas", "5000", "argument --replicas: must be from 1 to 1024, got '5000'"),
    ],
)
def test_zoo_serve_refuses_a_number_out_of_its_bounds_in_one_line(capsys, flag: str, value: str, said: str) -> None:
    """The flag's type is the bound ServeConfig declares: refused when parsed, before any model loads."""
    from zoo.cli import main

    with pytest.raises(SystemExit) as exited:
        main(["serve", IMAGES, flag, value])
    assert exited.value.code == 2
    assert capsys.readouterr().err.strip() == f"zoo serve: error: {said} (see zoo serve --help)"
