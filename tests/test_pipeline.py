"""The SEED pipeline end to end (tiny preset), resume after SIGKILL, and config validation."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from seed_jax.pipeline.validate import ConfigValueError, validate

pytestmark = pytest.mark.integration  # whole pipelines / subprocess launches: CONTRIBUTING.md tiers

REPO = Path(__file__).resolve().parents[1]


def _config(env: str, preset: str = "tiny"):
    import importlib

    return importlib.import_module(f"seed_jax.configs.{env}").get_config(preset)


def _setup(env: str):
    """The tiny preset of ``env``; a random tiny model writes no valid action, so the default OPD
    mask (opd.mask = action: the valid steps' action tokens) is empty: search runs the
    whole-response mask to exercise OPD."""
    config = _config(env)
    if env == "search":
        config.opd.mask = "response"
    return config


@pytest.mark.parametrize("env", ["search", "alfworld", "webshop"])
def test_tiny_pipeline_runs_every_stage(env, tmp_path):
    from seed_jax.launch import run_pipeline
    from seed_jax.metrics import MetricsWriter
    from seed_jax.rollout.trajectory import read_trajectories
    from seed_jax.skills import parse_skill, read_skill_records

    config = _setup(env)
    records = []
    out = run_pipeline(config, tmp_path, rl_callbacks=[records.append])
    assert set(out) == {"collect", "annotate", "sft", "rl", "eval"}
    for stage in out:
        assert json.loads((tmp_path / "stages" / f"{stage}.json").read_text())["wall_s"] >= 0
    trajs = read_trajectories(tmp_path / "stage1" / "trajectories.jsonl")
    assert len(trajs) == config.stage1.num_tasks * config.stage1.group_size
    recs = read_skill_records(tmp_path / "stage1" / "sft.jsonl")
    assert recs and all(parse_skill(r.answer).ok for r in recs)
    for d in ("sft/model", "rl/final_model"):
        assert (tmp_path / d / "config.json").exists() and (tmp_path / d / "tokenizer_config.json").exists()
    rows = MetricsWriter.read(tmp_path)
    rl_rows = [r for r in rows if "train/loss" in r]
    assert [r["step"] for r in rl_rows] == list(range(1, config.rl.num_updates + 1))  # updates counted from 1
    for r in rl_rows:
        for k in ("train/loss", "train/pg_loss", "train/opd_loss", "train/kl", "train/grad_norm", "rollout/success_rate"):
            assert k in r and r[k] is not None and math.isfinite(r[k]), k
        # the OPD branch ran (heuristic skills in the tiny preset); with the action mask on no valid action, idle
        assert r["train/active_share"] > 0 if config.opd.mask == "response" else r["train/active_share"] >= 0
    evals = sorted((tmp_path / "eval").glob("final_*.json"))
    assert evals and (tmp_path / "eval" / "results.md").read_text().count("| final |") >= 1
    for f in evals:
        res = json.loads(f.read_text())["results"]["overall"]
        assert 0.0 <= res["success_rate"] <= 1.0 and res["n"] == config.eval.num_tasks
    skills = [json.loads(line) for line in (tmp_path / "skills.jsonl").read_text().splitlines()]
    assert skills and all({"traj_id", "outcome", "gate"} <= set(s) for s in skills)
    # the RL callback saw every update, with what the run's own writers wrote
    assert [r.update for r in records] == list(range(1, config.rl.num_updates + 1))
    for rec, row in zip(records, rl_rows):
        assert rec.metrics["train/loss"] == pytest.approx(row["train/loss"])
        assert {t.traj_id for t in rec.trajectories} >= {s["traj_id"] for s in skills if s["update"] == rec.update}
        assert any(rec.skills.values()) and rec.gates and rec.step_gates
        gated = {g.traj_id for g in rec.step_gates}
        assert gated == {k for k, v in rec.skills.items() if v}
    gates = [json.loads(line) for line in (tmp_path / "step_gates.jsonl").read_text().splitlines()]
    assert len(gates) == sum(len(r.step_gates) for r in records)
    # the summary names every stage; the search preset's format warm-up joined the SFT
    summary = (tmp_path / "summary.md").read_text()
    assert all(f"- {stage} (" in summary for stage in out) and "peak resident memory" in summary
    assert out["sft"]["format_demonstrations"] == (2 * config.stage1.format_warmup_tasks if env == "search" else 0)
    assert out["sft"]["steps"] > 0 and out["sft"]["peak_rss_mb"] > 0
    # a second launch on the same workdir redoes nothing
    again = run_pipeline(_setup(env), tmp_path)
    assert again == out


def _launch(workdir, *extra, wait=True):
    cmd = [sys.executable, "-m", "seed_jax.launch", "--config=configs/search.py:tiny", f"--workdir={workdir}",
           "--config.method=seed_no_sft", "--config.rl.num_updates=3", "--stages=rl", *extra]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if wait:
        return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)


def _weights(model_dir):
    from safetensors.numpy import load_file

    return load_file(str(Path(model_dir) / "model.safetensors"))


def test_sigkill_during_rl_resumes_to_the_same_result(tmp_path):
    ref = _launch(tmp_path / "ref")
    assert ref.returncode == 0, ref.stderr[-2000:]
    proc = _launch(tmp_path / "killed", wait=False)
    ckpt = tmp_path / "killed" / "rl" / "ckpt" / "1"  # checkpoint n: after update n (1-based)
    deadline = time.time() + 600
    while not ckpt.exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.2)
    assert ckpt.exists(), "no checkpoint appeared"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (tmp_path / "killed" / "rl" / "final_model").exists()
    resumed = _launch(tmp_path / "killed")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "resumed from checkpoint" in resumed.stderr
    a, b = _weights(tmp_path / "ref" / "rl" / "final_model"), _weights(tmp_path / "killed" / "rl" / "final_model")
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def test_low_memory_run_trains_the_same_policy(tmp_path):
    """``low_memory`` (KL reference read from disk per update, compiled programs dropped and read
    back from the persistent cache, checkpoints written before the next update) changes nothing
    the run computes: same KL figures, same final weights."""
    runs = {flag: _launch(tmp_path / flag, f"--config.low_memory={flag}")
            for flag in ("false", "true")}
    for flag, proc in runs.items():
        assert proc.returncode == 0, (flag, proc.stderr[-2000:])
    from seed_jax.metrics import MetricsWriter

    kl = {flag: [r["train/kl"] for r in MetricsWriter.read(tmp_path / flag) if "train/kl" in r] for flag in runs}
    assert len(kl["true"]) == 3 and kl["true"] == kl["false"] and any(k != 0 for k in kl["true"])
    a, b = (_weights(tmp_path / flag / "rl" / "final_model") for flag in ("false", "true"))
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


BAD = [
    ("rl.mini_batch_size", 2, "train.micro_batch_size"),  # mini-batch smaller than the micro-batch
    ("rl.mini_batch_size", 6, "rl.mini_batch_size"),  # not a multiple of the micro-batch
    ("rollout.group_size", 0, "rollout.group_size"),
    ("rollout.top_p", 1.5, "rollout.top_p"),
    ("stage1.heldout_fraction", 1.0, "stage1.heldout_fraction"),
    ("method", "ppo", "method"),
    ("stages", "collect,train", "stages"),
    ("rl.advantage_mode", "median", "rl.advantage_mode"),
    ("train.lr", -1.0, "lr"),
    ("train.kl_kind", "k9", "kl_kind"),
]  # stage1.analyzer = openai without an endpoint: an input, refused by check_inputs (test_launch.py)


@pytest.mark.parametrize("key,value,named", BAD)
def test_bad_config_values_are_rejected_naming_the_key(key, value, named):
    config = _config("search")
    node = config
    *parents, leaf = key.split(".")
    for p in parents:
        node = node[p]
    node[leaf] = value
    with pytest.raises(ConfigValueError, match=named.replace(".", r"\.")):
        validate(config)


def test_unknown_and_mistyped_override_keys_are_rejected():
    cmd = [sys.executable, "-m", "seed_jax.launch", "--config=configs/search.py:tiny", "--workdir=/nonexistent/x"]
    r = subprocess.run(cmd + ["--config.rl.num_update=3"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert r.returncode != 0 and "num_update" in r.stderr and not Path("/nonexistent/x").exists()
    r = subprocess.run(cmd + ["--config.rl.num_updates=three"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert r.returncode != 0 and "num_updates" in r.stderr


def test_every_preset_of_every_config_validates():
    for env in ("search", "alfworld", "webshop"):
        for preset in ("local", "paper", "tiny"):
            validate(_config(env, preset))
    with pytest.raises(ValueError, match="unknown preset"):
        _config("search", "huge")
