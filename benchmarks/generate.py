"""Greedy generation speed: zoo's ``moe_lm.stdlib`` against the same weights in transformers'
``MixtralForCausalLM`` (exported with ``zoo.export_hf``), side by side in one process.

Batch 1 and 8 (eight different prompts, left-padded with an attention mask), the same prompt
bytes for both (zoo.tokenizer, each prompt preceded by eos as ``zoo generate`` does), a fixed
number of new tokens (no early stop at eos). Both must produce identical tokens; the run fails
otherwise. transformers runs its default ``generate`` (a DynamicCache) and, with
``--hf-static``, also ``cache_implementation="static"`` (which transformers compiles on its own
only on accelerators, so on a CPU that is its eager static-cache path). zoo runs eager and,
with ``--compile``, its torch.compile'd decode step (compiled in the warm-up run, not timed).
Runs alternate between the implementations; the table gives the median tokens/s over the
repeats and the ratio zoo / transformers' default.

    .venv/bin/python benchmarks/generate.py [--new-tokens 256] [--batches 1 8] [--repeats 5]
        [--threads N] [--compile] [--hf-static]

On a machine shared with other jobs use ``--threads 1`` (more OpenMP threads than free cores
make every operation wait at barriers).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
import transformers

import zoo
from zoo.tokenizer import ByteTokenizer

PROMPTS = [
    "import os\n\ndef main(",
    "class Cache:\n    def __init__(self",
    "    return self.",
    "# Copyright",
    "for i in range(",
    "from collections import",
    "    if not isinstance(",
    "def __repr__(self):\n",
]


def prompt_batch(batch: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``batch`` different prompts (cycling through PROMPTS), eos-prefixed and left-padded."""
    tokenizer = ByteTokenizer()
    rows = [[tokenizer.eos_token_id, *tokenizer.encode(PROMPTS[i % len(PROMPTS)])] for i in range(batch)]
    length = max(map(len, rows))
    ids = torch.tensor([[tokenizer.pad_token_id] * (length - len(row)) + row for row in rows])
    mask = torch.tensor([[0] * (length - len(row)) + [1] * len(row) for row in rows])
    return ids, mask


def hardware() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    amx = cpuinfo.is_file() and " amx" in cpuinfo.read_text()
    return (
        f"torch {torch.__version__}, transformers {transformers.__version__}, cpu capability "
        f"{torch.backends.cpu.get_cpu_capability()}, AMX {'yes' if amx else 'no'}, threads {torch.get_num_threads()}"
    )


def runners(
    model: torch.nn.Module, reference: torch.nn.Module, new_tokens: int, args: argparse.Namespace
) -> dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]]:
    """Every implementation as (ids, mask) -> generated ids (N, L + new_tokens)."""

    def zoo_generate(compile: bool) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
        return lambda ids, mask: model.generate(ids, new_tokens, temperature=0, attention_mask=mask, compile=compile)

    def hf_generate(**options: object) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
        # min_new_tokens and no eos: exactly new_tokens tokens, as zoo without eos_token_id
        return lambda ids, mask: reference.generate(
            ids,
            attention_mask=mask,
            max_new_tokens=new_tokens,
            do_sample=False,
            eos_token_id=None,
            pad_token_id=ByteTokenizer.pad_token_id,
            **options,
        )

    impls = {"zoo": zoo_generate(False), "transformers": hf_generate()}
    if args.compile:
        impls["zoo compile"] = zoo_generate(True)
    if args.hf_static:
        impls["transformers static"] = hf_generate(cache_implementation="static")
    return impls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--new-tokens", type=int, default=256)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--compile", action="store_true", help="also time zoo's compiled decode step")
    parser.add_argument("--hf-static", action="store_true", help="also time transformers' static cache")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(hardware())
    model = zoo.load("moe_lm.stdlib")
    with tempfile.TemporaryDirectory() as directory:
        zoo.export_hf(model, directory)
        reference = transformers.MixtralForCausalLM.from_pretrained(directory).eval()
    impls = runners(model, reference, args.new_tokens, args)
    print(
        f"moe_lm.stdlib, greedy, {args.new_tokens} new tokens, median of {args.repeats} runs; "
        "transformers: its default generate (DynamicCache)"
    )
    print(f"{'batch':>5}  " + "".join(f"{name + ' tok/s':>26}" for name in impls) + f"{'zoo / transformers':>20}")
    for batch in args.batches:
        ids, mask = prompt_batch(batch)
        outputs = {name: run(ids, mask) for name, run in impls.items()}  # warm-up (and compilation)
        for name, out in outputs.items():
            assert torch.equal(out, outputs["zoo"]), f"batch {batch}: {name} generated other tokens than zoo"
        times: dict[str, list[float]] = {name: [] for name in impls}
        for _ in range(args.repeats):
            for name, run in impls.items():
                start = time.perf_counter()
                run(ids, mask)
                times[name].append(time.perf_counter() - start)
        rates = {name: batch * args.new_tokens / statistics.median(t) for name, t in times.items()}
        print(
            f"{batch:>5}  "
            + "".join(f"{rate:>26.1f}" for rate in rates.values())
            + f"{rates['zoo'] / rates['transformers']:>19.2f}x"
        )


if __name__ == "__main__":
    main()
