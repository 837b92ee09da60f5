"""`zoo serve` and generation against what broke them (issue 40, the server half): a temperature
too small to divide by, a stream that fails mid-way, a features-only folder, the API key on
every route, requests that coerced or ignored what they should refuse, and the command line's
options that meant nothing. One real uvicorn server on 127.0.0.1 (the keep-alive connection
matters) and TestClients for the rest."""

from __future__ import annotations

import http.client
import json
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient
from serve_support import running

import zoo
import zoo.serve
from zoo.architectures.generation import _sample
from zoo.errors import InvalidArgumentError
from zoo.tokenizer import complete

IMAGES, TEXT = "resnet20.fmnist", "moe_lm.stdlib"
TINY_TEMPERATURES = [1e-40, 1e-38, 1e-45, 5e-324]


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with running(zoo.serve.app(IMAGES, TEXT, threads=1, max_tokens_limit=32)) as url:
        yield url


@pytest.fixture
def no_serving(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """``zoo serve`` on the command line, which stops where it would start serving (recorded)."""
    import uvicorn

    started: list[str] = []
    monkeypatch.setattr(uvicorn.Server, "run", lambda self, *a, **k: started.append("served"))
    return started


@pytest.fixture(scope="module")
def lm() -> torch.nn.Module:
    return zoo.load(TEXT)


# -- case 1: sampling is numerically safe for any temperature, top_k and top_p ------------------


@pytest.mark.parametrize("temperature", [*TINY_TEMPERATURES, 1e-37, 1e-30])
@pytest.mark.parametrize(("top_k", "top_p"), [(None, None), (3, None), (None, 1e-300), (10**9, 0.5)])
def test_a_temperature_too_small_to_divide_by_samples_greedily(temperature: float, top_k, top_p) -> None:
    logits = torch.randn(5, 258, generator=torch.Generator().manual_seed(0)) * 30
    generators = [torch.Generator().manual_seed(i) for i in range(5)]
    assert torch.equal(_sample(logits, temperature, top_k, top_p, generators), logits.argmax(-1))


def test_a_row_that_overflows_is_greedy_and_the_others_still_sample() -> None:
    """Whether a row is greedy depends on its own logits only (not on its batchmates')."""
    logits = torch.randn(2, 258, generator=torch.Generator().manual_seed(1)) * 1e3  # / 1e-36 overflows
    logits[1] = 0.0  # stays finite: drawn uniformly, not greedily (greedy would be 0)
    drawn = [_sample(logits, 1e-36, None, None, [torch.Generator().manual_seed(s)] * 2) for s in range(6)]
    assert all(out[0] == logits[0].argmax() for out in drawn) and len({int(out[1]) for out in drawn}) > 1
    broken = torch.full((1, 258), float("nan"))
    broken[0, 7] = 1.0
    assert _sample(broken, 0.7, None, 0.9, None).tolist() == [7]  # never a NaN probability into multinomial


def test_zoo_generate_with_a_tiny_temperature_is_greedy(lm: torch.nn.Module) -> None:
    greedy = complete(lm, "def ", 12, temperature=0)
    assert all(complete(lm, "def ", 12, temperature=t) == greedy for t in TINY_TEMPERATURES)


def test_zoo_generate_on_the_command_line_with_a_tiny_temperature_is_greedy(capsys) -> None:
    from zoo.cli import main

    texts = []
    for temperature in ("0", "1e-40"):
        assert main(["generate", TEXT, "def ", "--max-new-tokens", "12", "--temperature", temperature]) == 0
        texts.append(capsys.readouterr().out)
    assert texts[0] == texts[1] and len(texts[0]) > 5


def test_completions_with_a_tiny_temperature_answer_greedily(server: str, lm: torch.nn.Module) -> None:
    expected = complete(lm, "def ", 12, temperature=0).removeprefix("def ")
    with httpx.Client(base_url=server, timeout=60) as client:
        for temperature in TINY_TEMPERATURES:
            body = {"model": TEXT, "prompt": "def ", "max_tokens": 12, "temperature": temperature}
            answer = client.post("/v1/completions", json=body)
            assert answer.status_code == 200 and answer.json()["choices"][0]["text"] == expected, answer.text
            streamed = client.post("/v1/completions", json=body | {"stream": True})
            chunks = [json.loads(line[6:]) for line in streamed.text.splitlines() if line.startswith("data: {")]
            assert "".join(c["choices"][0]["text"] for c in chunks) == expected
            assert streamed.text.endswith("data: [DONE]\n\n")
            inputs = [{"name": "text_input", "shape": [1], "datatype": "BYTES", "data": ["def "]}]
            v2 = client.post(
                f"/v2/models/{TEXT}/infer",
                json={"inputs": inputs, "parameters": {"max_tokens": 12, "temperature": temperature}},
            )
            assert v2.status_code == 200 and v2.json()["outputs"][0]["data"] == [expected], v2.text


def test_a_stream_that_fails_midway_ends_with_an_error_event_and_keeps_the_connection(
    server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The body ends properly (the last chunk, then an OpenAI error event), so the next request
    on the same keep-alive connection is answered."""
    import zoo.serve.routes.completion

    def failing(model, rows, **sampling):
        rows[0].stream("partial ")
        raise RuntimeError("the generation failed")

    monkeypatch.setattr(zoo.serve.routes.completion, "complete_batch", failing)
    connection = http.client.HTTPConnection(server.removeprefix("http://"), timeout=60)
    body = json.dumps({"model": TEXT, "prompt": "def ", "max_tokens": 8, "stream": True})
    connection.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    response = connection.getresponse()
    text = response.read().decode()  # an aborted chunked body would raise IncompleteRead
    socket = connection.sock
    assert response.status == 200 and '"text": "partial "' in text
    event = text.strip().split("\n\n")[-1]
    assert event.startswith("event: error\ndata: ")
    error = json.loads(event.split("data: ", 1)[1])["error"]
    assert error["type"] == "server_error" and "internal error (RuntimeError)" in error["message"]
    assert "the generation failed" not in text  # the details go to the log, not to the client
    connection.request("GET", "/v2/health/ready")
    again = connection.getresponse()
    assert again.status == 200 and json.loads(again.read()) == {"ready": True}
    assert connection.sock is socket  # the same connection answered
    connection.close()


# -- case 2: a features-only folder ------------------------------------------------------------


def test_a_features_only_folder_is_refused_at_start_as_zoo_predict_refuses_it(
    tmp_path: Path, capsys, no_serving: list[str]
) -> None:
    from zoo.cli import main

    folder = tmp_path / "feat"
    zoo.save(zoo.load(IMAGES, features_only=True), folder)
    with pytest.raises(InvalidArgumentError, match="feat outputs feature maps, not class scores .* zoo serve needs"):
        zoo.serve.app(str(folder))
    assert main(["serve", str(folder), "--port", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("zoo: error: feat outputs feature maps, not class scores") and "Traceback" not in err
    assert not no_serving


# -- case 6: nothing about the models without the key ----------------------------------------

OPEN_ROUTES = {"/v2/health/live", "/v2/health/ready", "/", "/page.js", "/page.css"}  # they name no model


def _routes(routes: list) -> Iterator[tuple[str, list[str]]]:
    """Each route's path and methods (FastAPI >= 0.165 keeps included routers whole)."""
    for route in routes:
        if hasattr(route, "original_router"):
            yield from _routes(route.original_router.routes)
        elif hasattr(route, "methods"):
            yield route.path, sorted(route.methods)


def test_with_a_key_no_route_but_liveness_answers_without_it() -> None:
    """Every route the app has, asked without the key: 401 naming no model, but for the few
    that say nothing of the models; a model that is not served gets 401 too, not a list."""
    with TestClient(zoo.serve.app(IMAGES, api_key="s3cret", threads=1)) as client:
        routes = dict(_routes(client.app.routes))
        assert "/openapi.json" in routes and "/v2/models/{name}/ready" in routes
        for path, methods in routes.items():
            concrete = path.replace("{name}", IMAGES).replace("{version}", "1").replace("{role}", "curves")
            for method in methods:
                answer = client.request(method, concrete)
                if path in OPEN_ROUTES:
                    assert answer.status_code == 200, path
                    continue
                assert answer.status_code == 401, (method, path, answer.status_code)
                assert IMAGES not in answer.text, path
        for path in ("/v2/models/nope/ready", "/v2/models/nope", "/v1/models/nope:predict", "/openapi.json"):
            answer = client.get(path) if "predict" not in path else client.post(path)
            assert answer.status_code == 401 and IMAGES not in answer.text, path
        keyed = {"Authorization": "Bearer s3cret"}
        assert client.get(f"/v2/models/{IMAGES}/ready", headers=keyed).json() == {"ready": True}
        assert "/v1/completions" in client.get("/openapi.json", headers=keyed).json()["paths"]


def test_an_empty_api_key_is_refused_not_taken_as_none(
    monkeypatch: pytest.MonkeyPatch, capsys, no_serving: list[str]
) -> None:
    from zoo.cli import main

    assert main(["serve", IMAGES, "--api-key", ""]) == 2
    assert "zoo: error: --api-key is empty, which would serve without a key" in capsys.readouterr().err
    monkeypatch.setenv("ZOO_API_KEY", " ")
    assert main(["serve", IMAGES]) == 2
    assert "zoo: error: ZOO_API_KEY is empty" in capsys.readouterr().err
    with pytest.raises(InvalidArgumentError, match="white space"):
        zoo.serve.app(IMAGES, api_key=" k")
    assert not no_serving


def test_replicas_without_ray_is_refused(capsys, no_serving: list[str]) -> None:
    from zoo.cli import main

    assert main(["serve", IMAGES, "--replicas", "3"]) == 2
    assert "zoo: error: --replicas 3 runs copies of the server on Ray Serve: add --ray" in capsys.readouterr().err
    assert not no_serving


# -- the minor cases: requests that were coerced, flattened or ignored -------------------------


def _v2_input(shape: list, data: object = None, **parameters: object) -> dict:
    item = {"name": "input", "shape": shape, "datatype": "FP32"}
    item |= {"data": data} if data is not None else {}
    item |= {"parameters": parameters} if parameters else {}
    return {"inputs": [item]}


def _completion(**fields: object) -> dict:
    return {"model": TEXT, "prompt": "def ", "max_tokens": 4, **fields}


REFUSED = {  # name -> (path, JSON body, status, words the error names)
    "shape of a boolean": (f"/v2/models/{IMAGES}/infer", _v2_input([True, 1, 28, 28], [0.0] * 784), 400,
                           "inputs.0.shape.0: must be a whole number 0 or more, got True"),
    "shape of strings": (f"/v2/models/{IMAGES}/infer", _v2_input(["1", 1, 28, 28], [0.0] * 784), 400,
                         "inputs.0.shape.0: must be a whole number"),
    "ragged data": (f"/v2/models/{IMAGES}/infer", _v2_input([2, 392], [[0.0] * 391, [0.0] * 393]), 400,
                    "data is nested, but not as its shape [2, 392]"),
    "data and binary_data_size": (f"/v2/models/{IMAGES}/infer", _v2_input([1, 1, 28, 28], [0.0] * 784,
                                  binary_data_size=3136), 400, "has both data and parameters.binary_data_size"),
    "classification of a string": (f"/v2/models/{IMAGES}/infer", _v2_input([1, 1, 28, 28], [0.0] * 784)
                                   | {"outputs": [{"name": "logits", "parameters": {"classification": "2"}}]}, 400,
                                   "classification (the number of classes to answer) must be a whole number"),
    "binary_data_output of a string": (f"/v2/models/{IMAGES}/infer", _v2_input([1, 1, 28, 28], [0.0] * 784)
                                       | {"parameters": {"binary_data_output": "false"}}, 400,
                                       "binary_data_output is true or false"),
    "presence_penalty NaN": ("/v1/completions", _completion(presence_penalty=float("nan")), 400,
                             "presence_penalty: must be a finite number in [0, 0], got nan"),
    "an unknown field": ("/v1/completions", _completion(temprature=0.5), 400, "temprature: Extra inputs"),
    "a negative seed": ("/v1/completions", _completion(seed=-1), 400, "seed: must be from 0 to 4294967295, got -1"),
    "a seed past 32 bits": ("/v1/completions", _completion(seed=2**63), 400, "seed: must be from 0 to 4294967295"),
    "max_tokens as a string": ("/v1/completions", _completion(max_tokens="4"), 400, "max_tokens: must be a whole"),
    "an unknown v2 parameter": (f"/v2/models/{TEXT}/infer", {"inputs": [{"name": "text_input", "shape": [1],
                                "datatype": "BYTES", "data": ["x"]}], "parameters": {"presence_penalty": 1}}, 400,
                                "takes no parameter 'presence_penalty'"),
    "Triton's class_count": (f"/v2/models/{IMAGES}/infer", _v2_input([1, 1, 28, 28], [0.0] * 784)
                             | {"outputs": [{"name": "logits", "parameters": {"class_count": 2}}]}, 400,
                             "unknown parameter 'class_count' (Triton's class_count is the parameter classification)"),
    "texts to an image model": (f"/v1/models/{IMAGES}:predict", {"texts": ["hello"]}, 400,
                                f"{IMAGES} reads images, and the body sends texts: send image files"),
    "predict top_k of a float": (f"/v1/models/{IMAGES}:predict", {"instances": [[[[0.0] * 28] * 28]], "top_k": 2.5},
                                 400, "top_k: must be a whole number from 1 to 1000000, got 2.5"),
}  # fmt: skip


@pytest.mark.parametrize("name", REFUSED)
def test_a_request_that_was_coerced_or_ignored_is_refused_by_name(server: str, name: str) -> None:
    path, body, status, words = REFUSED[name]
    answer = httpx.post(server + path, content=json.dumps(body), headers={"content-type": "application/json"})
    assert answer.status_code == status, answer.text
    error = answer.json()["error"]
    assert words in (error if isinstance(error, str) else error["message"]), error


def test_seeds_in_range_give_their_own_texts(server: str) -> None:
    """0 and 2**32 were one seed to torch's generator; now each seed a request may hold is its own."""
    texts = {
        seed: httpx.post(
            f"{server}/v1/completions", json=_completion(seed=seed, max_tokens=24, temperature=1.0)
        ).json()["choices"][0]["text"]
        for seed in (0, 1, 2**32 - 1)
    }
    assert len(set(texts.values())) == 3


def test_nested_data_as_its_shape_is_still_taken(server: str) -> None:
    rows = np.zeros((1, 1, 28, 28), np.float32)
    nested = httpx.post(f"{server}/v2/models/{IMAGES}/infer", json=_v2_input([1, 1, 28, 28], rows.tolist()))
    flat = httpx.post(f"{server}/v2/models/{IMAGES}/infer", json=_v2_input([1, 1, 28, 28], rows.ravel().tolist()))
    assert nested.status_code == 200 and nested.json()["outputs"] == flat.json()["outputs"]


def test_too_many_files_is_a_413_and_a_raw_image_body_is_told_how_to_send(server: str) -> None:
    from io import BytesIO

    from PIL import Image

    buffer = BytesIO()
    Image.new("L", (28, 28)).save(buffer, "PNG")
    png = buffer.getvalue()
    with TestClient(zoo.serve.app(IMAGES, threads=1, max_batch=4)) as client:
        files = [("image", (f"{i}.png", png, "image/png")) for i in range(5)]
        answer = client.post(f"/v1/models/{IMAGES}:predict", files=files)
        assert answer.status_code == 413, answer.text
        assert re.search(r"more than 4 files; .* at most 4 images per request \(--max-batch\)", answer.json()["error"])
        raw = client.post(f"/v1/models/{IMAGES}:predict", content=png, headers={"content-type": "image/png"})
        assert raw.status_code == 415 and "multipart form (curl -F image=@shirt.png)" in raw.json()["error"]
        assert client.post(f"/v1/models/{IMAGES}:predict", files=files[:4]).status_code == 200
