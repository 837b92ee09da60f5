"""``precision="auto"`` for training (`zoo.training.loop.speed`): the candidates there are, a
choice that agrees with its own measurements (fixed timings), no pick of a candidate that
failed its loss check, the probe's budget, remembering, a probe that leaves no trace, every
family, and the loader's workers."""

from __future__ import annotations

import argparse
import math

import pytest
import torch
import torch.nn as nn
from test_engine import ALL_FAMILIES, family_case
from torch.utils.data import TensorDataset

import zoo
from zoo.devices import cpu_features
from zoo.errors import InvalidArgumentError
from zoo.training.finetune.options import add_arguments
from zoo.training.loop import probe_gain, speed
from zoo.training.loop.epochs import plan_epochs
from zoo.training.loop.speed import Trial
from zoo.training.loop.speed_settings import Setting, candidates
from zoo.training.loop.trainer import TrainConfig, Trainer

QUIET = dict(progress=False, tensorboard=False, plot=False)
CPU = torch.device("cpu")

pytestmark = pytest.mark.usefixtures("one_thread")


def image_data(n: int = 64) -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    return TensorDataset(torch.randn(n, 1, 8, 8, generator=g), torch.randint(0, 3, (n,), generator=g))


def trainer(**config) -> Trainer:
    torch.manual_seed(0)
    model = zoo.load("resnet20", pretrained=False, in_chans=1, num_classes=3)
    return Trainer(model, TrainConfig(batch_size=8, optimizer="sgd", lr=0.05, **QUIET, **config))


def fixed_trials(times_ms: dict[str, float], losses: dict[str, float] | None = None, clock: list[float] | None = None):
    """A stand-in for `speed.probe`: each setting takes its fixed time (added to ``clock``),
    with its fixed loss."""
    losses = losses or {}

    def probe(trainer, setting, batches, hopeless_s):
        seconds = times_ms[setting.name] / 1e3
        if clock is not None:
            clock[0] += seconds * len(batches)
        return Trial([seconds] * speed.TIMED_STEPS, [losses.get(setting.name, 1.0)] * len(batches))

    return probe


