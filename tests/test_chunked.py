"""Collect and eval in chunks (`seed_jax.pipeline.chunked`): the same episodes as one chunk, and a
preemption between chunks keeps the finished ones for the relaunch, which rolls out only the rest."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from seed_jax.pipeline import chunked
from seed_jax.pipeline.chunked import chunk_size, read_part
from seed_jax.rollout.trajectory import StepSample, Trajectory
from seed_jax.train.preemption import Preempted

pytestmark = pytest.mark.integration  # whole pipelines / subprocess launches: CONTRIBUTING.md tiers

REPO = Path(__file__).resolve().parents[1]
TASKS, CHUNK = 6, 2  # collect: 6 tasks x 2 episodes (the tiny preset's group), one task (2 episodes) per chunk


def _config(chunk: int = CHUNK, tasks: int = TASKS):
    from seed_jax.configs.search import get_config

    c = get_config("tiny")
    c.stage1.num_tasks = tasks
    c.run.rollout_chunk_episodes = chunk
    return c


def _collect(workdir, chunk: int = CHUNK) -> bytes:
    from seed_jax.launch import run_pipeline

    run_pipeline(_config(chunk), workdir, stages="collect")
    return (Path(workdir) / "stage1" / "trajectories.jsonl").read_bytes()


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> bytes:
    """An uninterrupted collect in chunks of one task."""
    return _collect(tmp_path_factory.mktemp("reference"))


def test_chunked_collect_samples_the_episodes_of_one_chunk(reference, tmp_path):
    """Chunks keep each episode's slot and group (its sampling stream and env seed): the same
    ids, tokens and rewards as all tasks in one chunk; log-probs up to the rounding of another
    batch composition (as with rollout.wave_rows)."""
    whole = _collect(tmp_path, chunk=0)
    got, want = _trajectories(reference), _trajectories(whole)
    assert len(want) == TASKS * 2 and [t.traj_id for t in got] == [t.traj_id for t in want]
    assert len({t.task_id for t in want}) == TASKS
    for a, b in zip(got, want):
        assert (a.group_id, a.episode_reward, a.won, len(a.steps)) == (b.group_id, b.episode_reward, b.won, len(b.steps))
        for sa, sb in zip(a.steps, b.steps):
            assert (sa.prompt_ids, sa.response_ids, sa.reward) == (sb.prompt_ids, sb.response_ids, sb.reward)
            np.testing.assert_allclose(sa.response_logprobs, sb.response_logprobs, atol=1e-5)
    assert not (tmp_path / "parts" / "collect").exists()  # removed once the stage is done


def _trajectories(blob: bytes) -> list[Trajectory]:
    return [Trajectory.from_json(line) for line in blob.decode().splitlines()]


def test_sigterm_during_collect_keeps_its_finished_chunks(reference, tmp_path, caplog):
    """A real SIGTERM to the launcher's process group while it collects: it stops after the chunk
    under way with the preempted line and exit 0, before the stage ends; the relaunch rolls out
    only the tasks left and writes the uninterrupted run's file byte for byte."""
    part = tmp_path / "parts" / "collect" / "trajectories.jsonl"
    cmd = [sys.executable, "-m", "seed_jax.launch", "--config=configs/search.py:tiny", f"--workdir={tmp_path}",
           "--stages=collect", f"--config.stage1.num_tasks={TASKS}", f"--config.run.rollout_chunk_episodes={CHUNK}"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get(
        "PYTHONPATH", "")])}
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None and _lines(part) < 3:  # header + the first task's 2
        time.sleep(0.05)
    assert proc.poll() is None, f"the collect ended before its first chunk was seen: {proc.stderr.read()[-2000:]}"
    os.killpg(proc.pid, signal.SIGTERM)  # a TPU VM's notice may reach every process of the group
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-2000:]
    assert "preempted in stage collect after" in out, (out, err[-2000:])
    assert not (tmp_path / "stages" / "collect.json").exists()
    assert not (tmp_path / "stage1" / "trajectories.jsonl").exists()
    kept = _lines(part) - 1
    assert kept % 2 == 0 and 2 <= kept < 2 * TASKS, kept
    with caplog.at_level(logging.INFO, logger="seed_jax"):
        assert _collect(tmp_path) == reference
    assert f"{kept // 2} of {TASKS} tasks already rolled out" in caplog.text
    assert not part.parent.exists()


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def test_preempted_eval_relaunch_evaluates_the_rest(tmp_path, monkeypatch):
    """Eval in chunks of one task, a preemption notice seen after its first chunk: the stage
    stops with `Preempted` naming it, and the relaunch's results and transcripts equal an
    uninterrupted eval's."""
    from seed_jax.launch import run_pipeline

    def evaluate(workdir):
        c = _config(chunk=1)  # eval: one episode per task
        run_pipeline(c, workdir, stages="eval")
        return {f.name: f.read_bytes() for f in sorted((workdir / "eval").iterdir())}

    chunks = []
    real = chunked.host_rollouts
    monkeypatch.setattr(chunked, "host_rollouts", lambda *a, **k: chunks.append(k["task_offset"]) or real(*a, **k))
    want = evaluate(tmp_path / "ref")
    every = list(chunks)
    asked = []
    monkeypatch.setattr(chunked, "preemption_requested", lambda: asked.append(1) or len(asked) == 1)
    with pytest.raises(Preempted, match="in stage eval after 1 of"):
        evaluate(tmp_path / "run")
    assert not (tmp_path / "run" / "stages" / "eval.json").exists()
    chunks.clear()
    got = evaluate(tmp_path / "run")
    assert got == want and any(name.endswith(".trajectories.jsonl") for name in got)
    assert len(every) > 1 and chunks == every[1:]  # the relaunch rolled out every chunk but the first


