"""RL transcripts (a bounded sample of each update's trajectories in full), their rendering by the
report, and several runs overlaid on one figure."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from seed_jax.metrics import TRANSCRIPTS_FILE, GateSummary, MetricsWriter, read_transcripts, sample_transcripts
from seed_jax.pipeline.rl import TranscriptWriter, UpdateRecord
from seed_jax.pipeline.update_batch import StepGate
from seed_jax.report import collect_series, compare_figure, compare_runs, main, make_report
from seed_jax.rollout.trajectory import StepSample, Trajectory, write_trajectories

REPO = Path(__file__).resolve().parents[1]


def _traj(i: int, won: bool, env_error: bool = False, steps: int = 2) -> Trajectory:
    ss = [StepSample(prompt_ids=[1, 2], response_ids=[3], response_logprobs=[-0.5],
                     response_text=f"<action>go {i}.{j}</action>", prompt_text=f"PROMPT {i}.{j}",
                     raw_observation=f"OBS {i}.{j}", valid=j % 2 == 0, reward=10.0 * won * (j == steps - 1),
                     penalty=0.0 if j % 2 == 0 else 0.1, action=f"go {i}.{j}" if j % 2 == 0 else "")
          for j in range(steps)]
    return Trajectory(task_id=f"q{i}", group_id=i // 2, traj_id=f"u0/q{i}-{i % 2}", task_description=f"TASK {i}",
                      steps=ss, episode_reward=10.0 * won, won=won, env_error=env_error,
                      final_observation=f"FINAL {i}")


def test_sample_alternates_outcomes_is_bounded_and_seeded():
    trajs = [_traj(i, won=i in (1, 4, 6), env_error=i == 7) for i in range(9)]
    got = sample_transcripts(trajs, 4, "0:transcripts:3")
    assert len(got) == 4 and sum(t.won for t in got) == 2  # two of each outcome
    assert [t.traj_id for t in got] == sorted((t.traj_id for t in got), key=lambda x: int(x.split("q")[1][:-2]))
    assert sample_transcripts(trajs, 4, "0:transcripts:3") == got  # same seed, same sample
    everything = sample_transcripts(trajs, 100, "s")
    assert [t.traj_id for t in everything] == [t.traj_id for t in trajs if not t.env_error]
    only_failures = [t for t in trajs if not t.won and not t.env_error]
    assert len(sample_transcripts(only_failures, 3, "s")) == 3
    assert sample_transcripts(trajs, 0, "s") == []
    # k=5 with 3 successes left: success, failure, success, failure, success
    five = sample_transcripts(trajs, 5, "x")
    assert sum(t.won for t in five) == 3


def _run(tmp_path, k):
    return SimpleNamespace(workdir=tmp_path, config=SimpleNamespace(seed=0, rl=SimpleNamespace(transcripts_per_update=k)),
                           metrics=MetricsWriter(tmp_path, enabled=False))


def test_transcript_writer_records_steps_skills_and_gates(tmp_path):
    trajs = [_traj(i, won=i % 3 == 0) for i in range(6)]
    skills = {t.traj_id: f"SKILL {t.task_id}" for t in trajs[:4]}
    gates = {t.traj_id: GateSummary(0.25 + 0.1 * i, 0.5, 7 + i) for i, t in enumerate(trajs[:4])}
    step_gates = [StepGate(t.traj_id, 1, 0.6 + 0.01 * i, 1.0, 3, 0.1) for i, t in enumerate(trajs[:4])]
    writer = TranscriptWriter(_run(tmp_path, 3))
    for u in (0, 1):
        writer(UpdateRecord(u, trajs, skills, {}, gates, {}, step_gates))
    recs = read_transcripts(tmp_path)
    assert [r["update"] for r in recs] == [0, 0, 0, 1, 1, 1]
    by_id = {t.traj_id: (i, t) for i, t in enumerate(trajs)}
    for r in recs:
        i, t = by_id[r["traj_id"]]
        assert (r["task"], r["won"], r["reward"], r["final_observation"]) == (
            f"TASK {i}", t.won, 10.0 * t.won, f"FINAL {i}")
        assert r["penalty"] == pytest.approx(0.1)
        assert [s["observation"] for s in r["steps"]] == [f"OBS {i}.0", f"OBS {i}.1"]
        assert [s["prompt"] for s in r["steps"]] == [f"PROMPT {i}.0", f"PROMPT {i}.1"]
        assert [s["response"] for s in r["steps"]] == [f"<action>go {i}.0</action>", f"<action>go {i}.1</action>"]
        assert [s["valid"] for s in r["steps"]] == [True, False]
        if i < 4:
            assert r["skill"] == f"SKILL q{i}"
            assert r["gate"] == {"mean": pytest.approx(0.25 + 0.1 * i), "share_gt_half": 0.5, "n_tokens": 7 + i}
            assert r["steps"][0]["gate"] is None
            assert r["steps"][1]["gate"]["mean"] == pytest.approx(0.6 + 0.01 * i)
        else:
            assert r["skill"] is None and r["gate"] is None and r["steps"][1]["gate"] is None

    TranscriptWriter(_run(tmp_path / "off", 0))(UpdateRecord(0, trajs, {}, {}, {}, {}))
    assert not (tmp_path / "off" / TRANSCRIPTS_FILE).exists()


def test_report_renders_transcripts_of_rl_and_eval(tmp_path, capsys):
    trajs = [_traj(i, won=i == 0) for i in range(4)]
    writer = TranscriptWriter(_run(tmp_path, 2))
    for u in (0, 1):
        writer(UpdateRecord(u, trajs, {trajs[0].traj_id: "ALWAYS ```check``` FIRST"},
                            {}, {trajs[0].traj_id: GateSummary(0.4375, 0.25, 12)}, {}))
    with MetricsWriter(tmp_path, tensorboard=False) as w:
        w.write(0, {"rollout/success_rate": 0.25})
    (tmp_path / "eval").mkdir()
    write_trajectories(tmp_path / "eval" / "final_test.trajectories.jsonl", [_traj(7, won=False, steps=1)])
    assert main([str(tmp_path), "--transcripts=1"]) == 0
    md = (tmp_path / "report" / "transcripts.md").read_text()
    rl_part, eval_part = md.split("## Evaluation")
    assert "## RL update 1" in rl_part and "update 0" not in rl_part
    assert rl_part.count("### ") == 1  # --transcripts=1: one per source
    assert "TASK 0" in rl_part and "success, reward 10" in rl_part
    assert "ALWAYS ```check``` FIRST" in rl_part and "````text" in rl_part  # longer fence around backticks
    assert "(gate 0.4375 over 12 tokens)" in rl_part
    assert rl_part.index("OBS 0.0") < rl_part.index("go 0.0") < rl_part.index("OBS 0.1") < rl_part.index("go 0.1")
    assert "PROMPT 0.0" in rl_part and "PROMPT 0.1" not in rl_part  # the first prompt, folded
    assert "invalid action, penalty" not in rl_part and "penalty 0.1, invalid action" in rl_part
    assert "eval/final_test.trajectories.jsonl" in eval_part and "OBS 7.0" in eval_part and "FINAL 7" in eval_part
    assert "[transcripts.md](transcripts.md)" in (tmp_path / "report" / "summary.md").read_text()
    assert "transcripts.md" in capsys.readouterr().out


def _metrics_run(d: Path, method: str, success: list[float], eval_success: float) -> None:
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"method": method}))
    with MetricsWriter(d, tensorboard=False) as w:
        for u, v in enumerate(success):
            w.write(u, {"rollout/success_rate": v, "train/kl": 0.01 * u})
        w.write(len(success), {"eval/success_rate": eval_success})


def test_several_runs_on_one_figure(tmp_path, capsys):
    _metrics_run(tmp_path / "a", "seed", [0.25, 0.5, 0.75], 0.625)
    _metrics_run(tmp_path / "b", "grpo", [0.125, 0.25], 0.375)
    rep = compare_runs([tmp_path / "a", tmp_path / "b"], tmp_path / "cmp")
    assert rep.plots[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    md = rep.summary.read_text()
    assert "| `rollout/success_rate` | 0.75 | 0.25 |" in md and "| `eval/success_rate` | 0.625 | 0.375 |" in md
    assert "| a (seed) | `" in md and "| b (grpo) | `" in md

    runs = [collect_series(MetricsWriter.read(tmp_path / x)) for x in "ab"]
    fig = compare_figure(runs, ["A", "B"], ["rollout/success_rate", "train/kl"])
    lines = fig.axes[0].get_lines()
    assert [ln.get_label() for ln in lines] == ["A", "B"]
    np.testing.assert_array_equal(lines[0].get_ydata(), [0.25, 0.5, 0.75])
    np.testing.assert_array_equal(lines[1].get_xdata(), [0, 1])

    assert main([str(tmp_path / "a"), str(tmp_path / "b"), "--labels=SEED,GRPO", f"--out={tmp_path / 'c2'}"]) == 0
    assert "| `rollout/success_rate` | 0.75 | 0.25 |" in (tmp_path / "c2" / "compare.md").read_text()
    capsys.readouterr()
    assert main([str(tmp_path / "a"), str(tmp_path / "b"), "--labels=one", f"--out={tmp_path / 'c3'}"]) == 2
    assert "2 run directories" in capsys.readouterr().err


def test_report_module_exits_2_on_a_missing_run(tmp_path):
    r = subprocess.run([sys.executable, "-m", "seed_jax.report", str(tmp_path / "a"), str(tmp_path / "b")],
                       cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "does not exist" in r.stderr and "Traceback" not in r.stderr


def test_make_report_still_works_without_transcripts(tmp_path):
    with MetricsWriter(tmp_path, tensorboard=False) as w:
        w.write(0, {"rollout/success_rate": 0.5})
    rep = make_report(tmp_path)
    assert not (rep.out_dir / "transcripts.md").exists() and "Transcripts" not in rep.summary.read_text()
