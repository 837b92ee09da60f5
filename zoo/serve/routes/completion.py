"""Completions from a byte-level LM as the server runs them, several in one batch
(`zoo.tokenizer.complete_batch`): the request's limits checked against the model's context,
``stop`` sequences (text that may begin one is held back until it can't), a client that went
away ends its own row, and the finish reason and token counts that OpenAI's answers carry."""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass

from zoo.serve.models import ServedModel
from zoo.serve.protocol import CompletionRequest
from zoo.serve.request_errors import bad_request, too_large
from zoo.tokenizer import ByteTokenizer, Continuation, complete_batch

MAX_WAITING = 32  # prompts waiting per language model at most (more get 503); a request holds no more


@dataclass
class Completion:
    text: str
    finish_reason: str  # "stop": end of file or a stop sequence; "length": max_tokens reached
    prompt_tokens: int
    completion_tokens: int


def check_request(served: ServedModel, request: CompletionRequest, limit: int) -> list[str]:
    """The prompts, after checking that each fits the model's context with ``max_tokens``."""
    prompts = [request.prompt] if isinstance(request.prompt, str) else request.prompt
    if not prompts:
        raise bad_request("prompt is an empty list; send a string or a list of strings", param="prompt")
    if len(prompts) > MAX_WAITING:
        raise too_large(
            f"a request holds {len(prompts)} prompts; this server takes at most {MAX_WAITING} at once: "
            "send them in smaller requests"
        )
    if "max_tokens" not in request.model_fields_set:  # OpenAI's default (16) on a server generating fewer
        request.max_tokens = min(request.max_tokens, limit)
    if request.max_tokens > limit:
        raise bad_request(f"max_tokens is {request.max_tokens}; this server generates at most {limit}", "max_tokens")
    stops = _stops(request)
    if len(stops) > 4 or any(not s or len(s) > 64 for s in stops):
        raise bad_request("stop takes up to 4 non-empty sequences of at most 64 characters", param="stop")
    tokenizer = ByteTokenizer()
    for prompt in prompts:
        used = len(tokenizer.encode(prompt)) + 1  # complete() starts the prompt with eos
        if used + request.max_tokens > served.context_length:
            raise bad_request(
                f"{served.name}'s context is {served.context_length} tokens (bytes); the prompt takes {used} and "
                f"max_tokens asks for {request.max_tokens} more: shorten the prompt or lower max_tokens",
                "prompt",
            )
    return prompts


def _stops(request: CompletionRequest) -> list[str]:
    return [request.stop] if isinstance(request.stop, str) else list(request.stop or [])


class _StopWatcher:
    """Passes text on, holding back what could begin a stop sequence; reports a stop once seen."""

    def __init__(self, stops: list[str]) -> None:
        self.stops, self.pending = stops, ""

    def feed(self, text: str) -> tuple[str, bool]:
        self.pending += text
        found = [i for i in (self.pending.find(s) for s in self.stops) if i >= 0]
        if found:
            out, self.pending = self.pending[: min(found)], ""
            return out, True
        keep = max((n for s in self.stops for n in range(1, len(s)) if self.pending.endswith(s[:n])), default=0)
        out = self.pending[: len(self.pending) - keep]
        self.pending = self.pending[len(out) :]
        return out, False


@dataclass
class CompletionJob:
    """One prompt of a request, waiting for a batch; ``emit`` gets its text as it comes."""

    request: CompletionRequest
    prompt: str
    emit: Callable[[str], None]
    cancelled: threading.Event

    def sampling(self) -> tuple[float, int | None, float | None]:
        """The options a batch shares (each row keeps its own seed, limit and stops)."""
        return (self.request.temperature, self.request.top_k, self.request.top_p)


def run_completions(served: ServedModel, jobs: list[CompletionJob]) -> list[Completion]:
    """Run ``jobs`` (one sampling, `CompletionJob.sampling`) as one batch on the calling
    (worker) thread, each sending its text to its ``emit`` as it comes."""
    watchers = [_StopWatcher(_stops(job.request)) for job in jobs]
    parts: list[list[str]] = [[] for _ in jobs]

    def stream(index: int) -> Callable[[str], bool]:
        job, watcher = jobs[index], watchers[index]

        def send(piece: str) -> bool:
            if job.cancelled.is_set():
                return True
            out, stopped = watcher.feed(piece)
            if out:
                parts[index].append(out)
                job.emit(out)
            return stopped

        return send

    rows = [
        Continuation(
            job.prompt,
            job.request.max_tokens,
            job.request.seed if job.request.seed is not None else secrets.randbits(31),
            stream(index),
        )
        for index, job in enumerate(jobs)
    ]
    temperature, top_k, top_p = jobs[0].sampling()
    results = complete_batch(served.model, rows, temperature=temperature, top_k=top_k, top_p=top_p)
    completions = []
    for job, watcher, text, out in zip(jobs, watchers, parts, results):
        if out.finish != "stopped" and watcher.pending:  # no stop sequence came: what was held back is text
            text.append(watcher.pending)
            job.emit(watcher.pending)
        prompt_tokens = len(ByteTokenizer().encode(job.prompt)) + 1
        finish = "length" if out.finish == "length" else "stop"
        completions.append(Completion("".join(text), finish, prompt_tokens, out.text_tokens))
    return completions