def _traj(group: int, n: int) -> Trajectory:
    step = StepSample(prompt_ids=[1, 2], response_ids=[3], response_logprobs=[-0.5], response_text="a",
                      prompt_text="p", raw_observation="o", valid=True, reward=0.0)
    return Trajectory(task_id=str(group), group_id=group, traj_id=f"{group}#{n}", task_description="t",
                      steps=[step], episode_reward=0.0, won=False)


def test_a_part_keeps_only_its_whole_tasks_and_forgets_another_runs(tmp_path):
    header = {"part": "trajectories", "tasks": 4, "group_size": 2, "seed": 0, "policy": "random@0"}
    part = tmp_path / "part.jsonl"
    trajs = [_traj(g, n) for g in range(2) for n in range(2)] + [_traj(2, 0)]  # task 2 is half there
    part.write_text("\n".join([json.dumps(header), *(t.to_json() for t in trajs)]) + '\n{"task_id": "2", "gr')
    with pytest.warns(UserWarning, match="torn"):
        got = read_part(part, header, 2)
    assert [t.traj_id for t in got] == ["0#0", "0#1", "1#0", "1#1"]
    assert [json.loads(line) for line in part.read_text().splitlines()] == [header, *(t.to_dict() for t in got)]
    assert read_part(part, {**header, "policy": "sft@0"}, 2) == []  # another policy's part starts over
    assert part.read_text().splitlines() == [json.dumps({**header, "policy": "sft@0"})]
    assert read_part(tmp_path / "new.jsonl", header, 2) == []  # a first launch starts the part
    assert (tmp_path / "new.jsonl").read_text() == json.dumps(header) + "\n"


def test_chunk_size_is_per_host():
    assert chunk_size(256, 8, 180, 4) == 128 and chunk_size(256, 1, 180, 2) == 512
    assert chunk_size(3, 8, 180, 2) == 2  # whole tasks, at least one per host
    assert chunk_size(0, 8, 180, 4) == 180 and chunk_size(0, 8, 0, 1) == 1
