"""Beyond one machine, on 127.0.0.1: two torchrun agents as two nodes (c10d rendezvous, Gloo)
train as one process with the whole batch would, even when a worker is killed mid-epoch
(``--max-restarts 1``: the group comes back and resumes from its last checkpoint by itself), and
so does FSDP2 sharding the MoE language model over two processes of one node; a node that never
comes back ends the run with one line, its checkpoint kept. Every subprocess is bounded."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parent.parent
# Ceilings, not waits: a run ends as soon as it is done. Generous, for a busy machine (beside two
# busy loops on 2 cores, torch's import alone took 9 s; an agent takes longer than that to start).
TIMEOUT_S = 300  # one torchrun agent's whole run
JOIN_S = 120  # --rdzv-conf join_timeout where no test waits for it to run out: the nodes meet well within it

SCRIPT = textwrap.dedent(
    """
    import os, signal, sys
    from pathlib import Path
    import torch
    import torch.nn as nn
    import zoo
    from zoo.errors import run_command
    from zoo.training.loop.records.checkpoint import elastic_resume, full_model_state
    from zoo.training.loop.trainer import Trainer, TrainConfig

    def main(kind, batch_size, out_dir, kill_at=0, how="worker"):
        torch.set_num_threads(1)
        torch.manual_seed(0)
        g = torch.Generator().manual_seed(1)
        if kind == "lm":  # the MoE language model, sharded block by block with FSDP2
            model = zoo.load("moe_lm", pretrained=False, hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=2,
                             intermediate_size=32, num_experts=4, vocab_size=64, max_position_embeddings=16,
                             router_aux_loss_coef=0.0, router_z_loss_coef=0.0)  # batch statistics: off
            tokens = torch.randint(0, 64, (16, 9), generator=g)
            data = [{"input_ids": t[:-1], "labels": t[1:]} for t in tokens]
        else:
            model = zoo.load("resnet20", pretrained=False, in_chans=1, num_classes=3)
            for m in model.modules():
                if isinstance(m, nn.BatchNorm2d):
                    m.requires_grad_(False)  # batch statistics differ per process; frozen BN doesn't use them
            data = torch.utils.data.TensorDataset(torch.randn(32, 1, 8, 8, generator=g),
                                                  torch.randint(0, 3, (32,), generator=g))
        sharded = kind == "lm" and os.environ.get("WORLD_SIZE") == "2"
        config = TrainConfig(epochs=2, batch_size=batch_size, optimizer="sgd", lr=0.1, weight_decay=1e-3,
                             scheduler="none", precision="fp32", checkpoint_every=2, distributed="fsdp" if sharded else "auto",
                             progress=False, tensorboard=False, plot=False, out_dir=out_dir)
        resumes = elastic_resume(out_dir)
        trainer = Trainer(model, config)
        if kill_at:
            step, marker = trainer.train_step, Path(out_dir).parent / f"killed-{how}"
            def train_step(batches):
                if trainer.state.global_step == kill_at and trainer.rank == 1 and not marker.exists():
                    marker.touch()
                    if how == "node":  # the node's agent and its worker: nothing restarts there
                        os.kill(os.getppid(), signal.SIGKILL)
                    os.kill(os.getpid(), signal.SIGKILL)
                return step(batches)
            trainer.train_step = train_step
        trainer.fit(data)
        state = full_model_state(trainer.wrapped, sharded=trainer.fsdp)
        result = {"model": state, "world": trainer.world_size, "resumed": resumes,
                  "history": [row["train_loss"] for row in trainer.state.history]}
        return result, trainer.rank

    if __name__ == "__main__":
        def job():
            result, rank = main(sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[5]), sys.argv[6])
            if rank == 0:
                torch.save(result, sys.argv[4])
            return 0
        sys.exit(run_command(job))
    """
)


def load_script(path: Path):
    path.write_text(SCRIPT)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# A plain torchrun agent that imports torch first (seconds on a busy machine), then waits: as the
# host (argv[1] "hosts") until the other agent has imported torch too (it touches argv[2]), as
# the other ("joins") until the host's store listens at port argv[3]; then it is torchrun's
# agent on argv[5:]. The rendezvous's join_timeout then starts with both agents ready to meet.
AGENT = textwrap.dedent(
    """
    import socket, sys, time
    from pathlib import Path
    from torch.distributed import run

    role, ready, port, deadline = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]), time.monotonic() + float(sys.argv[4])

    def listening():
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", port)) == 0

    if role == "joins":
        ready.touch()
    while not (ready.exists() if role == "hosts" else listening()):
        if time.monotonic() > deadline:
            sys.exit(f"agent ({role}): the other agent was not ready in time")
        time.sleep(0.05)
    sys.argv = ["torchrun", *sys.argv[5:]]
    run.main()
    """
)


def torchrun(
    script: Path | str, args: list[str], *options: str, launcher: str = "torch.distributed.run"
) -> subprocess.Popen:
    """A torchrun agent on 127.0.0.1 running ``script`` with ``args``, its output piped; each
    round of its rendezvous with its own store (TORCH_DISABLE_SHARE_RDZV_TCP_STORE: with one
    store for every round, a restarted worker read the address a dead one had left there and
    Gloo could not connect, on one node as on two). ``launcher``: a module and its arguments
    (``python -m``), or `AGENT`'s command line (``-c``)."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
    start = ["-c", AGENT, *launcher.split()[1:]] if launcher.startswith("AGENT ") else ["-m", *launcher.split()]
    command = [sys.executable, *start, "--monitor-interval", "0.5", *options, str(script), *args]
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finished(agents: list[subprocess.Popen]) -> list[subprocess.CompletedProcess]:
    """Wait for every agent (all killed when one overruns `TIMEOUT_S`)."""
    done = []
    for agent in agents:
        try:
            out, err = agent.communicate(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            for other in agents:
                other.kill()
                other.communicate()
            raise
        done.append(subprocess.CompletedProcess(agent.args, agent.returncode, out, err))
    return done


def hosting(agent: subprocess.Popen, port: int) -> subprocess.Popen:
    """``agent`` once it listens on ``port`` (it hosts the rendezvous's store), or once it ended."""
    deadline = time.monotonic() + TIMEOUT_S
    while agent.poll() is None and time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.1)
    return agent


