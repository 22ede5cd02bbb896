"""The optional Weights & Biases writer: off by default and never imported then; with wandb
installed, an offline run per run directory that a relaunch resumes, holding the config and metrics."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

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


# ------------------------------------------------------------------ config and transcripts on TensorBoard / W&B


def _record(update: int, i: int, won: bool) -> dict:
    """A transcript record as `seed_jax.metrics.transcript_json` writes it."""
    return {"update": update, "traj_id": f"u{update}/q{i}-0", "task_id": f"q{i}", "task": f"TASK {i}", "won": won,
            "reward": 10.0 * won, "penalty": 0.0, "skill": f"SKILL {i}" if won else None, "gate": None,
            "final_observation": f"FINAL {i}",
            "steps": [{"observation": f"OBS {i}", "prompt": f"PROMPT {i}", "response": f"<action>go {i}</action>",
                       "action": f"go {i}", "valid": True, "reward": 10.0 * won, "penalty": 0.0, "gate": None}]}


def read_tensorboard(logdir):
    """(``{tag: [(step, text)]}`` of the text summaries, ``{hparam: value}`` of the session start
    info) of the event files under ``logdir``, read with tensorboard's own event reader."""
    from tensorboard.backend.event_processing.event_accumulator import TENSORS, EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    acc = EventAccumulator(str(logdir), size_guidance={TENSORS: 0})
    acc.Reload()
    texts = {tag: [(e.step, b"".join(e.tensor_proto.string_val).decode()) for e in acc.Tensors(tag)]
             for tag in acc.Tags()["tensors"] if tag.endswith("/text_summary")}
    hparams = {}
    try:
        content = acc.PluginTagToContent("hparams")
    except KeyError:  # no hparams in the files
        content = {}
    if "_hparams_/session_start_info" in content:
        data = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/session_start_info"])
        for k, v in data.session_start_info.hparams.items():
            hparams[k] = getattr(v, v.WhichOneof("kind"))
    return texts, hparams


def test_tensorboard_gets_the_config_hparams_and_transcripts(tmp_path):
    config = {"method": "seed", "rl": {"lr": 1.5e-06, "num_updates": 3}, "env": {"splits": ["a", "b"]}}
    with MetricsWriter(tmp_path) as w:
        w.write_config(config, {"method": "seed", "rl.lr": 1.5e-06, "rl.num_updates": 3, "env.splits": ["a", "b"],
                                "low_memory": True}, metrics=("rollout/success_rate",))
        w.write(2, {"rollout/success_rate": 0.5})
        w.write_transcripts(2, [_record(2, 0, True), _record(2, 1, False)])
    texts, hparams = read_tensorboard(tmp_path / "tb")
    (step, text), = texts["config/text_summary"]
    assert step == 0 and '"lr": 1.5e-06' in text and '"method": "seed"' in text
    (step, text), = texts["transcripts/text_summary"]
    assert step == 2
    for needle in ("update 2, `u2/q0-0`: success, reward 10", "update 2, `u2/q1-0`: failure, reward 0", "TASK 1",
                   "SKILL 0", "OBS 0", "<action>go 1</action>", "FINAL 1"):
        assert needle in text, needle
    assert hparams == {"method": "seed", "rl.lr": 1.5e-06, "rl.num_updates": 3.0, "env.splits": '["a", "b"]',
                       "low_memory": True}


