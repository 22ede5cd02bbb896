"""Trajectory records: JSON round trip, step scores, clear errors on bad records."""

from __future__ import annotations

import json

import pytest

from seed_jax.rollout.trajectory import (
    StepSample,
    Trajectory,
    read_trajectories,
    write_trajectories,
)


def _traj(k: int) -> Trajectory:
    steps = [
        StepSample(prompt_ids=[1, 2, 3], response_ids=[4, 5], response_logprobs=[-0.25, -1.5],
                   response_text="<action>go</action>", prompt_text="Your task is to: é ✓",
                   raw_observation="obs 中", valid=False, reward=0.0, penalty=0.1, action="", prompt_tokens=5),
        StepSample(prompt_ids=[6], response_ids=[7], response_logprobs=[-0.125],
                   response_text="<action>take</action>", prompt_text="p2",
                   raw_observation="obs2", valid=True, reward=10.0, action="take"),
    ]
    return Trajectory(task_id=f"task{k}", group_id=k, traj_id=f"task{k}-0",
                      task_description="do it", steps=steps, episode_reward=10.0, won=True,
                      info={"task_type": "pick", "score": 1.0})


def test_round_trip_and_scores(tmp_path):
    trajs = [_traj(0), _traj(1)]
    path = tmp_path / "t.jsonl"
    assert write_trajectories(path, trajs) == 2
    assert read_trajectories(path) == trajs
    line = path.read_text(encoding="utf-8").splitlines()[0]
    assert json.loads(line)["steps"][0]["raw_observation"] == "obs 中"
    t = trajs[0]
    assert t.num_steps == 2 and t.total_penalty == pytest.approx(0.1)
    assert [s.penalty for s in t.steps] == [pytest.approx(0.1), 0.0] and t.episode_reward == 10.0
    # 5 tokens before the cut, 3 kept: cut; an unrecorded length (older records) is not counted as cut
    assert [s.prompt_cut for s in t.steps] == [True, False] and t.steps[1].prompt_tokens == -1


def test_summaries_count_cut_prompts():
    from seed_jax.pipeline.evaluate import summarize
    from seed_jax.pipeline.stage1 import rollout_summary

    trajs = [_traj(0), _traj(1)]  # 4 steps, 2 of them cut
    assert rollout_summary(trajs)["prompt_cut_rate"] == 0.5
    assert summarize(trajs)["overall"]["prompt_cut_rate"] == 0.5
    assert summarize(trajs)["overall"]["invalid_rate"] == 0.5


def test_bad_records_fail_clearly(tmp_path):
    d = _traj(0).to_dict()
    del d["steps"][0]["response_ids"]
    with pytest.raises(ValueError, match=r"lacks field\(s\) \['response_ids'\]"):
        Trajectory.from_dict(d)
    with pytest.raises(ValueError, match="response_logprobs"):
        StepSample(prompt_ids=[1], response_ids=[1, 2], response_logprobs=[0.0],
                   response_text="", prompt_text="", raw_observation="", valid=True, reward=0.0)
    path = tmp_path / "bad.jsonl"
    path.write_text(_traj(0).to_json() + "\n\n{not json\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"bad.jsonl:3"):
        read_trajectories(path)