def two_nodes(
    script: Path, args: list[str], max_restarts: int, join_timeout: float = JOIN_S
) -> list[subprocess.CompletedProcess]:
    """Two torchrun agents on 127.0.0.1, one worker each, meeting at a c10d rendezvous. The first
    starts first and hosts the store, so the host is node 0 (ranks follow the agents' pids): a
    test that kills node 1 never kills the store (plain torchrun's agent left without its store
    ends in torch's traceback, its worker stopped before it could say why: the CI run of stop 59).
    Both are `AGENT`s: the host's rendezvous starts once the other has imported torch, and the
    other joins as soon as the store listens, so ``join_timeout`` (also how long a node left
    waits for a lost one) need not cover an agent's start on a busy machine (it did not: 10 s)."""
    port, ready = free_port(), script.parent / f"agent-ready-{script.stem}"
    rendezvous = ["--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-conf"]
    options = ["--nnodes", "2", "--nproc-per-node", "1", *rendezvous, f"join_timeout={join_timeout:g}"]
    options += ["--max-restarts", str(max_restarts)]
    first = torchrun(script, args, *options, launcher=f"AGENT hosts {ready} {port} {TIMEOUT_S}")
    return finished([first, torchrun(script, args, *options, launcher=f"AGENT joins {ready} {port} {TIMEOUT_S}")])


def same_weights(one: dict, two: dict) -> None:
    assert one["world"] == 1 and two["world"] == 2
    for key, value in one["model"].items():
        torch.testing.assert_close(two["model"][key], value, rtol=1e-5, atol=1e-6, msg=key)
    assert two["history"] == pytest.approx(one["history"], rel=1e-5)


