"""``precision="auto"``: the fastest way to train this model on this machine, measured on the
run's own batches at the start of `Trainer.fit`.

Each candidate `Setting` (fp32; bf16 autocast where the CPU or GPU runs bf16 natively;
channels_last on image batches; ``torch.compile`` of the model when the run is long enough
to earn its compile time back; on CUDA also TF32 and fp16 with a GradScaler) trains the same
few batches from the same weights, through the Trainer's own `Trainer.train_step`; the model,
optimizer, EMA and step count are restored after each. A candidate whose losses depart from
fp32's by more than `LOSS_TOLERANCE` is dropped, one whose first timed step is more than
`HOPELESS` times fp32's is stopped there; fp32 and the two fastest of the rest are timed again
in turns (`final_round`), and the fastest by those times trains. The probe spends what it may
save over the run (`zoo.training.loop.probe_gain`): a run too short for even fp32's probe and
one more to pay off trains in fp32, and each setting is tried only when what it could save
covers its probe's cost, as fp32's probe measured it, and a compiled one its compile's (what
this machine's last compile of the model cost, `compile_cost_s`, or `COMPILE_GUESS_S` before
any). Choices are remembered per machine, model and input shape in
``$ZOO_HOME/train_speed.json`` (one from a search that left candidates untried stands until a
run that would try them: longer, or with a compile's cost now known to be lower), as
`zoo.optimize` remembers its own; a remembered choice is used
only after its loss on the run's first batches is checked against fp32's again (another model
of the same key may train differently in it), else the search runs anew. An explicit
``precision`` skips all this. With ``num_workers=None`` the same first batches say whether the
loader needs worker processes (`choose_workers`).
"""

from __future__ import annotations

import contextlib
import copy
import importlib
import json
import logging
import math
import os
import statistics
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from tqdm.auto import tqdm

from zoo.deploy.optimize_report import Candidate, OptimizeReport, read_entry, remembered, write_cache, write_entry
from zoo.deploy.optimized import quiet_logger
from zoo.devices import cpu_features
from zoo.training.loop import probe_gain
from zoo.training.loop.distributed import from_first_process, wrap_model
from zoo.training.loop.meter import EpochMeter
from zoo.training.loop.speed_settings import Setting, candidates

if TYPE_CHECKING:
    from zoo.training.loop.epochs import Epochs

Trainer = Any  # a zoo.training.loop.trainer.Trainer (which imports this module)

log = logging.getLogger(__name__)

CACHE_FILE = "train_speed.json"
PROBE_SHARE = 0.05  # of the run's estimated time, at most, spent choosing the loader's workers
LOSS_TOLERANCE = 0.05  # largest relative gap between a candidate's mean probe loss and fp32's
HOPELESS = 2.0  # a first timed step this many times fp32's median ends the candidate's trial
WARMUP_STEPS = 1  # untimed steps per candidate (a compiled one compiles its graphs there)
TIMED_STEPS = 3
RECHECK_STEPS = 2  # steps of a remembered choice and of fp32 whose losses are compared again (`rechecked`)
NOT_TRIED = "not tried"
COMPILE_GUESS_S = 30.0  # what a compile is assumed to cost before one is measured here
MAX_COMPILE_S = 3600.0  # a remembered compile cost above this is an edited file's
FINAL_ROUNDS = 3  # of `final_round`, at most
SETTLED = 1.5  # the fastest this many times quicker than each other finalist in two windows: no more rounds
LOADING_SHARE = 0.05  # loading a batch in the main process up to this share of a step: no workers
WORKER_START_S = 1.0  # what starting a loader worker costs (a process importing torch); each evaluation starts one


@dataclass
class Trial:
    """One candidate's probe: seconds of each timed step and the loss of every step."""

    seconds: list[float]
    losses: list[float]
    note: str = ""
    rounds: int = 0  # of `final_round` whose times its seconds hold
    warmup_s: float | None = None  # of its untimed first steps, a compile's included

    @property
    def median_s(self) -> float | None:
        return statistics.median(self.seconds) if self.seconds else None

    @property
    def compile_s(self) -> float | None:
        """What compiling cost in the first steps: their time beyond as many timed steps."""
        if self.warmup_s is None or self.median_s is None:
            return None
        return max(self.warmup_s - WARMUP_STEPS * self.median_s, 0.0)