def test_a_run_puts_its_config_and_transcripts_on_tensorboard(tmp_path):
    """The wiring: `Run` writes the resolved config, `TranscriptWriter` the update's sample."""
    from seed_jax.configs.search import get_config
    from seed_jax.pipeline.rl import TranscriptWriter, UpdateRecord
    from seed_jax.pipeline.run import Run
    from seed_jax.rollout.trajectory import StepSample, Trajectory

    c = get_config("tiny")
    run = Run(c, tmp_path)
    trajs = [Trajectory(task_id=f"q{i}", group_id=i, traj_id=f"u1/q{i}-0", task_description=f"TASK {i}",
                        steps=[StepSample(prompt_ids=[1], response_ids=[2], response_logprobs=[-0.5],
                                          response_text=f"RESPONSE {i}", prompt_text="P", raw_observation=f"OBS {i}",
                                          valid=True, reward=float(i == 0), penalty=0.0, action="a")],
                        episode_reward=float(i == 0), won=i == 0, final_observation="F") for i in range(3)]
    TranscriptWriter(run)(UpdateRecord(1, trajs, {}, {}, {}, {}))
    run.close()
    texts, hparams = read_tensorboard(tmp_path / "tb")
    assert json.loads(texts["config/text_summary"][0][1].split("\n", 1)[1].rsplit("\n", 1)[0]) == json.loads(
        json.dumps(c.to_dict(), default=str))
    assert hparams["rl.num_updates"] == c.rl.num_updates and hparams["method"] == c.method
    (step, text), = texts["transcripts/text_summary"]
    k = min(c.rl.transcripts_per_update, 3)
    assert step == 1 and text.count("RESPONSE ") == k and "OBS 0" in text  # the success is always in the sample


def test_wandb_gets_a_transcript_table(tmp_path, monkeypatch):
    """With W&B on: the config at init and a ``transcripts`` table per update (a stand-in wandb
    module records the calls; the real one is exercised offline above when installed)."""
    calls = []

    class Table:
        def __init__(self, columns, data):
            self.columns, self.data = columns, data

    class FakeRun:
        def define_metric(self, *a, **k):
            pass

        def log(self, d):
            calls.append(("log", d))

        def finish(self):
            calls.append(("finish", None))

    fake = SimpleNamespace(Table=Table, init=lambda **k: calls.append(("init", k)) or FakeRun())
    monkeypatch.setitem(sys.modules, "wandb", fake)
    with MetricsWriter(tmp_path, tensorboard=False, wandb=WandbSettings(config={"method": "seed"})) as w:
        w.write_transcripts(4, [_record(4, 0, True), _record(4, 1, False)])
    init = next(k for what, k in calls if what == "init")
    assert init["config"] == {"method": "seed"}
    table_logs = [d for what, d in calls if what == "log" and "transcripts" in d]
    assert len(table_logs) == 1 and table_logs[0]["step"] == 4
    table = table_logs[0]["transcripts"]
    assert table.columns == ["update", "traj_id", "task", "won", "reward", "skill", "transcript"]
    assert [r[:6] for r in table.data] == [[4, "u4/q0-0", "TASK 0", True, 10.0, "SKILL 0"],
                                           [4, "u4/q1-0", "TASK 1", False, 0.0, ""]]
    assert "OBS 1" in table.data[1][6]


def test_the_report_links_tensorboard_and_wandb(tmp_path):
    from seed_jax.report import make_report

    with MetricsWriter(tmp_path) as w:
        w.write(0, {"rollout/success_rate": 0.5})
    summary = make_report(tmp_path).summary.read_text()
    assert f"`tensorboard --logdir {tmp_path / 'tb'}`" in summary and "Weights & Biases" not in summary
    (tmp_path / WANDB_ID_FILE).write_text("abc123\n")
    (tmp_path / "config.json").write_text(json.dumps({"tracking": {"wandb_project": "p", "wandb_entity": "me"}}))
    (tmp_path / "wandb" / "offline-run-20260101_000000-abc123").mkdir(parents=True)
    summary = make_report(tmp_path).summary.read_text()
    assert "[me/p/abc123](https://wandb.ai/me/p/runs/abc123)" in summary
    assert f"wandb sync {tmp_path / 'wandb' / 'offline-run-20260101_000000-abc123'}" in summary
    (tmp_path / "config.json").write_text(json.dumps({"tracking": {"wandb_project": "p", "wandb_entity": ""}}))
    assert "project `p`, run id `abc123`" in make_report(tmp_path).summary.read_text()
