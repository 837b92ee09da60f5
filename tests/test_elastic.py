"""Beyond one machine, on 127.0.0.1: two torchrun agents as two nodes (c10d rendezvous, Gloo)
train as one process with the whole batch would, even when a worker is killed mid-epoch
(``--max-restarts 1``: the group comes back and resumes from its last checkpoint by itself), and
so does FSDP2 sharding the MoE language model over two processes of one node; a node that never
comes back ends the run with one line, its checkpoint kept. Every subprocess is bounded."""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parent.parent
TIMEOUT_S = 150

SCRIPT = textwrap.dedent(
    """
    import os, signal, sys
    from pathlib import Path
    import torch
    import torch.nn as nn
    import zoo
    from zoo.errors import run_command
    from zoo.training.loop.checkpoint import elastic_resume, full_model_state
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


def torchrun(script: Path, args: list[str], *options: str) -> subprocess.Popen:
    """A torchrun agent on 127.0.0.1 running ``script`` with ``args``, its output piped; each
    round of its rendezvous with its own store (TORCH_DISABLE_SHARE_RDZV_TCP_STORE: with one
    store for every round, a restarted worker read the address a dead one had left there and
    Gloo could not connect, on one node as on two)."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
    command = [sys.executable, "-m", "torch.distributed.run", "--monitor-interval", "0.5", *options, str(script), *args]
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


def two_nodes(script: Path, args: list[str], max_restarts: int) -> list[subprocess.CompletedProcess]:
    """Two torchrun agents on 127.0.0.1, one worker each, meeting at a c10d rendezvous."""
    rendezvous = ["--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{free_port()}", "--rdzv-conf"]
    options = ["--nnodes", "2", "--nproc-per-node", "1", *rendezvous, "join_timeout=10"]
    return finished([torchrun(script, args, *options, "--max-restarts", str(max_restarts)) for _ in range(2)])


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
    step-6 checkpoint, and its agent gives up when the rendezvous times out."""
    script = tmp_path / "elastic_run.py"
    load_script(script)
    out = tmp_path / "run/out"
    node0, node1 = two_nodes(script, ["cnn", "4", str(out), str(tmp_path / "two.pt"), "6", "node"], 1)
    assert node0.returncode != 0 and node1.returncode != 0
    lines = [line for line in node0.stderr.splitlines() if line.startswith("zoo: error:")]
    assert len(lines) == 1, node0.stderr[-3000:]
    assert "another process of the 2-process group is gone" in lines[0]
    assert f"its last checkpoint {out / 'checkpoints/last.pt'} is kept" in lines[0]
    checkpoint = torch.load(out / "checkpoints/last.pt", weights_only=True)
    assert checkpoint["state"]["global_step"] == 6  # the last good checkpoint, whole


def test_an_elastic_group_without_its_own_store_per_round_is_warned() -> None:
    from zoo.training.loop.distributed import restart_note

    assert restart_note({}) is None and restart_note({"TORCHELASTIC_MAX_RESTARTS": "0"}) is None
    assert restart_note({"TORCHELASTIC_MAX_RESTARTS": "3", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}) is None
    note = restart_note({"TORCHELASTIC_MAX_RESTARTS": "3"})
    assert note is not None and "--max-restarts 3" in note and "export TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1" in note