def test_two_nodes_recover_from_a_killed_worker_and_equal_one_process(tmp_path: Path) -> None:
    """Two nodes, 4 steps an epoch, a checkpoint every 2: node 1's worker is killed (SIGKILL) as
    step 7 starts; both agents restart their workers (node 0's for the membership change), which
    resume from step 6 by themselves and end as one process with the whole batch does."""
    script = tmp_path / "elastic_run.py"
    module = load_script(script)
    one, _ = module.main("cnn", 8, str(tmp_path / "one/out"))  # one process, the whole batch
    args = ["cnn", "4", str(tmp_path / "two/out"), str(tmp_path / "two.pt"), "6", "worker"]
    nodes = two_nodes(script, args, 1)
    assert all(node.returncode == 0 for node in nodes), [node.stderr[-3000:] for node in nodes]
    assert (tmp_path / "two/killed-worker").exists()
    two = torch.load(tmp_path / "two.pt", weights_only=True)
    assert two["resumed"] and not one["resumed"]
    same_weights(one, two)


def test_a_killed_worker_recovers_by_itself_fsdp2_moe_lm_equal_to_one_process(tmp_path: Path) -> None:
    """FSDP2 shards the MoE language model over 2 processes, 4 steps an epoch, a checkpoint
    every 2: worker 1 is killed (SIGKILL) as step 7 starts; the agent restarts the group, which
    resumes from step 6 by itself and ends as one process with the whole batch does."""
    script = tmp_path / "elastic_run.py"
    module = load_script(script)
    one, _ = module.main("lm", 4, str(tmp_path / "one/out"))
    args = ["lm", "2", str(tmp_path / "two/out"), str(tmp_path / "two.pt"), "6", "worker"]
    (done,) = finished([torchrun(script, args, "--standalone", "--nproc-per-node", "2", "--max-restarts", "1")])
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "two/killed-worker").exists()
    two = torch.load(tmp_path / "two.pt", weights_only=True)
    assert two["resumed"] and not one["resumed"]
    same_weights(one, two)


def test_a_node_that_never_comes_back_ends_the_run_in_one_line(tmp_path: Path) -> None:
    """Node 1's agent and worker are killed at step 7: node 0 says so in one line, keeps the
    step-6 checkpoint, and its agent gives up when the rendezvous times out (10 s after it restarts)."""
    script = tmp_path / "elastic_run.py"
    load_script(script)
    out = tmp_path / "run/out"
    node0, node1 = two_nodes(script, ["cnn", "4", str(out), str(tmp_path / "two.pt"), "6", "node"], 1, 10)
    assert node0.returncode != 0 and node1.returncode != 0
    lines = [line for line in node0.stderr.splitlines() if line.startswith("zoo: error:")]
    assert len(lines) == 1, node0.stderr[-3000:]
    assert lines[0].startswith("zoo: error: another process of the 2-process group "), lines[0]
    assert f"its last checkpoint {out / 'checkpoints/last.pt'} is kept" in lines[0]
    checkpoint = torch.load(out / "checkpoints/last.pt", weights_only=True)
    assert checkpoint["state"]["global_step"] == 6  # the last good checkpoint, whole


def test_an_elastic_group_without_its_own_store_per_round_is_warned() -> None:
    from zoo.training.loop.distributed import restart_note

    assert restart_note({}) is None and restart_note({"TORCHELASTIC_MAX_RESTARTS": "0"}) is None
    assert restart_note({"TORCHELASTIC_MAX_RESTARTS": "3", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}) is None
    note = restart_note({"TORCHELASTIC_MAX_RESTARTS": "3"})
    assert note is not None and "--max-restarts 3" in note and "export TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1" in note


GLOO_LOST = (
    "[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:561] Connection closed by peer "
    "[10.0.0.7]:59308. This is typically caused by a remote worker\nException raised from recvBytes at "
    "/__w/pytorch/pytorch/torch/csrc/distributed/c10d/Utils.hpp:790 (most recent call first):\n"
    "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x9d (0x7faa in libc10.so)\n"
    "frame #1: <unknown function> + 0x6940cdd (0x7fa9 in libtorch_cpu.so)\n"
)


