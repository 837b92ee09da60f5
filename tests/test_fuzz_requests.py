"""Requests a client may send, generated (issue 40: the fuzz suites extended to the request
schemas): OpenAI completions, v1 predict rows and v2 inference (classifier tensors, a language
model's parameters, output parameters), every numeric field drawn from numbers far outside its
bounds, NaN, infinities, subnormals, strings and booleans. Each must get an answer or a 4xx that
names the problem, never a 500, and a streamed answer must end properly.

The cases run in a child pytest whose address space is capped once the models are loaded
(``resource.setrlimit(RLIMIT_AS)``, `HEADROOM` above what it holds), so a field without its
upper bound fails fast, as a MemoryError and a 500, instead of making a slow test."""

from __future__ import annotations

import base64
import json
import os
import resource
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

IMAGES, TEXT = "resnet20.fmnist", "moe_lm.stdlib"
CHILD = "ZOO_FUZZ_REQUESTS_CHILD"
HEADROOM = 2 << 30  # bytes of address space the child may take beyond what it holds after loading
FUZZ = settings(
    max_examples=40, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
NUMBER = (
    st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.sampled_from([0, 1, -1, 0.5, 1e-40, 1e-45, 5e-324, 1e308, 2**31, 2**32, 2**63, 2**64, 1.0, 3.0])
    | st.booleans()
    | st.none()
    | st.text(max_size=4)
)
TEXTS = st.text(max_size=12)


def test_the_request_fuzzers_run_under_an_address_space_limit() -> None:
    """This file's fuzz cases, in a child pytest under the limit: all pass, none skipped."""
    if os.environ.get(CHILD):
        pytest.skip("the child runs the cases themselves")
    env = {**os.environ, CHILD: "1", "MALLOC_ARENA_MAX": "2"}  # glibc's arenas: address space per thread
    command = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", str(Path(__file__))]
    command += ["-k", "not address_space_limit"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, cwd=Path(__file__).parent)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert " passed" in done.stdout and "skipped" not in done.stdout, done.stdout[-2000:]


@pytest.fixture(scope="module")
def client() -> Iterator[object]:
    """A TestClient of both kinds of model; the address space capped from here on."""
    if not os.environ.get(CHILD):
        pytest.skip("run by test_the_request_fuzzers_run_under_an_address_space_limit, under its limit")
    from fastapi.testclient import TestClient

    import zoo.serve

    app = zoo.serve.app(IMAGES, TEXT, threads=1, max_batch=4, max_tokens_limit=8, max_body_bytes=1 << 20)
    with TestClient(app) as test_client:
        for model in (IMAGES, TEXT):  # each worker thread started before the cap
            assert test_client.get(f"/v2/models/{model}/ready").status_code == 200
        _cap_address_space()
        yield test_client


def _cap_address_space() -> None:
    with open("/proc/self/statm") as statm:
        held = int(statm.read().split()[0]) * resource.getpagesize()
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = held + HEADROOM if hard == resource.RLIM_INFINITY else min(hard, held + HEADROOM)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


def _check(answer) -> None:  # noqa: ANN001 - an httpx.Response
    """An answer, or a 4xx whose JSON error says something; a stream that ends in [DONE]."""
    assert answer.status_code < 500, answer.text[:2000]
    event(f"status {answer.status_code}")
    if answer.status_code >= 400:
        error = answer.json()["error"]
        message = error if isinstance(error, str) else error["message"]
        assert isinstance(message, str) and len(message) > 10, answer.text
    elif answer.headers["content-type"].startswith("text/event-stream"):
        assert answer.text.endswith("data: [DONE]\n\n") and "event: error" not in answer.text, answer.text[-2000:]


def _post(client, path: str, body: object, params: dict | None = None):  # noqa: ANN001, ANN202 - a TestClient
    content = body if isinstance(body, bytes) else json.dumps(body, allow_nan=True).encode()
    return client.post(path, content=content, headers={"content-type": "application/json"}, params=params)


def test_fuzz_the_limit_is_in_force(client) -> None:  # noqa: ANN001
    import numpy as np

    with pytest.raises(MemoryError):
        np.ones(HEADROOM * 2, dtype=np.uint8)


def _mostly(valid: st.SearchStrategy) -> st.SearchStrategy:
    """A value a field may hold, seven times in eight, else anything."""
    return st.integers(0, 7).flatmap(lambda i: valid if i else NUMBER)


SAMPLING = {  # each field of a completion: what it may hold (then anything, through `_mostly`)
    "max_tokens": st.integers(0, 8),
    "temperature": st.sampled_from([0, 1e-40, 1e-38, 5e-324, 1e-30, 0.7, 1, 100]) | st.floats(0, 100),
    "top_p": st.sampled_from([1e-300, 0.5, 1]) | st.floats(0, 1, exclude_min=True),
    "top_k": st.integers(1, 300) | st.just(2**31 - 1),
    "seed": st.integers(0, 2**32 - 1),
    "stop": st.text(min_size=1, max_size=8) | st.lists(st.text(min_size=1, max_size=8), max_size=4),
}
COMPLETION = {
    **SAMPLING,
    "n": st.just(1),
    "best_of": st.just(1),
    "presence_penalty": st.just(0),
    "frequency_penalty": st.just(0),
    "echo": st.booleans(),
    "logprobs": st.none(),
}


def _fields(fields: dict[str, st.SearchStrategy]) -> st.SearchStrategy[dict]:
    """Any of ``fields``, each mostly valid."""
    return st.fixed_dictionaries({}, optional={name: _mostly(value) for name, value in fields.items()})


@FUZZ
@given(
    fields=_fields(COMPLETION),
    prompt=_mostly(TEXTS | st.lists(TEXTS, max_size=3)),
    stream=st.booleans(),
    unknown=st.dictionaries(st.sampled_from(["x", "suffix", "model"]), NUMBER, max_size=1),
)
def test_fuzz_completions(client, fields: dict, prompt: object, stream: bool, unknown: dict) -> None:  # noqa: ANN001
    body = {"model": TEXT, "prompt": prompt, "stream": stream, **fields, **unknown}
    _check(_post(client, "/v1/completions", body))


@FUZZ
@given(
    parameters=_fields({**SAMPLING, "binary_data_output": st.booleans()}),
    prompts=st.lists(TEXTS, min_size=1, max_size=3),
)
def test_fuzz_v2_language_model_parameters(client, parameters: dict, prompts: list[str]) -> None:  # noqa: ANN001
    inputs = [{"name": "text_input", "shape": [len(prompts)], "datatype": "BYTES", "data": prompts}]
    _check(_post(client, f"/v2/models/{TEXT}/infer", {"inputs": inputs, "parameters": parameters}))


@st.composite
def v2_inputs(draw: st.DrawFn) -> dict:
    """The classifier's input, mostly well formed: rows of 784 values, flat or nested."""
    rows = draw(st.integers(0, 5))
    odd_shape = st.lists(_mostly(st.integers(0, 28)), max_size=9)
    shape = draw(st.integers(0, 5).flatmap(lambda i: st.just([rows, 1, 28, 28]) if i else odd_shape))
    values = [0.5] * 784 * rows
    odd_data = st.lists(NUMBER, max_size=6) | st.lists(st.lists(st.floats(), max_size=3), max_size=3)
    data = draw(
        st.integers(0, 5).flatmap(lambda i: st.sampled_from([values, [[[[0.5] * 28] * 28]] * rows]) if i else odd_data)
    )
    item = {"name": draw(_mostly(st.just("input"))), "shape": shape, "datatype": draw(_mostly(st.just("FP32")))}
    item |= {} if data is None else {"data": data}
    parameters = draw(st.dictionaries(st.sampled_from(["binary_data_size", "z"]), NUMBER, max_size=1))
    return item | ({"parameters": parameters} if parameters else {})


OUTPUT = _fields({"classification": st.integers(1, 20), "binary_data": st.just(False)})


@FUZZ
@given(
    inputs=st.integers(0, 5).flatmap(lambda i: st.lists(v2_inputs(), min_size=1, max_size=1 if i else 2)),
    outputs=st.none()
    | st.lists(st.fixed_dictionaries({"name": _mostly(st.just("logits")), "parameters": OUTPUT}), max_size=2),
    parameters=_fields({"binary_data_output": st.just(False)}),
)
def test_fuzz_v2_classifier_infer(client, inputs: list, outputs: list | None, parameters: dict) -> None:  # noqa: ANN001
    body: dict = {"inputs": inputs, "parameters": parameters}
    body |= {} if outputs is None else {"outputs": outputs}
    _check(_post(client, f"/v2/models/{IMAGES}/infer", body))


def _png(side: int) -> str:
    from io import BytesIO

    from PIL import Image

    buffer = BytesIO()
    Image.new("L", (side, side)).save(buffer, "PNG")
    return base64.b64encode(buffer.getvalue()).decode()


ROWS = (
    st.lists(st.just([[[0.5] * 28] * 28]), min_size=1, max_size=5)
    | st.lists(st.lists(NUMBER, max_size=4), max_size=3)
    | st.lists(st.integers(1, 64).map(lambda side: {"b64": _png(side)}), max_size=5)
    | st.lists(st.fixed_dictionaries({"b64": TEXTS}), max_size=2)
)


@FUZZ
@given(instances=_mostly(ROWS), top_k=st.none() | _mostly(st.integers(1, 20)), query=st.none() | st.text(max_size=6))
def test_fuzz_v1_predict_rows(client, instances: object, top_k: object, query: str | None) -> None:  # noqa: ANN001
    body: dict = {"instances": instances}
    body |= {} if top_k is None else {"top_k": top_k}
    _check(_post(client, f"/v1/models/{IMAGES}:predict", body, None if query is None else {"top_k": query}))


@FUZZ
@given(body=st.binary(max_size=64), route=st.sampled_from(["/v1/completions", f"/v2/models/{IMAGES}/infer"]))
def test_fuzz_raw_bodies(client, body: bytes, route: str) -> None:  # noqa: ANN001
    _check(_post(client, route, body))