def loss_gap(trial: Trial, reference: Trial) -> float:
    """Relative gap between the mean losses of the steps both ran (inf when one is not finite)."""
    n = min(len(trial.losses), len(reference.losses))
    if n == 0:
        return math.inf
    mine, theirs = sum(trial.losses[:n]) / n, sum(reference.losses[:n]) / n
    if not (math.isfinite(mine) and math.isfinite(theirs)):
        return math.inf
    return abs(mine - theirs) / max(abs(theirs), 1e-8)


def judge(settings: Sequence[Setting], trials: Sequence[Trial]) -> list[Candidate]:
    """The candidates as measured: speed-up over the reference (the first), loss gap, and
    whether each passed (finite losses within `LOSS_TOLERANCE` of fp32's, a full trial)."""
    reference = trials[0]
    result = []
    for setting, trial in zip(settings, trials):
        gap = loss_gap(trial, reference)
        candidate = Candidate(setting.name, trial.median_s, loss_gap=gap if math.isfinite(gap) else None)
        if trial.note:
            candidate.note = trial.note
        elif gap > LOSS_TOLERANCE:
            candidate.note = f"its loss departs from fp32's by {gap:.1%} (tolerance {LOSS_TOLERANCE:.0%})"
        else:
            candidate.passed = True
            rounds = f"{trial.rounds} round{'s' if trial.rounds > 1 else ''}"
            candidate.note = f"timed again in turns with the fastest ({rounds})" if trial.rounds else ""
        if candidate.median_s and reference.median_s:
            candidate.speedup = reference.median_s / candidate.median_s
        result.append(candidate)
    return result


def fastest(candidates: Sequence[Candidate]) -> Candidate:
    """The fastest candidate that passed (the fp32 reference passes by definition)."""
    passed = [c for c in candidates if c.passed and c.median_s]
    return min(passed, key=lambda c: c.median_s) if passed else candidates[0]


def use_setting(trainer: Trainer, setting: Setting) -> None:
    """Run ``trainer``'s steps under ``setting`` from now on: memory format, compiled or not,
    autocast, GradScaler, TF32 (CUDA). A DDP model whose memory format this changes is wrapped
    again by the caller (`tune`): DDP's gradient buckets take the layout they found."""
    model = trainer.model
    model.to(memory_format=torch.channels_last if setting.channels_last else torch.contiguous_format)
    if setting.compile != trainer.setting.compile:
        if setting.compile:
            with quiet_logger("torch.utils.cpp_extension"):  # inductor imports it: a CPU machine's CUDA_HOME notice
                importlib.import_module("torch.utils.cpp_extension")
            model.compile(backend=trainer.config.compile_backend, mode=compile_mode(trainer))
        else:
            model._compiled_call_impl = None  # what nn.Module.compile set
    if trainer.device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = setting.tf32
    trainer.scaler = torch.amp.GradScaler(trainer.device.type, enabled=setting.precision == "fp16")
    trainer.setting = setting


def compile_mode(trainer: Trainer) -> str | None:
    """Inductor's "reduce-overhead" (CUDA graphs) on one CUDA GPU with one batch per optimizer
    step: there a small model's step is bound by launching its kernels (a ResNet-20 step at batch
    128 keeps an H200 busy 16% of its time, results page); torch.compile's default elsewhere."""
    cfg = trainer.config
    graphs = trainer.device.type == "cuda" and cfg.compile_backend == "inductor"
    return "reduce-overhead" if graphs and trainer.world_size == 1 and cfg.accum_steps == 1 else None