def test_a_lost_peer_is_named_without_cpp_frames_and_says_how_to_resume(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker's line names the peer's address, quotes Gloo without its source path or C++
    frames, and says --resume where torchrun does not restart (--max-restarts 0)."""
    from zoo.training.loop.distributed import lost_peer

    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints/last.pt").write_bytes(b"x")
    monkeypatch.setenv("TORCHELASTIC_MAX_RESTARTS", "0")
    error = lost_peer(RuntimeError(GLOO_LOST), 2, tmp_path)
    text = str(error)
    assert "another process of the 2-process group (at 10.0.0.7:59308) is gone" in text, text
    assert "pair.cc" not in text and "frame #" not in text and "Exception raised from" not in text, text
    assert "start the same torchrun command again on every node with --resume" in text, text
    monkeypatch.setenv("TORCHELASTIC_MAX_RESTARTS", "2")
    assert "--resume" not in str(lost_peer(RuntimeError(GLOO_LOST), 2, tmp_path))


def test_an_error_with_cpp_frames_is_one_line_without_them(capsys: pytest.CaptureFixture) -> None:
    from zoo.errors import run_command

    def fails() -> int:
        raise RuntimeError(GLOO_LOST)

    assert run_command(fails, prog="zoo finetune") == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line == (
        "zoo finetune: error: Connection closed by peer [10.0.0.7]:59308. This is typically caused by a remote worker"
    )


def finetune_data(path: Path) -> Path:
    """64 8x8 grey images of 3 classes as a tensor file: enough steps to lose a node mid-run."""
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (64, 8, 8), dtype=torch.uint8, generator=g)
    torch.save({"x": x, "y": torch.arange(64) % 3, "classes": ["a", "b", "c"]}, path)
    return path


def kill_node(agent: subprocess.Popen) -> None:
    """SIGKILL a torchrun agent and its workers, as a lost machine would."""
    workers = subprocess.run(["pgrep", "-P", str(agent.pid)], capture_output=True, text=True).stdout.split()
    for pid in [*map(int, workers), agent.pid]:
        with contextlib.suppress(ProcessLookupError):  # gone already (a worker may end first): not an error
            os.kill(pid, signal.SIGKILL)


def stopped(agents: list[subprocess.Popen]) -> list[str]:
    """Each agent's stderr, once it ended: those still running killed with their workers first."""
    for agent in agents:
        if agent.poll() is None:
            kill_node(agent)
    return [agent.communicate(timeout=TIMEOUT_S)[1] for agent in agents]


@pytest.mark.parametrize("lost", ["the rendezvous host", "the other node"])
def test_zoo_torchrun_ends_a_lost_node_in_zoo_lines_without_cpp_frames(tmp_path: Path, lost: str) -> None:
    """Two `zoo torchrun` agents run zoo finetune as two nodes; one node (agent and worker) is
    killed mid-run. The node left ends in zoo's lines, no traceback and no C++ frames: its
    worker's (the peer gone, the checkpoint kept, --resume) and, when the rendezvous's host was
    lost, its agent's, with the command that resumes."""
    data, out = finetune_data(tmp_path / "data.pt"), tmp_path / "out"
    port = free_port()
    endpoint = f"127.0.0.1:{port}"
    options = ["--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint]
    # join_timeout: the second agent joins once it has imported torch twice (its check of the store
    # is a process of its own), 20 s and more on a busy machine; nothing here waits for it to run out
    options += ["--rdzv-conf", f"join_timeout={JOIN_S}", "--max-restarts", "0", "-m"]
    args = ["resnet20", "--scratch", "--data", str(data), "--out", str(out), "--epochs", "50", "--batch-size", "4"]
    args += ["--no-progress", "--no-post-training", "--no-tensorboard", "--checkpoint-every", "2", "--num-workers", "0"]
    agents = [hosting(torchrun("zoo.training.finetune", args, *options, launcher="zoo torchrun"), port)]
    agents.append(torchrun("zoo.training.finetune", args, *options, launcher="zoo torchrun"))  # the first hosts
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while not (out / "checkpoints/last.pt").exists() and time.monotonic() < deadline:
            if any(agent.poll() is not None for agent in agents):  # one ended before the run's first checkpoint
                break
            time.sleep(0.2)
        if not (out / "checkpoints/last.pt").exists():
            pytest.fail(f"no checkpoint came; the agents said: {[err[-2000:] for err in stopped(agents)]}")
        victim, survivor = agents if lost == "the rendezvous host" else agents[::-1]
        kill_node(victim)
        victim.communicate(timeout=TIMEOUT_S)
        (done,) = finished([survivor])
    finally:
        stopped(agents)  # none left running when a step above failed
    lines = done.stderr.splitlines()
    assert done.returncode == 2 and lines, done.stderr[-3000:]
    assert "Traceback" not in done.stderr and "frame #" not in done.stderr, done.stderr[-3000:]
    assert all(line.startswith(("zoo finetune: error: ", "zoo torchrun: error: ")) for line in lines), lines
    # the worker's line or, when the agent stopped it before it said its own, the agent's
    assert any(f"last checkpoint {out / 'checkpoints/last.pt'} is kept" in line for line in lines), lines
    if lost == "the rendezvous host":
        # the agent adds its line when it meets the lost store before its worker's exit: a race
        # (a run of the suite had the worker's line alone, which says --resume too)
        agent = [line for line in lines if line.startswith("zoo torchrun: error: ")]
        assert agent in ([], [lines[-1]]), lines
        assert agent or "again on every node with --resume" in lines[-1], lines
        if agent:
            assert lines[-1].startswith(f"zoo torchrun: error: lost the rendezvous at {endpoint} "), lines
            assert f"--out {out} " in lines[-1] and lines[-1].endswith(
                "--num-workers 0 --resume` again on every node (the --rdzv-endpoint node first)"
            ), lines
    else:
        assert lines == [line for line in lines if line.startswith("zoo finetune: error: another process")], lines


def test_zoo_torchrun_says_each_agent_failure_in_one_line() -> None:
    """A worker that said why itself (exit 2) is not said again; one killed otherwise, and a
    rendezvous that timed out or was lost, are one line each with the command that resumes."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure
    from torch.distributed.elastic.rendezvous.api import RendezvousConnectionError, RendezvousTimeoutError

    from zoo.cli.torchrun_command import LaunchError, _SaidByWorker, again, launch_error, torchrun_parser

    command = "zoo torchrun --nnodes 2 --rdzv-endpoint node0:29400 -m zoo.training.finetune resnet20 --out runs/a"
    parsed = torchrun_parser().parse_args(command.split()[2:])
    restart = again(command, parsed)
    assert restart == f"start `{command} --resume` again on every node (the --rdzv-endpoint node first)"

    def failed(code: int) -> ChildFailedError:
        return ChildFailedError("zoo.training.finetune", {1: ProcessFailure(0, 4242, code, "<N/A>")})

    assert isinstance(launch_error(failed(2), parsed, restart), _SaidByWorker)
    killed = launch_error(failed(-9), parsed, restart)
    assert isinstance(killed, LaunchError) and str(killed).startswith("worker 1 (pid 4242 on ")
    assert "was killed by SIGKILL; its output above says why; start `zoo torchrun" in str(killed)
    timed_out = str(launch_error(RendezvousTimeoutError("x"), parsed, restart))
    assert timed_out.startswith("the rendezvous at node0:29400 timed out waiting for the other nodes")
    assert f"the run's last checkpoint {Path('runs/a/checkpoints/last.pt')} is kept: start `" in timed_out
    cause = RuntimeError("Failed to recv\nException raised from recvBytes at Utils.hpp:790\nframe #0: c10::Error")
    lost = RendezvousConnectionError("The connection to the C10d store has failed.")
    lost.__cause__ = cause
    text = str(launch_error(lost, parsed, restart))
    assert text.startswith("lost the rendezvous at node0:29400 (the node that hosts it is gone") and "frame" not in text
