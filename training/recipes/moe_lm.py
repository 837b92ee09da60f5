"""Byte-level MoE language model on the Python standard library (``moe_lm.stdlib``), trained
side by side with a dense model of the same active parameters (``moe_lm.stdlib_dense``: every
MoE layer replaced by one SwiGLU MLP as wide as the top-2 experts together) on the same
windows in the same order, with the same steps, batch and schedule. Both cards report both
models' held-out bits per byte.

    python -m zoo.training.recipes.moe_lm stdlib [--steps N] [--out weights/]

The corpus is `zoo.training.data.builtin.stdlib_files` (every ``.py`` file of this interpreter's standard
library outside test, idlelib, lib2to3 and site-packages folders, sorted by path); file i is
test when i % 20 == 0, validation when 1 and training otherwise, files joined by the eos byte.
"""

from __future__ import annotations

import dataclasses
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from torch.utils.data import Dataset

import zoo
from zoo.errors import InvalidArgumentError
from zoo.tokenizer import complete
from zoo.training.data.builtin import stdlib_corpus, stdlib_files
from zoo.training.loop.trainer import TrainConfig, Trainer
from zoo.training.recipes.evaluate import CONTEXT, evaluate, task_key
from zoo.training.recipes.publish import WEIGHTS_DIR, Provenance, Stopwatch, publish, recipe_main

SEED = 0
TARGETS = ("stdlib",)
MOE = dict(
    hidden_size=128,
    num_layers=4,
    num_heads=4,
    num_kv_heads=2,
    intermediate_size=256,
    num_experts=8,
    top_k=2,
    max_position_embeddings=CONTEXT,
)
DENSE = {**MOE, "dense_layers": list(range(MOE["num_layers"]))}  # width top_k x 256: the MoE's active compute
CONFIG = TrainConfig(
    epochs=1,
    batch_size=16,
    optimizer="adamw",
    lr=3e-3,
    weight_decay=0.1,
    scheduler="cosine",
    warmup_epochs=0.05,
    clip_grad_norm=1.0,
    precision="fp32",  # as the published weights were trained (auto would measure)
    seed=SEED,
    log_every=25,
)
STEPS = 1200
SLICE = 64  # test windows the tests re-measure
PROMPT = "def fib("


class RandomWindows(Dataset):
    """``num`` windows of ``CONTEXT + 1`` tokens at seeded random offsets of ``stream``, as
    ``{"input_ids", "labels"}`` for next-token prediction."""

    def __init__(self, stream: torch.Tensor, num: int, seed: int) -> None:
        self.stream = stream
        generator = torch.Generator().manual_seed(seed)
        self.starts = torch.randint(len(stream) - CONTEXT - 1, (num,), generator=generator)

    def __len__(self) -> int:
        return len(self.starts)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        window = self.stream[self.starts[index] : self.starts[index] + CONTEXT + 1].long()
        return {"input_ids": window[:-1], "labels": window[1:]}


def _train(model_kwargs: dict[str, Any], steps: int) -> tuple[torch.nn.Module, dict[int, float], float]:
    """Train one model from seed ``SEED``; returns it, its training loss by step (from its
    TensorBoard log) and its training seconds."""
    torch.manual_seed(SEED)
    model = zoo.load("moe_lm", pretrained=False, **model_kwargs)
    data = RandomWindows(stdlib_corpus("train"), steps * CONFIG.batch_size, SEED)
    val = RandomWindows(stdlib_corpus("val"), 256, SEED + 1)
    clock = Stopwatch()
    with tempfile.TemporaryDirectory(prefix="zoo-moe-lm-") as run_dir:
        Trainer(model, dataclasses.replace(CONFIG, out_dir=run_dir)).fit(data, val)
        events = EventAccumulator(str(Path(run_dir) / "tensorboard"))
        events.Reload()
        curve = {e.step: e.value for e in events.Scalars("step/train_loss")}
    return model.eval(), curve, clock.seconds