def tune(trainer: Trainer, epochs: Epochs, train_set: Any) -> None:
    """Before the first epoch: the fastest setting (``precision="auto"``) and the loader's
    workers (``num_workers=None``), measured on the run's first batches. Under torchrun with DDP
    the first process measures alone (`alone`) and every process trains with its choice
    (`from_first_process`); FSDP trains in fp32 and the loaders of a torchrun group keep no workers."""
    if trainer.world_size > 1 and trainer.fsdp:
        log.info("precision auto: fp32 under FSDP; pass --precision to choose")
        return
    epochs.sampler.set_epoch(0)
    started = time.perf_counter()
    batches = first_batches(epochs.loader, WARMUP_STEPS + TIMED_STEPS)
    load_s = (time.perf_counter() - started) / max(len(batches), 1)
    step_s = None
    if trainer.config.precision == "auto":
        report = None
        if trainer.is_main:
            with alone(trainer):
                report = choose(trainer, batches, epochs.total_steps)
        trainer.speed_report = report = from_first_process(report, trainer.world_size, trainer.device)
        setting = Setting.from_name(report.precision) or trainer.setting
        memory_format_changes = setting.channels_last != trainer.setting.channels_last
        use_setting(trainer, setting)
        if trainer.world_size > 1 and memory_format_changes:  # DDP's buckets follow the gradients' layout
            trainer.wrapped = wrap_model(
                trainer.model, trainer.world_size, False, trainer.device, trainer.config.find_unused_parameters
            )
        step_s = next((c.median_s for c in report.candidates if c.name == report.precision), None)
        if trainer.config.progress and trainer.is_main:
            how = f"measured in {time.perf_counter() - started:.1f} s"
            how = "remembered, its loss checked again" if report.cached else how
            tqdm.write(f"precision auto: {report.precision} ({report.speedup:.2f}x fp32, {how})")
    if trainer.config.num_workers is None and trainer.world_size == 1:
        choose_workers(trainer, epochs, train_set, batches, load_s, step_s)


@contextlib.contextmanager
def alone(trainer: Trainer) -> Iterator[None]:
    """``trainer``'s steps on its bare model, without DDP and its collectives, for a probe in one
    process of a torchrun group (the others wait in `from_first_process`)."""
    wrapped, world_size = trainer.wrapped, trainer.world_size
    trainer.wrapped, trainer.world_size = trainer.model, 1
    try:
        yield
    finally:
        trainer.wrapped, trainer.world_size = wrapped, world_size


def choose_workers(
    trainer: Trainer, epochs: Epochs, train_set: Any, batches: list[Any], load_s: float, step_s: float | None
) -> None:
    """No loader workers while a batch loads (``load_s``) in `LOADING_SHARE` of a step, no core is
    spare, or an epoch's loading costs less than starting one (`WORKER_START_S`); else enough for
    the spare cores. The step is timed here unless the precision probe did; a short run keeps none."""
    if step_s is None and epochs.total_steps * PROBE_SHARE >= WARMUP_STEPS + TIMED_STEPS:
        trial = probe(trainer, trainer.setting, batches, None)
        if trainer.setting.compile and trial.compile_s is not None:  # compiled by hand: its cost is kept too
            remember_compile(trainer, batches[0], trial.compile_s)
        step_s = trial.median_s
    if not step_s:
        trainer.loading_note = "0 workers (the run is too short to measure)"
        return
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    spare = cores - (torch.get_num_threads() if trainer.device.type == "cpu" else 1)
    share = load_s / step_s
    epoch_s = load_s * len(epochs.loader)
    workers = 0 if share <= LOADING_SHARE or spare < 1 or epoch_s < WORKER_START_S else min(spare, math.ceil(share) + 1)
    trainer.loading_note = (
        f"{workers} workers (a batch loads in {load_s * 1e3:.1f} ms in the main process, "
        f"{share:.0%} of a {step_s * 1e3:.0f} ms step, {epoch_s:.2f} s an epoch; {spare} of {cores} cores not computing)"
    )
    if workers:
        trainer.num_workers = workers
        options = {"persistent_workers": trainer.config.persistent_workers, "drop_last": epochs.loader.drop_last}
        epochs.loader = trainer._loader(train_set, epochs.sampler, epochs.generator, **options)


