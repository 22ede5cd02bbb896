"""Two local CPU processes run the RL stage as two hosts of one jax.distributed job."""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _two_hosts(tmp_path, *flags: str) -> None:
    """Run the RL stage (then eval) as two local processes of one jax.distributed job."""
    port = _free_port()
    procs = []
    for pid in range(2):
        env = {**os.environ, "JAX_COORDINATOR_ADDRESS": f"127.0.0.1:{port}", "JAX_NUM_PROCESSES": "2",
               "JAX_PROCESS_ID": str(pid), "JAX_PLATFORMS": "cpu", "PYTHONUNBUFFERED": "1",
               "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
        cmd = [sys.executable, "-m", "seed_jax.launch", "--config=configs/search.py:tiny", f"--workdir={tmp_path}",
               "--config.method=seed_no_sft", "--config.rl.num_updates=2", "--stages=rl,eval", *flags]
        procs.append(subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True))
    try:
        outs = [p.communicate(timeout=900)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for p, out in zip(procs, outs):
        assert p.returncode == 0, out[-3000:]


@pytest.mark.slow
def test_two_process_rl_stage(tmp_path):
    _two_hosts(tmp_path)
    assert (tmp_path / "rl" / "final_model" / "model.safetensors").exists()
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if "train/loss" in r]
    assert [r["step"] for r in train] == [0, 1]
    # each host rolled out its own share: 2 tasks x 2 rollouts per update, one task per host;
    # the global batch holds both hosts' rows, so the token count exceeds one host's responses
    for r in train:
        assert math.isfinite(r["train/loss"])
        assert r["rollout/trajectories"] == 2  # host 0's share: 1 task x 2 rollouts
        # host 0 alone has 2 trajectories x <= 2 steps x <= 16 response tokens = 64 at most
        assert r["train/tokens"] > 64
    assert json.loads((tmp_path / "stages" / "eval.json").read_text())


@pytest.mark.slow
def test_a_host_without_tasks_trains_on_padding_rows(tmp_path):
    """One task per update for two hosts: host 1 samples nothing and contributes masked rows to
    every optimizer step (instead of raising while host 0 waits in a collective). The sampler is
    the scan backend, whose copy of theta_old every host gathers device to device, then host 0
    samples on its own device."""
    _two_hosts(tmp_path, "--config.rl.tasks_per_update=1", "--config.sampler.backend=scan")
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if "train/loss" in r]
    assert [r["step"] for r in train] == [0, 1]
    for r in train:
        assert math.isfinite(r["train/loss"]) and r["train/optimizer_steps"] >= 1
        assert r["rollout/trajectories"] == 2  # host 0 (which writes the metrics): 1 task x 2 rollouts
    assert (tmp_path / "rl" / "final_model" / "model.safetensors").exists()
