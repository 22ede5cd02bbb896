"""Two local CPU processes run the RL stage as two hosts of one jax.distributed job."""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _host_env(port: int, pid: int) -> dict:
    """Process ``pid`` of a two-process jax.distributed job on this machine's CPU."""
    return {**os.environ, "JAX_COORDINATOR_ADDRESS": f"127.0.0.1:{port}", "JAX_NUM_PROCESSES": "2",
            "JAX_PROCESS_ID": str(pid), "JAX_PLATFORMS": "cpu", "PYTHONUNBUFFERED": "1",
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}


def _two_hosts(tmp_path, *flags: str) -> None:
    """Run the RL stage (then eval) as two local processes of one jax.distributed job."""
    port = _free_port()
    procs = []
    for pid in range(2):
        env = _host_env(port, pid)
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


PASS_WORKER = """
import sys
import numpy as np
from seed_jax.train.mesh import maybe_initialize_distributed
maybe_initialize_distributed()
import jax
from seed_jax.train.logprobs import compute_logprobs
from seed_jax.train.mesh import make_mesh
from seed_jax.train.synthetic import random_params, synthetic_seed_batch, tiny_config
cfg = tiny_config()
pid = jax.process_index()
rows = [3, 0][pid] if sys.argv[2] == "empty" else [3, 5][pid]
b = synthetic_seed_batch(10 + pid, max(rows, 1), 7, 6, 7, cfg.vocab_size)
ids, mask = np.asarray(b.student_ids)[:rows], np.asarray(b.student_mask)[:rows]
mesh = make_mesh(data=1, fsdp=2)  # one device per process: params sharded over both
logp = compute_logprobs(random_params(cfg, 0), cfg, ids, mask, 7, 6, micro_batch=4, mesh=mesh)
np.savez(sys.argv[1] + f"/host{pid}.npz", logp=logp, ids=ids, mask=mask)
"""


@pytest.mark.parametrize("case", ["rows", "empty"])
def test_log_prob_passes_of_two_hosts_run_together(tmp_path, case):
    """Two processes (one CPU device each) score their own rows in passes over the 2-device mesh:
    3 and 5 rows in global passes of 4 (2 per host; host 0 runs out first and fills), or a host
    with no rows taking part; each host's log-probs equal the one-process pass of its rows."""
    port = _free_port()
    procs = []
    for pid in range(2):
        env = {**_host_env(port, pid), "XLA_FLAGS": ""}
        procs.append(subprocess.Popen([sys.executable, "-c", PASS_WORKER, str(tmp_path), case], cwd=REPO, env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outs = [p.communicate(timeout=300)[0] for p in procs]
    for p, out in zip(procs, outs):
        assert p.returncode == 0, out[-3000:]
    from seed_jax.train.logprobs import compute_logprobs
    from seed_jax.train.synthetic import random_params, tiny_config

    cfg = tiny_config()
    params = random_params(cfg, 0)
    for pid, n in enumerate([3, 0] if case == "empty" else [3, 5]):
        got = np.load(tmp_path / f"host{pid}.npz")
        assert got["logp"].shape == (n, 6)
        if n:
            want = compute_logprobs(params, cfg, got["ids"], got["mask"], 7, 6, micro_batch=4)
            np.testing.assert_allclose(got["logp"], want, atol=1e-5, rtol=0)
