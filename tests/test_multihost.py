"""Two local CPU processes run the RL stage as two hosts of one jax.distributed job."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest

from _multihost import REPO, free_port, host_env, launch

pytestmark = pytest.mark.integration  # whole pipelines / subprocess launches: CONTRIBUTING.md tiers

RL_FLAGS = ("--config.method=seed_no_sft", "--config.rl.num_updates=2", "--stages=rl,eval")


def _launch(tmp_path, *flags: str, hosts: int = 2) -> None:
    """Run the tiny search run (by default the RL stage, then eval) as ``hosts`` local processes
    of one jax.distributed job (one process: a plain launch)."""
    launch(tmp_path, *(flags or RL_FLAGS), hosts=hosts)


@pytest.mark.slow
def test_two_process_rl_stage(tmp_path):
    _launch(tmp_path)
    assert (tmp_path / "rl" / "final_model" / "model.safetensors").exists()
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if "train/loss" in r]
    assert [r["step"] for r in train] == [1, 2]
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
    _launch(tmp_path, *RL_FLAGS, "--config.rl.tasks_per_update=1", "--config.sampler.backend=scan")
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if "train/loss" in r]
    assert [r["step"] for r in train] == [1, 2]
    for r in train:
        assert math.isfinite(r["train/loss"]) and r["train/optimizer_steps"] >= 1
        assert r["rollout/trajectories"] == 2  # host 0 (which writes the metrics): 1 task x 2 rollouts
    assert (tmp_path / "rl" / "final_model" / "model.safetensors").exists()


@pytest.mark.slow
def test_collection_annotation_and_evaluation_split_across_hosts(tmp_path):
    """Reference: the same stages (collect, annotate, eval; 2 tasks x 2 episodes, 2 eval tasks) in
    one process. Two hosts each run one task's episodes (`host_share`, numbered as in one run) and
    host 0 writes every host's results: the files hold the same trajectories, skill records and
    evaluation as the one-process run."""
    flags = ("--stages=collect,annotate,eval",)
    _launch(tmp_path / "one", *flags, hosts=1)
    _launch(tmp_path / "two", *flags)
    for name in ("stage1/trajectories.jsonl", "stage1/sft.jsonl", "eval/final_hotpotqa.trajectories.jsonl"):
        one = [json.loads(line) for line in (tmp_path / "one" / name).read_text().splitlines()]
        two = [json.loads(line) for line in (tmp_path / "two" / name).read_text().splitlines()]
        assert len(one) == (2 if name.startswith("eval") else 4)
        assert [r["traj_id"] for r in two] == [r["traj_id"] for r in one]
        if "trajectories" in name:
            assert {r["group_id"] for r in one} == {0, 1}
            for a, b in zip(two, one):
                assert [s["response_ids"] for s in a["steps"]] == [s["response_ids"] for s in b["steps"]]
                assert a["episode_reward"] == b["episode_reward"]
        else:
            assert two == one
    res = [json.loads((tmp_path / d / "eval" / "final_hotpotqa.json").read_text())["results"]["overall"]
           for d in ("one", "two")]
    assert res[1]["n"] == res[0]["n"] == 2 and res[1] == res[0]


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
    port = free_port()
    procs = []
    for pid in range(2):
        env = {**host_env(port, pid), "XLA_FLAGS": ""}
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


GATHER_WORKER = """
import json, sys
from seed_jax.train.mesh import maybe_initialize_distributed
maybe_initialize_distributed()
import jax
from seed_jax.pipeline.multihost import gather_lines
mine = [["one", "zwei \u00fc\u2603", ""], json.loads(sys.argv[2])][jax.process_index()]
got = gather_lines(mine, chunk_bytes=5)
open(sys.argv[1] + f"/host{jax.process_index()}.json", "w").write(json.dumps(got))
"""


@pytest.mark.parametrize("second", [[], ["x" * 23, "y"]])
def test_two_hosts_gather_each_others_lines(tmp_path, second):
    """Host 0's 3 lines (one non-ASCII, one empty) and host 1's lines (none, or 2 longer than a
    5-byte chunk) reach both hosts, host 0's first, through chunked all-gathers."""
    port = free_port()
    procs = [subprocess.Popen([sys.executable, "-c", GATHER_WORKER, str(tmp_path), json.dumps(second)], cwd=REPO,
                              env={**host_env(port, pid), "XLA_FLAGS": ""}, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for pid in range(2)]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    for p, out in zip(procs, outs):
        assert p.returncode == 0, out[-3000:]
    want = ["one", "zwei \u00fc\u2603", "", *second]
    for pid in range(2):
        assert json.loads((tmp_path / f"host{pid}.json").read_text()) == want


@pytest.mark.parametrize("n, hosts, want", [
    (5, 1, [(0, 5)]), (5, 2, [(0, 3), (3, 5)]), (1, 2, [(0, 1), (1, 1)]),
    (10, 4, [(0, 3), (3, 5), (5, 8), (8, 10)]), (2, 4, [(0, 1), (1, 1), (1, 2), (2, 2)])])
def test_host_shares_are_contiguous_and_cover_every_item_once(n, hosts, want):
    """Hand-computed shares ceil(i n / H) .. ceil((i + 1) n / H) for 1, 2 and 4 hosts."""
    from seed_jax.pipeline.multihost import host_share

    assert [(s.start, s.stop) for s in (host_share(n, hosts, h) for h in range(hosts))] == want