def run(
    target: str = "stdlib", steps: int | None = None, out: str = str(WEIGHTS_DIR), command: str | None = None
) -> list[dict[str, Any]]:
    """Train the MoE and the dense model, measure both and publish both; returns their entries."""
    if target not in TARGETS:
        raise InvalidArgumentError(f"no language-model recipe for {target!r}; recipes: {', '.join(TARGETS)}")
    steps = steps or STEPS
    clock = Stopwatch()
    trained = {"moe": _train(MOE, steps), "dense": _train(DENSE, steps)}
    metrics = {
        kind: {
            task_key("stdlib-bytes", None): evaluate(model, "stdlib-bytes"),
            task_key("stdlib-bytes", SLICE): evaluate(model, "stdlib-bytes", SLICE),
        }
        for kind, (model, _, _) in trained.items()
    }
    bpb = {kind: metrics[kind]["stdlib-bytes"]["bits_per_byte"] for kind in trained}
    curve = [
        {"step": step, **{f"{kind}_train_loss": trained[kind][1].get(step) for kind in trained}}
        for step in sorted(trained["moe"][1])
    ]
    files = stdlib_files()
    comparison = ", ".join(
        f"{kind} {bpb[kind]:.4f} ({trained[kind][2] / 60:.1f} min of training, "
        f"{sum(p.numel() for p in trained[kind][0].parameters()):,} parameters)"
        for kind in trained
    )
    entries = []
    for kind, name, kwargs in (("moe", "moe_lm.stdlib", MOE), ("dense", "moe_lm.stdlib_dense", DENSE)):
        model = trained[kind][0]
        sample = complete(model, PROMPT, 160, temperature=0.0)
        provenance = Provenance(
            data=f"{len(files)} .py files of the Python {sys.version.split()[0]} standard library (no test, idlelib, "
            f"lib2to3 or site-packages folders), split by file index mod 20 (0: test, 1: validation): "
            f"{len(stdlib_corpus('train')):,} training bytes, {len(stdlib_corpus('test')):,} test bytes",
            command=command or "python -m zoo.training.recipes.moe_lm stdlib",
            seed=SEED,
            epochs=1,
            wall_time_s=clock.seconds,
            hyperparameters=_hyperparameters(name, kwargs, steps, comparison, sample),
        )
        entries.append(
            publish(
                model,
                name,
                title=f"byte-level {'MoE' if kind == 'moe' else 'dense baseline'} language model on the "
                "Python standard library",
                task="stdlib-bytes",
                metrics=metrics[kind],
                provenance=provenance,
                history=curve,
                curve_x="step",
                model_kwargs=kwargs,
                default=kind == "moe",
                root=out,
            )
        )
    return entries


def _hyperparameters(name: str, kwargs: dict[str, Any], steps: int, comparison: str, sample: str) -> dict[str, str]:
    """How model ``name`` was trained and how it compares, for the card's provenance."""
    return {
        "model": str(kwargs),
        "training": f"{steps} AdamW steps of {CONFIG.batch_size} x {CONTEXT} tokens "
        f"({steps * CONFIG.batch_size * CONTEXT:,} tokens at seeded random offsets), lr {CONFIG.lr}, "
        f"weight decay {CONFIG.weight_decay}, cosine with {CONFIG.warmup_epochs:.0%} warmup, clip "
        f"{CONFIG.clip_grad_norm}, fp32, routing losses with the default coefficients",
        "comparison": "the recipe trains the MoE and a dense model with every MoE layer replaced by a SwiGLU "
        f"MLP of width {MOE['top_k'] * MOE['intermediate_size']} (the active width of the top-2 "
        "experts) on the same windows, in the same order, with the same schedule",
        "held-out bits per byte": comparison,
        f"greedy sample (`zoo generate {name} {PROMPT!r} --temperature 0 --max-new-tokens 160`)": f"`{sample!r}`",
    }


def main(argv: Sequence[str] | None = None) -> int:
    return recipe_main("zoo.training.recipes.moe_lm", __doc__, TARGETS, run, argv, budget="steps", limit=False)


if __name__ == "__main__":
    sys.exit(main())
