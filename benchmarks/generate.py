"""Greedy generation speed: zoo's ``moe_lm.stdlib`` against the same weights in transformers'
``MixtralForCausalLM`` (exported with ``zoo.export_hf``), side by side in one process.

Batch 1 and 8 (eight different prompts, left-padded with an attention mask), the same prompt
bytes for both (zoo.tokenizer, each prompt preceded by eos as ``zoo generate`` does), a fixed
number of new tokens (no early stop at eos). Both must produce identical tokens; the run fails
otherwise. transformers runs its default ``generate`` (a DynamicCache) and, with
``--hf-static``, also ``cache_implementation="static"``, which transformers compiles on its own
(``torch.compile``, mode "reduce-overhead": CUDA graphs) on a GPU: the strongest configuration
its documentation gives. On a CPU it compiles that only with ``--hf-compile-everywhere`` (a dry
run of the GPU configuration; slow to compile). zoo runs eager and, with ``--compile``, its
torch.compile'd decode step. The warm-up runs (``--warmup``, compilation and CUDA-graph capture
included) are not timed. Runs alternate between the implementations; the table gives the
median tokens/s over the repeats and the ratios of zoo's faster path to transformers' default
and to its static cache.

    .venv/bin/python benchmarks/generate.py [--device cuda] [--new-tokens 256] [--batches 1 8]
        [--repeats 5] [--threads N] [--compile] [--hf-static] [--hf-compile-everywhere]

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


def hardware(device: torch.device) -> str:
    if device.type == "cuda":
        return (
            f"{torch.cuda.get_device_name(device)}, torch {torch.__version__}, CUDA {torch.version.cuda}, "
            f"transformers {transformers.__version__}"
        )
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
        compiled = args.device.type != "cpu" or args.hf_compile_everywhere
        options: dict[str, object] = {"cache_implementation": "static"}
        if args.hf_compile_everywhere:
            config = transformers.CompileConfig()
            config._compile_all_devices = True  # transformers' own switch to compile on a CPU
            options["compile_config"] = config
        impls[f"transformers static ({'compiled' if compiled else 'eager'})"] = hf_generate(**options)
    return impls


def timed(run: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], ids: torch.Tensor, mask: torch.Tensor) -> float:
    """Seconds of one generation, the device synchronised."""
    start = time.perf_counter()
    run(ids, mask)
    if ids.device.type == "cuda":
        torch.cuda.synchronize(ids.device)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", type=torch.device, default=torch.device("cpu"))
    parser.add_argument("--new-tokens", type=int, default=256)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2, help="untimed runs first (compilation, CUDA graphs)")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--compile", action="store_true", help="also time zoo's compiled decode step")
    parser.add_argument("--hf-static", action="store_true", help="also time transformers' static cache")
    parser.add_argument(
        "--hf-compile-everywhere", action="store_true", help="compile transformers' static cache on a CPU too"
    )
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(hardware(args.device))
    model = zoo.load("moe_lm.stdlib")
    with tempfile.TemporaryDirectory() as directory:
        zoo.export_hf(model, directory)
        reference = transformers.MixtralForCausalLM.from_pretrained(directory).eval().to(args.device)
    model = model.to(args.device)
    impls = runners(model, reference, args.new_tokens, args)
    print(
        f"moe_lm.stdlib, greedy, {args.new_tokens} new tokens, median of {args.repeats} runs; "
        "transformers: its default generate (DynamicCache)" + (" and its static cache" if args.hf_static else "")
    )
    static = next((name for name in impls if name.startswith("transformers static")), None)
    print(
        f"{'batch':>5}  "
        + "".join(f"{name + ' tok/s':>38}" for name in impls)
        + f"{'zoo / transformers':>20}"
        + (f"{'zoo / static':>14}" if static else "")
    )
    for batch in args.batches:
        ids, mask = (t.to(args.device) for t in prompt_batch(batch))
        for _ in range(max(1, args.warmup)):  # at least one: its tokens are compared
            outputs = {name: run(ids, mask) for name, run in impls.items()}
        for name, out in outputs.items():
            assert torch.equal(out, outputs["zoo"]), f"batch {batch}: {name} generated other tokens than zoo"
        times: dict[str, list[float]] = {name: [] for name in impls}
        for _ in range(args.repeats):
            for name, run in impls.items():
                times[name].append(timed(run, ids, mask))
        rates = {name: batch * args.new_tokens / statistics.median(t) for name, t in times.items()}
        best = max(rate for name, rate in rates.items() if name.startswith("zoo"))
        print(
            f"{batch:>5}  "
            + "".join(f"{rate:>38.1f}" for rate in rates.values())
            + f"{best / rates['transformers']:>19.2f}x"
            + (f"{best / rates[static]:>13.2f}x" if static else "")
        )


if __name__ == "__main__":
    main()
