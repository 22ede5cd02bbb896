"""The optional Weights & Biases writer: off by default and never imported then; with wandb
installed, an offline run per run directory that a relaunch resumes, holding the config and metrics."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from seed_jax.metrics import WANDB_ID_FILE, MetricsWriter, WandbSettings

REPO = Path(__file__).resolve().parents[1]


def test_wandb_is_not_imported_unless_enabled(tmp_path):
    code = ("import sys; from seed_jax.configs.search import get_config; from seed_jax.pipeline.run import Run, wandb_settings;"
            "from seed_jax.metrics import MetricsWriter; c = get_config('tiny'); assert wandb_settings(c) is None;"
            f"w = MetricsWriter({str(tmp_path)!r}, tensorboard=False); w.write(0, {{'a': 1.0}}); w.close();"
            "print('wandb' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == "False"
    assert not (tmp_path / WANDB_ID_FILE).exists()


def test_enabled_without_the_package_is_a_config_error(monkeypatch):
    import importlib.util

    from seed_jax.configs.search import get_config
    from seed_jax.pipeline.validate import ConfigValueError, validate

    c = get_config("tiny")
    c.tracking.wandb = True
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a))
    with pytest.raises(ConfigValueError, match=r"config\.tracking\.wandb: needs the wandb package"):
        validate(c)
    c.tracking.wandb = False
    c.tracking.wandb_mode = "sometimes"
    with pytest.raises(ConfigValueError, match=r"config\.tracking\.wandb_mode: must be one of"):
        validate(c)


def test_tracking_keys_do_not_block_a_relaunch(tmp_path):
    from seed_jax.configs.search import get_config
    from seed_jax.pipeline.run import check_relaunch, write_config

    write_config(get_config("tiny"), tmp_path)
    c = get_config("tiny")
    c.tracking.wandb, c.tracking.wandb_project, c.tracking.wandb_mode = True, "mine", "offline"
    assert set(check_relaunch(c, tmp_path).changed) == {"tracking.wandb", "tracking.wandb_project",
                                                        "tracking.wandb_mode"}


def test_offline_run_logs_config_and_metrics_and_resumes(tmp_path, monkeypatch):
    wandb = pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    settings = WandbSettings(project="seed-jax-test", mode="offline",
                             config={"method": "grpo", "train": {"lr": 0.000123}})
    with MetricsWriter(tmp_path, tensorboard=False, wandb=settings) as w:
        for step in range(3):
            w.write(step, {"rollout/success_rate": 0.25 * step, "train/kl": float("nan")})
    rid = (tmp_path / WANDB_ID_FILE).read_text().strip()
    with MetricsWriter(tmp_path, tensorboard=False, wandb=settings) as w:  # a relaunch: the same W&B run
        w.write(3, {"eval/success_rate": 0.6875})
    wandb.teardown()  # the record logs are written by wandb's service process: wait for it to finish
    assert (tmp_path / WANDB_ID_FILE).read_text().strip() == rid
    # one offline run directory per launch, both with the run directory's W&B id
    # (wandb names them offline-run-<time>-<id>, with a "-1" suffix on a second launch in the same second)
    runs = sorted((tmp_path / "wandb").glob("offline-run-*"))
    assert [d.name.split("-")[3] for d in runs] == [rid, rid], os.listdir(tmp_path / "wandb")
    # wandb's record logs hold the config, the metric names and values as JSON text
    blobs = [b"".join(p.read_bytes() for p in d.glob("run-*.wandb")) for d in runs]
    first = next(b for b in blobs if b"rollout/success_rate" in b)
    second = next(b for b in blobs if b is not first)
    for needle in ("0.000123", "grpo", "0.25", "0.5"):
        assert needle.encode() in first, needle
    assert b"eval/success_rate" in second and b"0.6875" in second and b"0.6875" not in first
    assert json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[-1])["eval/success_rate"] == 0.6875