def choose(trainer: Trainer, batches: list[Any], total_steps: int) -> OptimizeReport:
    """The fastest setting for ``trainer`` on this machine: remembered, or measured on the
    run's first ``batches`` when its ``total_steps`` may pay for the probe (`probe_gain`); the
    trainer is left as it was, its setting unchanged (see `use_setting`)."""
    steps_each = WARMUP_STEPS + TIMED_STEPS
    cfg, device = trainer.config, trainer.device
    image, fixed = is_image_batch(batches[0]), len({describe(b) for b in batches}) == 1
    settings, skipped = candidates(device, image, fixed, cfg.channels_last, cfg.compile)
    report = OptimizeReport(settings[0].name, 1.0, [], cpu_features().capability, cpu_features().amx, str(device))
    report.baseline = "fp32"
    report.cache_key = cache_key(trainer, batches[0], settings)
    known = remembered(report.cache_key, CACHE_FILE)
    kind = probe_gain.device_kind(device)
    compile_s = compile_cost_s(trainer, batches[0])
    short = probe_gain.probe_worth_it(total_steps, settings, kind, 2 * steps_each)
    # a choice from a search that left candidates untried stands until a run that would try them
    if (
        known is not None
        and Setting.from_name(known[0]) in settings
        and not would_try_more(known[1], settings, kind, total_steps, compile_s)
    ):
        # remembered for a model of the same key, which may train differently: its loss is
        # checked against fp32's on this run's batches before it is used
        if short is None and rechecked(trainer, settings[0], Setting.from_name(known[0]), batches):  # type: ignore[arg-type]
            report.precision, report.candidates, report.cached = known[0], known[1], True
            report.speedup = next((c.speedup for c in known[1] if c.speedup and c.name == known[0]), 1.0)
            return report
    if short is not None:
        report.candidates = [Candidate(settings[0].name, passed=True, note="the reference")] + [
            Candidate(s.name, note=short) for s in settings[1:]
        ]
        return report
    trials = run_trials(trainer, settings, batches, total_steps, compile_s)
    measured = judge(settings, trials)
    chosen = fastest(measured)
    report.candidates = measured + [Candidate(name, note=why) for name, why in skipped.items()]
    report.precision, report.speedup = chosen.name, chosen.speedup or 1.0
    write_cache(report.cache_key, chosen.name, report.candidates, CACHE_FILE)
    return report


def rechecked(trainer: Trainer, reference: Setting, setting: Setting, batches: list[Any]) -> bool:
    """Whether ``setting``'s losses on the first `RECHECK_STEPS` of ``batches`` stay within
    `LOSS_TOLERANCE` of ``reference``'s (always for the reference itself); logged when they do
    not. Two steps each, so a remembered choice costs a short run little (four each, eight
    steps, were 4% of a 200-step run)."""
    if setting == reference:
        return True
    batches = batches[:RECHECK_STEPS]
    gap = loss_gap(probe(trainer, setting, batches, None), probe(trainer, reference, batches, None))
    if gap <= LOSS_TOLERANCE:
        return True
    shown = f"{gap:.1%}" if math.isfinite(gap) else "a loss that is not finite"
    log.warning(
        "precision auto: the remembered %s departs from fp32's loss on this model by %s (tolerance %s); "
        "measuring again",
        setting.name,
        shown,
        f"{LOSS_TOLERANCE:.0%}",
    )
    return False


def run_trials(
    trainer: Trainer, settings: Sequence[Setting], batches: list[Any], total_steps: int, compile_s: float
) -> list[Trial]:
    """Probe each setting in turn, the first (fp32) being the reference: its probe's measured
    cost and step time say which others may save more over the run than their probe costs
    (`probe_gain.left_untried`; ``compile_s`` on top for a compiled one, then what a compile
    here measured); the rest are not tried."""
    started = time.perf_counter()
    trials = [probe(trainer, settings[0], batches, None)]
    probe_s, reference_s = time.perf_counter() - started, trials[0].median_s or 0.0
    kind = probe_gain.device_kind(trainer.device)
    for setting in settings[1:]:
        timed = [(s, t) for s, t in zip(settings, trials) if t.median_s and not t.note]
        best_s = min(t.median_s for _, t in timed if loss_gap(t, trials[0]) <= LOSS_TOLERANCE)
        measured = [(s, t.median_s) for s, t in timed]
        if note := probe_gain.left_untried(setting, kind, total_steps, measured, best_s, probe_s, compile_s):
            trials.append(Trial([], [], note))
            continue
        try:
            trials.append(probe(trainer, setting, batches, HOPELESS * reference_s))
            if setting.compile and trials[-1].compile_s is not None:
                compile_s = remember_compile(trainer, batches[0], trials[-1].compile_s)
        except Exception as error:  # noqa: BLE001 - a candidate that fails is recorded, the run goes on
            trials.append(Trial([], [], f"failed: {type(error).__name__}: {' '.join(str(error).split())[:160]}"))
    fastest_s = min((t.median_s for t in trials if t.median_s and not t.note), default=reference_s)
    # the final round when what the fastest saves over the run covers it and the probe so far
    final_round(
        trainer, settings, trials, batches, total_steps * (reference_s - fastest_s) - (time.perf_counter() - started)
    )
    return trials