def every_candidate(monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe tries every candidate, on however short a run."""
    monkeypatch.setattr(probe_gain, "probe_worth_it", lambda *a: None)
    monkeypatch.setattr(probe_gain, "left_untried", lambda *a: None)


@pytest.fixture
def bf16_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ZOO_CPU_FEATURES", "avx512_bf16")


def test_candidates_follow_the_machine_and_the_batches(monkeypatch: pytest.MonkeyPatch, bf16_cpu) -> None:
    settings, skipped = candidates(CPU, image=True, fixed_shapes=True, channels_last=None, compile=None)
    assert settings[0] == Setting("fp32")  # the reference first
    names = {s.name for s in settings}
    assert {"bf16+channels_last", "bf16", "fp32+channels_last", "bf16+channels_last+compile", "fp32+compile"} <= names
    assert not skipped
    # text or graph batches: no NHWC; batches that change shape: no compile
    settings, skipped = candidates(CPU, image=False, fixed_shapes=False, channels_last=None, compile=None)
    assert {s.name for s in settings} == {"fp32", "bf16"} and "compile" in skipped
    # a switch the user set stays as set
    settings, _ = candidates(CPU, image=True, fixed_shapes=True, channels_last=False, compile=False)
    assert {s.name for s in settings} == {"fp32", "bf16"}
    monkeypatch.setenv("ZOO_CPU_FEATURES", "avx2")
    settings, skipped = candidates(CPU, image=True, fixed_shapes=True, channels_last=None, compile=False)
    assert {s.precision for s in settings} == {"fp32"} and "no native bf16" in skipped["bf16"]


def test_setting_names_round_trip() -> None:
    for setting in (Setting(), Setting("bf16", True, True), Setting("fp32", tf32=True), Setting("fp16", True)):
        assert Setting.from_name(setting.name) == setting
    assert Setting.from_name("int8") is None and Setting.from_name("bf16+turbo") is None


def choose(tr: Trainer, total_steps: int = 100_000):
    epochs = plan_epochs(image_data(), tr.config, 1, 0, tr._loader)
    return speed.choose(tr, speed.first_batches(epochs.loader, 4), total_steps)


def test_the_choice_agrees_with_its_own_measurements(monkeypatch: pytest.MonkeyPatch, bf16_cpu) -> None:
    times = {"fp32": 100, "bf16+channels_last": 40, "bf16": 55, "fp32+channels_last": 80}
    losses = {"fp32": 2.0, "bf16+channels_last": 2.5, "bf16": 2.02}  # bf16+channels_last departs by 25%
    monkeypatch.setattr(speed, "probe", fixed_trials(times, losses))
    report = choose(trainer(compile=False))
    by_name = {c.name: c for c in report.candidates}
    assert report.precision == "bf16" and report.speedup == pytest.approx(100 / 55)
    assert (
        not by_name["bf16+channels_last"].passed
        and "departs from fp32's by 25.0%" in by_name["bf16+channels_last"].note
    )
    passed = [c for c in report.candidates if c.passed]
    assert min(passed, key=lambda c: c.median_s).name == report.precision  # the fastest that passed
    for c in passed:
        assert c.speedup == pytest.approx(by_name["fp32"].median_s / c.median_s)
    assert "chose bf16 (1.82x fp32)" in str(report)


def test_a_final_round_in_turns_decides_between_the_fastest(monkeypatch: pytest.MonkeyPatch, bf16_cpu) -> None:
    """bf16 looks fastest in its own probe (a quiet moment) and is slower when timed again in turns
    with fp32 and the runner-up: the final round's times decide, and the report shows them."""
    first = {"fp32": 100, "bf16+channels_last": 60, "bf16": 40, "fp32+channels_last": 80}
    again = {"fp32": 100, "bf16+channels_last": 60, "bf16": 90}
    calls: list[str] = []

    def probe(trainer, setting, batches, hopeless_s):
        seen = setting.name in calls
        calls.append(setting.name)
        seconds = (again if seen else first)[setting.name] / 1e3
        return Trial([seconds] * (len(batches) - speed.WARMUP_STEPS), [1.0] * len(batches))

    monkeypatch.setattr(speed, "probe", probe)
    every_candidate(monkeypatch)  # bf16, expected slower than bf16+channels_last's 60, would not be tried
    report = choose(trainer(compile=False))
    by_name = {c.name: c for c in report.candidates}
    rounds = [calls[4:7], calls[7:10], calls[10:]]  # the finalists in turns, each round one further along
    assert rounds == [
        ["fp32", "bf16", "bf16+channels_last"],
        ["bf16", "bf16+channels_last", "fp32"],
        ["bf16+channels_last", "fp32", "bf16"],
    ]
    assert report.precision == "bf16+channels_last" and by_name["bf16"].median_s == pytest.approx(0.090)
    assert "timed again in turns" in by_name["bf16"].note and by_name["fp32+channels_last"].note == ""
    assert report.speedup == pytest.approx(100 / 60) and "ok (timed again in turns" in str(report)


def test_a_final_round_that_agrees_by_a_wide_margin_is_not_repeated(
    monkeypatch: pytest.MonkeyPatch, tmp_path, bf16_cpu
) -> None:
    """bf16 + channels_last at 2.5x fp32 in its probe and again in the first round in turns: the
    two other rounds are not run, the report says one and its times are the median of both
    windows' steps; at 1.4x (under `SETTLED`) all three are."""

    homes: list = []

    def run(first: dict[str, float], again: dict[str, float]) -> tuple[list[str], dict]:
        calls: list[str] = []

        def probe(trainer, setting, batches, hopeless_s):
            seconds = (again if setting.name in calls else first)[setting.name] / 1e3
            calls.append(setting.name)
            return Trial([seconds] * (len(batches) - speed.WARMUP_STEPS), [1.0] * len(batches))

        monkeypatch.setattr(speed, "probe", probe)
        monkeypatch.setenv("ZOO_HOME", str(tmp_path / f"home{len(homes)}"))  # nothing remembered
        homes.append(tmp_path)
        every_candidate(monkeypatch)
        report = choose(trainer(compile=False))
        return calls, {c.name: c for c in report.candidates}

    wide = {"fp32": 200, "bf16+channels_last": 80, "bf16": 200, "fp32+channels_last": 190}
    calls, by_name = run(wide, wide)
    assert calls[4:] == ["fp32", "bf16+channels_last", "fp32+channels_last"]  # one round of the finalists
    assert by_name["bf16+channels_last"].note == "timed again in turns with the fastest (1 round)"
    assert by_name["bf16+channels_last"].speedup == pytest.approx(200 / 80)
    calls, by_name = run(wide, {**wide, "bf16+channels_last": 70})  # the median of both windows' steps
    assert len(calls) == 4 + 3 and by_name["bf16+channels_last"].speedup == pytest.approx(200 / 80)
    close = {"fp32": 112, "bf16+channels_last": 80, "bf16": 200, "fp32+channels_last": 190}
    calls, by_name = run(close, close)
    assert len(calls) == 4 + 3 * 3 and "(3 rounds)" in by_name["bf16+channels_last"].note
    # the first probe agrees by a wide margin, the round in turns does not: the other rounds run
    calls, by_name = run(wide, {**wide, "fp32": 100})
    assert len(calls) == 4 + 3 * 3 and by_name["bf16+channels_last"].speedup == pytest.approx(100 / 80)
    # each window settled, on different leaders: every round runs, and the rounds decide
    calls, by_name = run(wide, {**wide, "fp32": 40})
    assert len(calls) == 4 + 3 * 3 and by_name["bf16+channels_last"].speedup == pytest.approx(40 / 80)


def test_a_candidate_with_a_non_finite_loss_is_never_picked(monkeypatch: pytest.MonkeyPatch, bf16_cpu) -> None:
    times = {"fp32": 100, "bf16+channels_last": 10, "bf16": 20, "fp32+channels_last": 90}
    monkeypatch.setattr(speed, "probe", fixed_trials(times, {"bf16+channels_last": math.nan, "bf16": math.inf}))
    report = choose(trainer(compile=False))
    assert report.precision == "fp32+channels_last"
    assert all(not c.passed for c in report.candidates if c.name.startswith("bf16"))


def test_a_run_is_probed_when_what_it_may_save_pays_for_the_probe(monkeypatch: pytest.MonkeyPatch, bf16_cpu) -> None:
    """The threshold follows the run's length and the expected gain: on a CPU with native bf16,
    bf16+channels_last is expected at 1.86x fp32 (2.33x at most), so a run of n steps may save
    n * 0.57 steps' time, against the 8 steps of fp32's probe and one more: 15 steps pay, 14 do not."""
    monkeypatch.setattr(speed, "probe", fixed_trials({"fp32": 100, "bf16+channels_last": 50, "bf16": 60}))
    assert choose(trainer(compile=False), total_steps=15).candidates[1].median_s
    short = choose(trainer(compile=False), total_steps=14)
    assert short.precision == "fp32" and all(
        "not measured: the probe's 8 steps" in c.note for c in short.candidates[1:]
    )
    assert "could save over this run's 14 steps" in short.candidates[1].note
    # fp32's probe measured (0.4 s on the fixed clock): each other setting is tried only when
    # what it could save over the run covers a probe like it (a compile's 30 s guess on top)
    clock = [0.0]
    monkeypatch.setattr(speed.time, "perf_counter", lambda: clock[0])
    times = {"fp32": 100, "bf16+channels_last": 50, "bf16": 60, "fp32+channels_last": 90}
    times |= {"bf16+channels_last+compile": 45, "bf16+compile": 55, "fp32+channels_last+compile": 85}
    monkeypatch.setattr(speed, "probe", fixed_trials(times | {"fp32+compile": 95}, clock=clock))
    partial = choose(trainer(), total_steps=25)
    notes = {c.name: c.note for c in partial.candidates if c.name != "fp32"}
    assert [c.name for c in partial.candidates if c.median_s] == ["fp32", "bf16+channels_last"]
    assert partial.precision == "bf16+channels_last" and partial.speedup == pytest.approx(2.0)  # its own fastest
    assert notes["bf16"].startswith("not needed: at its expected")  # cannot beat 2.0x, however long the run
    assert notes["bf16+channels_last+compile"].startswith("not tried: at its expected")  # 25 steps cannot pay 30 s
    assert "less than its probe's ~30.4 s" in notes["bf16+channels_last+compile"]
    # remembered for runs as short, searched again by one long enough to pay for every probe
    assert speed.remembered(partial.cache_key, speed.CACHE_FILE)[0] == "bf16+channels_last"
    assert choose(trainer(), total_steps=25).cached
    full = choose(trainer(), total_steps=100_000)
    assert not full.cached and full.precision == "bf16+channels_last+compile"
    assert choose(trainer(), total_steps=25).cached  # the longer run's choice now


def test_a_compile_measured_here_replaces_the_guess(monkeypatch: pytest.MonkeyPatch, bf16_cpu) -> None:
    """A short run leaves compiling untried on the 30 s guess; once a compile of this model has
    cost 2 s here (a probe's first step, or a run compiled by hand), a run as short tries it,
    and the choice remembered from the first run no longer stands for it."""
    clock = [0.0]
    monkeypatch.setattr(speed.time, "perf_counter", lambda: clock[0])
    times = {"fp32": 100, "bf16+channels_last": 50, "bf16": 60, "fp32+channels_last": 90}
    times |= {"bf16+channels_last+compile": 35, "bf16+compile": 55, "fp32+channels_last+compile": 85}
    stand_in = fixed_trials(times | {"fp32+compile": 95}, clock=clock)

    def probe(trainer, setting, batches, hopeless_s):
        trial = stand_in(trainer, setting, batches, hopeless_s)
        trial.warmup_s = trial.median_s + (2.0 if setting.compile else 0.0)  # a 2 s compile in the first step
        return trial

    monkeypatch.setattr(speed, "probe", probe)
    first = choose(trainer(), total_steps=300)
    assert first.precision == "bf16+channels_last" and speed.compile_cost_s(trainer(), _batch()) == 30.0
    assert choose(trainer(), total_steps=300).cached  # the guess still says no
    # a compile measured here: 2 s, kept under the model's key (an edited value falls back to the guess)
    assert speed.remember_compile(trainer(), _batch(), 2.0) == 2.0
    assert speed.compile_cost_s(trainer(), _batch()) == 2.0
    again = choose(trainer(), total_steps=300)
    assert not again.cached and again.precision == "bf16+channels_last+compile"
    assert speed.compile_cost_s(trainer(), _batch()) == pytest.approx(2.0)  # what the probe measured, kept
    speed.write_entry(speed.cache_key(trainer(), _batch(), None), lambda _: "soon", speed.CACHE_FILE)
    assert speed.compile_cost_s(trainer(), _batch()) == speed.COMPILE_GUESS_S


def _batch():
    tr = trainer()
    return speed.first_batches(plan_epochs(image_data(), tr.config, 1, 0, tr._loader).loader, 1)[0]


def test_a_run_compiled_by_hand_keeps_what_its_compile_cost(monkeypatch: pytest.MonkeyPatch) -> None:
    """The loader's probe of a run compiled by hand times its first step: the compile is kept."""
    tr = trainer(precision="fp32", channels_last=False, compile=True, compile_backend="eager", max_steps=80)
    assert tr.config.num_workers is None
    tr.fit(image_data(640))
    measured = speed.compile_cost_s(tr, _batch())
    assert measured != speed.COMPILE_GUESS_S and 0.0 <= measured < 30.0


def test_the_gain_rule_scales_its_expectations_by_what_it_measured() -> None:
    """A setting measured at half its expectation halves the others' (the same model gains less
    than the one the priors came from); one that cannot beat the fastest so far is left."""
    kind = "cpu-bf16"
    assert probe_gain.expected_speedup(Setting("bf16", True), kind) == pytest.approx(1.42 * 1.31)
    assert probe_gain.expected_speedup(Setting("fp32"), kind) == 1.0
    half = [(Setting(), 0.1), (Setting("bf16", True), 0.1 / (1.42 * 1.31 / 2))]
    note = probe_gain.left_untried(Setting("fp32", True), kind, 10_000, half, 0.1, 0.4, 30.0)
    assert note is not None and note.startswith("not needed: at its expected 0.82x fp32 at most")  # 1.31 / 2 * 1.25
    assert probe_gain.left_untried(Setting("bf16"), kind, 10_000, half[:1], 0.1, 0.4, 30.0) is None
    assert "~30.4 s" in probe_gain.left_untried(Setting("bf16", False, True), kind, 100, half[:1], 0.1, 0.4, 30.0)


def test_the_choice_is_remembered_per_machine_model_and_shape(monkeypatch: pytest.MonkeyPatch, bf16_cpu) -> None:
    monkeypatch.setattr(speed, "probe", fixed_trials({"fp32": 100, "bf16": 50, "compile": 0}))
    first = choose(trainer(channels_last=False, compile=False))
    assert first.precision == "bf16" and not first.cached

    probed: list[str] = []

    def recheck_only(trainer, setting, batches, hopeless_s):
        probed.append(setting.name)  # a remembered choice is not searched again, its loss only checked
        return Trial([0.01] * speed.TIMED_STEPS, [1.0] * len(batches))

    monkeypatch.setattr(speed, "probe", recheck_only)
    again = choose(trainer(channels_last=False, compile=False))
    assert again.cached and again.precision == "bf16" and again.cache_key == first.cache_key
    assert sorted(probed) == ["bf16", "fp32"]


def test_an_explicit_precision_is_not_measured(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(speed, "choose", lambda *a: pytest.fail("an explicit precision skips the probe"))
    tr = trainer(precision="fp32", max_steps=2)
    tr.fit(image_data(16))
    assert tr.setting == Setting("fp32") and tr.speed_report is None


def test_a_probe_leaves_no_trace(monkeypatch: pytest.MonkeyPatch, bf16_cpu) -> None:
    """auto measures every candidate for real, then trains in fp32 (forced here): the weights
    equal those of a run asked for fp32, bit for bit, so each probe put everything back."""
    every_candidate(monkeypatch)
    monkeypatch.setattr(speed, "fastest", lambda candidates: candidates[0])
    data = image_data(64)
    plain = trainer(precision="fp32", max_steps=10, channels_last=False, compile=False, ema_decay=0.9)
    plain.fit(data)
    auto = trainer(precision="auto", max_steps=10, channels_last=None, compile=False, ema_decay=0.9)
    auto.fit(data)
    measured = [c for c in auto.speed_report.candidates if c.median_s]
    assert {c.name for c in measured} == {"fp32", "bf16", "bf16+channels_last", "fp32+channels_last"}
    assert all(c.loss_gap is not None and c.loss_gap < speed.LOSS_TOLERANCE for c in measured)
    assert auto.setting == Setting("fp32") and auto.state.global_step == 10
    for key, value in plain.model.state_dict().items():
        assert torch.equal(value, auto.model.state_dict()[key]), key
    for key, value in plain.ema.state_dict().items():
        assert torch.equal(value, auto.ema.state_dict()[key]), key


def test_auto_trains_with_what_it_chose(monkeypatch: pytest.MonkeyPatch, bf16_cpu) -> None:
    every_candidate(monkeypatch)
    monkeypatch.setattr(speed, "fastest", lambda candidates: next(c for c in candidates if c.name == "bf16"))
    tr = trainer(max_steps=4, channels_last=False, compile=False)
    autocasts = []
    step = tr.step_fn

    def watched(model: nn.Module, batch):
        autocasts.append(torch.is_autocast_enabled("cpu"))
        return step(model, batch)

    tr.step_fn = watched
    tr.fit(image_data(32))
    assert tr.setting == Setting("bf16")
    assert autocasts[-4:] == [True] * 4  # the run's own steps, after the probe's


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser


def test_the_command_line_defaults_to_auto() -> None:
    args = build_parser().parse_args(["resnet20", "--data", "x", "--out", "o", "--no-channels-last"])
    assert args.precision == "auto" and args.channels_last is False and args.compile is None
    assert args.num_workers is None
    assert build_parser().parse_args(["resnet20", "--data", "x", "--out", "o", "--compile"]).compile is True


@pytest.mark.parametrize(
    ("load_ms", "step_ms", "cores", "workers", "samples"),
    [
        (1, 100, 8, 0, 800),
        (20, 100, 8, 2, 800),
        (250, 100, 8, 4, 800),
        (250, 100, 3, 2, 800),
        (250, 100, 1, 0, 800),
        (250, 100, 2, 0, 800),
        (20, 100, 8, 0, 64),  # 8 batches of 20 ms an epoch: less than starting a worker costs
    ],
)
def test_loader_workers_follow_the_measured_loading_share(
    monkeypatch, load_ms, step_ms, cores, workers, samples
) -> None:
    """No workers while the main process loads a batch in 5% of a step or less, when the
    model's threads use every core, or when an epoch's loading costs less than starting a
    worker; else enough to keep up on the spare cores (the model runs on 1 thread here); the
    loader is rebuilt with them."""
    monkeypatch.setattr(speed.os, "sched_getaffinity", lambda pid: set(range(cores)))
    monkeypatch.setattr(speed.torch, "get_num_threads", lambda: 2 if cores == 2 else 1)
    tr = trainer(precision="fp32")
    data = image_data(samples)
    epochs = plan_epochs(data, tr.config, 1, 0, tr._loader)
    speed.choose_workers(tr, epochs, data, [], load_ms / 1e3, step_ms / 1e3)
    assert tr.num_workers == workers and epochs.loader.num_workers == workers
    assert f"{workers} workers" in tr.loading_note


def test_a_short_run_keeps_the_loader_in_the_main_process() -> None:
    tr = trainer(precision="fp32", max_steps=3)
    tr.fit(image_data(32))
    assert tr.num_workers == 0 and "too short" in tr.loading_note


@pytest.mark.parametrize("name", ALL_FAMILIES)
def test_auto_measures_every_family_and_trains_with_a_candidate_that_passed(name, tmp_path, monkeypatch) -> None:
    """CNNs on image batches, the MoE ViT, the MoE encoder on token batches, a graph model on
    PyG batches, the DBN: each candidate that applies is measured on real steps, and the run
    trains with the fastest that passed its loss check."""
    every_candidate(monkeypatch)
    model, train, val, collate = family_case(name, tmp_path)
    config = TrainConfig(epochs=1, max_steps=4, batch_size=4, compile=False, **QUIET)
    tr = Trainer(model, config, collate_fn=collate)
    history = tr.fit(train, val)
    report = tr.speed_report
    measured = [c for c in report.candidates if c.median_s]
    # what applies follows the CPU's features: bf16 where it is native, NHWC for image batches
    image = name not in ("moe_encoder", "gin_sum", "dbn")
    assert len(measured) >= (2 if cpu_features().bf16 or image else 1) and history[-1]["step"] == 4, str(report)
    chosen = next(c for c in report.candidates if c.name == report.precision)
    assert chosen.passed and chosen is speed.fastest(report.candidates)
    assert tr.setting == Setting.from_name(report.precision)
    if name in ("moe_encoder", "gin_sum", "dbn"):  # NHWC only for image batches
        assert not any("channels_last" in c.name for c in report.candidates)


@pytest.mark.parametrize("switch", [{"channels_last": "yes"}, {"compile": 3}, {"tensorboard": None}])
def test_a_switch_that_is_no_bool_is_refused_by_name(switch) -> None:
    (name,) = switch
    with pytest.raises(InvalidArgumentError, match=f"TrainConfig.{name} .* must be True or False"):
        TrainConfig(**switch)


TORCHRUN_SCRIPT = """
import json, sys
import torch, torch.distributed as dist, torch.nn as nn
import zoo
from zoo.training.loop import speed
from zoo.training.loop.trainer import TrainConfig, Trainer

from zoo.training.loop import probe_gain
probe_gain.probe_worth_it = probe_gain.left_untried = lambda *a: None  # every candidate, on a short run
# the first process picks a channels_last candidate, so the group changes memory format (DDP wrapped again)
speed.fastest = lambda candidates: next(c for c in candidates if "channels_last" in c.name and c.passed)
torch.set_num_threads(1)
torch.manual_seed(0)
model = zoo.load("resnet20", pretrained=False, in_chans=1, num_classes=3)
g = torch.Generator().manual_seed(0)
data = torch.utils.data.TensorDataset(torch.randn(64, 1, 8, 8, generator=g), torch.randint(0, 3, (64,), generator=g))
config = TrainConfig(max_steps=12, batch_size=4, optimizer="sgd", lr=0.05, compile=False, progress=False,
                     tensorboard=False, plot=False)
trainer = Trainer(model, config)
trainer.fit(data)
weights = torch.cat([p.detach().flatten() for p in trainer.model.parameters()])
gathered = [torch.empty_like(weights) for _ in range(trainer.world_size)]
dist.all_gather(gathered, weights)
report = trainer.speed_report
row = {"rank": trainer.rank, "setting": trainer.setting.name, "chosen": report.precision,
       "measured": [c.name for c in report.candidates if c.median_s],
       "ddp": type(trainer.wrapped).__name__, "in_sync": all(torch.equal(w, weights) for w in gathered),
       "loss": trainer.state.history[-1]["train_loss"]}
with open(f"{sys.argv[1]}/rank{trainer.rank}.json", "w") as out:  # a file each: the processes share stdout
    json.dump(row, out)
"""


def test_under_torchrun_the_first_process_measures_and_every_process_trains_with_its_choice(tmp_path) -> None:
    """Two Gloo processes (DDP): the first measures alone, both train with its channels_last
    choice (DDP wrapped again for the new memory format) and stay in sync."""
    import json
    import os
    import subprocess
    import sys

    from test_engine import REPO

    script = tmp_path / "auto_ddp.py"
    script.write_text(TORCHRUN_SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(REPO), "ZOO_HOME": str(tmp_path / "home")}
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(script)]
    done = subprocess.run([*torchrun, str(tmp_path)], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in (0, 1)]
    assert [row["rank"] for row in rows] == [0, 1], rows
    chosen = rows[0]["chosen"]
    assert "channels_last" in chosen and len(rows[0]["measured"]) >= 2, rows[0]
    for row in rows:
        assert row["setting"] == chosen and row["chosen"] == chosen, row  # the first process's choice, everywhere
        assert row["ddp"] == "DistributedDataParallel" and row["in_sync"], row
        assert math.isfinite(row["loss"]), row


@pytest.mark.parametrize(
    ("device", "backend", "world_size", "accum_steps", "mode"),
    [
        ("cuda", "inductor", 1, 1, "reduce-overhead"),  # one GPU, one batch a step: CUDA graphs
        ("cpu", "inductor", 1, 1, None),
        ("cuda", "eager", 1, 1, None),  # a debugging backend has no graphs to replay
        ("cuda", "inductor", 2, 1, None),  # DDP's all-reduce between backward and step
        ("cuda", "inductor", 1, 4, None),  # accumulated gradients outlive a replay
    ],
)
def test_compile_mode_takes_cuda_graphs_only_where_a_step_is_one_replay(device, backend, world_size, accum_steps, mode):
    trainer = argparse.Namespace(
        device=torch.device(device),
        world_size=world_size,
        config=TrainConfig(compile_backend=backend, accum_steps=accum_steps),
    )
    assert speed.compile_mode(trainer) == mode