def final_round(
    trainer: Trainer, settings: Sequence[Setting], trials: list[Trial], batches: list[Any], left_s: float
) -> None:
    """Time fp32 and the two fastest candidates that passed again, in turns (a warm-up and a
    timed step each, up to `FINAL_ROUNDS` rounds, each round starting one further along), when the
    probe's budget has ``left_s`` for it: a burst of other work during one candidate's probe
    then cannot decide alone; a round that agrees with the first probe by `SETTLED` ends it (a
    round of two cost a 200-step run 3%), its times joining the first's. Losses stay the first."""
    reference = trials[0]
    passed = [
        i for i, t in enumerate(trials) if i and t.seconds and not t.note and loss_gap(t, reference) <= LOSS_TOLERANCE
    ]
    finalists = [0, *sorted(passed, key=lambda i: trials[i].median_s or math.inf)[:2]]
    if len(finalists) < 2 or not reference.seconds:
        return
    if FINAL_ROUNDS * (WARMUP_STEPS + 1) * sum(trials[i].median_s or 0.0 for i in finalists) > left_s:
        return
    seconds: dict[int, list[float]] = {i: [] for i in finalists}
    leader = settled({i: trials[i].seconds for i in finalists})
    for rounds in range(1, FINAL_ROUNDS + 1):
        turn = (rounds - 1) % len(finalists)
        for i in finalists[turn:] + finalists[:turn]:
            seconds[i] += probe(trainer, settings[i], batches[: WARMUP_STEPS + 1], None).seconds
        if leader is not None and settled(seconds) == leader:  # two windows apart agree by a wide margin:
            seconds = {i: trials[i].seconds + seconds[i] for i in finalists}  # the median of both, not one step
            break
    for i in finalists:
        trials[i] = Trial(seconds[i], trials[i].losses, rounds=rounds)


def settled(seconds: dict[int, list[float]]) -> int | None:
    """The fastest, when each of its timed steps is `SETTLED` times quicker than all others'."""
    best = min(seconds, key=lambda i: statistics.median(seconds[i]))
    return best if all(min(s) > SETTLED * max(seconds[best]) for i, s in seconds.items() if i != best) else None


def probe(trainer: Trainer, setting: Setting, batches: list[Any], hopeless_s: float | None) -> Trial:
    """Train ``batches`` one optimizer step each under ``setting``, timing all but the first
    `WARMUP_STEPS`; stopped when a timed step takes over ``hopeless_s``."""
    seconds: list[float] = []
    losses: list[float] = []
    warmup_s = 0.0
    with trying(trainer, setting):
        for index, batch in enumerate(batches):
            start = time.perf_counter()
            (output,) = trainer.train_step([batch])
            losses.append(float(output.loss.detach()))  # waits for the device
            if index < WARMUP_STEPS:
                warmup_s += time.perf_counter() - start
                continue
            seconds.append(time.perf_counter() - start)
            if hopeless_s is not None and seconds[-1] > hopeless_s:
                slower = seconds[-1] / hopeless_s * HOPELESS
                return Trial(
                    seconds, losses, f"stopped: its first timed step took {slower:.1f}x fp32's", warmup_s=warmup_s
                )
    return Trial(seconds, losses, warmup_s=warmup_s)


@contextlib.contextmanager
def trying(trainer: Trainer, setting: Setting) -> Iterator[None]:
    """``trainer`` under ``setting`` for a probe, then back as it was: weights and buffers,
    optimizer and EMA state, step count, setting."""
    before = trainer.setting
    model_state = copy.deepcopy(trainer.model.state_dict())
    optimizer_state = copy.deepcopy(trainer.optimizer.state_dict())
    ema_state = copy.deepcopy(trainer.ema.state_dict()) if trainer.ema is not None else None
    step = trainer.state.global_step
    try:
        use_setting(trainer, setting)
        yield
    finally:
        use_setting(trainer, before)
        trainer.model.load_state_dict(model_state)
        trainer.optimizer.load_state_dict(optimizer_state)
        if ema_state is not None:
            trainer.ema.load_state_dict(ema_state)
        trainer.state.global_step = step
        trainer._meter = EpochMeter()  # what the probe's steps counted is forgotten


def first_batches(loader: Any, count: int) -> list[Any]:
    """The loader's first ``count`` batches (its batches again, in turn, when it has fewer)."""
    batches: list[Any] = []
    while len(batches) < count:
        before = len(batches)
        for batch in loader:
            batches.append(batch)
            if len(batches) == count:
                break
        if len(batches) == before:
            break
    return batches


def is_image_batch(batch: Any) -> bool:
    """Whether the batch's input (its first element) is a 4-D floating-point tensor."""
    first = batch[0] if isinstance(batch, (tuple, list)) and batch else batch
    return isinstance(first, torch.Tensor) and first.ndim == 4 and first.is_floating_point()


def describe(batch: Any) -> str:
    """The shapes and dtypes of a batch's tensors (a graph batch by its type and size)."""
    if isinstance(batch, torch.Tensor):
        return f"{tuple(batch.shape)} {str(batch.dtype).removeprefix('torch.')}"
    if isinstance(batch, (tuple, list)):
        return "(" + ", ".join(describe(b) for b in batch) + ")"
    if isinstance(batch, dict):
        return "{" + ", ".join(f"{k}: {describe(v)}" for k, v in sorted(batch.items())) + "}"
    return f"{type(batch).__name__}({getattr(batch, 'num_nodes', '')})"


def cache_key(trainer: Trainer, batch: Any, settings: Sequence[Setting] | None) -> str:
    """What the choice depends on: machine, threads, torch, model, step, the first batch's
    shapes, the optimizer and the settings there were to try (None: the key of what a compile
    of this model costs here, `compile_cost_s`)."""
    device = trainer.device
    device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    model = trainer.model
    params = sum(p.numel() for p in model.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    parts = {
        "device": device_name,
        "cpu": str(cpu_features()),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "model": f"{type(model).__name__} {params} params, {trainable} trainable",
        "step": type(trainer.step_fn).__name__,
        "optimizer": type(trainer.optimizer).__name__,
        "batch": describe(batch),
        "settings": ",".join(s.name for s in settings) if settings is not None else "compile seconds",
    }
    return json.dumps(parts, sort_keys=True)


def compile_cost_s(trainer: Trainer, batch: Any) -> float:
    """What compiling this model cost on this machine the last time it was measured (a probe
    of a compiled setting, or the first steps of a run compiled by hand), else `COMPILE_GUESS_S`."""
    seconds = read_entry(cache_key(trainer, batch, None), CACHE_FILE)
    valid = isinstance(seconds, int | float) and not isinstance(seconds, bool) and 0 <= seconds <= MAX_COMPILE_S
    return float(seconds) if valid else COMPILE_GUESS_S


def remember_compile(trainer: Trainer, batch: Any, seconds: float) -> float:
    """Keep ``seconds`` as what a compile of this model costs here (`compile_cost_s`); returned."""
    write_entry(cache_key(trainer, batch, None), lambda _: round(min(seconds, MAX_COMPILE_S), 3), CACHE_FILE)
    return seconds


def would_try_more(
    known: Sequence[Candidate], settings: Sequence[Setting], kind: str, total_steps: int, compile_s: float
) -> bool:
    """Whether this run would try a candidate the remembered search left "not tried", judged
    on that search's own step times (`probe_gain.left_untried`) with ``compile_s``."""
    timed = [(Setting.from_name(c.name), c) for c in known if c.median_s]
    measured = [(s, c.median_s) for s, c in timed if s is not None]
    passed = [c.median_s for s, c in timed if s is not None and c.passed]
    if not measured or not passed or measured[0][0] != settings[0]:
        return True  # nothing to judge by: search again
    probe_s = (WARMUP_STEPS + TIMED_STEPS) * measured[0][1]
    untried = [Setting.from_name(c.name) for c in known if c.note.startswith(NOT_TRIED)]
    return any(
        probe_gain.left_untried(s, kind, total_steps, measured, min(passed), probe_s, compile_s) is None
        for s in untried
        if s in settings
    )
