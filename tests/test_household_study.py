"""The household evidence study: demonstrations, stage-0 batches, the benchmark's scripted
stage-1 annotator, the gate audit join, arm configs, and stage 0 (slow) and the ci preset end to end."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import os
import random
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from seed_jax.configs.household import get_config
from seed_jax.envs.household import household_scripted_answer, household_splits
from seed_jax.envs.household.tasks import load_task
from seed_jax.envs.household.world import transitions
from seed_jax.experiments.household.archive import pack, unpack
from seed_jax.experiments.household.audit import (
    consistency_by_update,
    delta_audit,
    group_outcomes,
    join_gates,
    names_start_place,
    pearson,
    read_step_actions,
    skill_accuracy_by_update,
    summarize,
    update_of,
)
from seed_jax.experiments.household.bc import bc_batches, bc_examples, cycled_batches, random_policy_success, run_stage0
from seed_jax.experiments.household.demos import noisy_episode, subgoal_text
from seed_jax.experiments.household.experiment import arm_config, arms_of, link_shared, run_study, step_recorder
from seed_jax.experiments.household.probe import _summary, probe_points, subgoal_verb
from seed_jax.experiments.household.report import (
    T975,
    change_table,
    ci95,
    delta_table,
    edge_windows,
    fmt_pct,
    mean_std,
    paired_differences,
    paired_table,
    pooled_share,
    repeat_share,
    start_changes,
)
from seed_jax.pipeline.analyzers import AnalysisContext, get_analyzer
from seed_jax.pipeline.environments import make_benchmark
from seed_jax.pipeline.methods import switches
from seed_jax.pipeline.rl import UpdateRecord, rl_analysis
from seed_jax.pipeline.validate import validate
from seed_jax.skills import SKILL_HEADING, SkillRecord, parse_skill

REPO = Path(__file__).resolve().parents[1]

# a hand-made pick task: the apple hides in the closed fridge; the target is the countertop
PICK_TASK = {
    "task_id": "hand-pick", "split": "seen", "seed": 0, "index": 0, "task_type": "pick", "object": "apple",
    "target": "countertop", "task_description": "put a apple in countertop.", "target_object": "apple 1",
    "receptacles": ["countertop 1", "fridge 1", "microwave 1", "sinkbasin 1"],
    "objects": {"apple 1": "fridge 1", "mug 1": "sinkbasin 1"}, "opened": [],
}
# the only shortest plan, by hand: 5 commands
PICK_PLAN = ["go to fridge 1", "open fridge 1", "take apple 1 from fridge 1", "go to countertop 1",
             "put apple 1 in/on countertop 1"]


def _household_config(preset="ci"):
    c = get_config(preset)
    c.model.path = "/nonexistent"  # not loaded by these tests
    return c


# ------------------------------------------------------------------ demonstrations


def test_subgoal_text_by_hand():
    layout, s = load_task(PICK_TASK)
    texts = [subgoal_text(layout, s)]
    for cmd in PICK_PLAN[:-1]:
        s = transitions(layout, s)[cmd][0]
        texts.append(subgoal_text(layout, s))
    # start, at the closed fridge, fridge open (apple in sight), holding it, at the countertop holding it
    assert texts == ["find the apple", "find the apple", "take the apple", "put the apple in countertop",
                     "put the apple in countertop"]
    s2 = transitions(layout, load_task(PICK_TASK)[1])["go to sinkbasin 1"][0]
    s2 = transitions(layout, s2)["take mug 1 from sinkbasin 1"][0]
    assert subgoal_text(layout, s2) == "put down the mug"


def test_noisy_episode_extremes():
    clean = noisy_episode(PICK_TASK, random.Random(0), noise=0.0, invalid=0.0, max_steps=12, history_window=2)
    assert clean.won and [s.action for s in clean.steps] == PICK_PLAN
    assert all(s.consistent and s.valid for s in clean.steps)
    assert clean.steps[0].response == ("<think>put a apple in countertop. find the apple</think>"
                                       "<action>go to fridge 1</action>")
    detour = noisy_episode(PICK_TASK, random.Random(1), noise=1.0, invalid=0.0, max_steps=6, history_window=2)
    assert not detour.won and len(detour.steps) == 6 and not any(s.consistent for s in detour.steps)
    bad = noisy_episode(PICK_TASK, random.Random(2), noise=0.0, invalid=1.0, max_steps=3, history_window=2)
    assert [s.valid for s in bad.steps] == [False] * 3 and all(s.penalty == 0.1 for s in bad.steps)
    # the expert response at every step is the optimal command with the same thinking text
    assert bad.steps[0].expert_response.endswith("<action>go to fridge 1</action>")
    with pytest.raises(ValueError):
        noisy_episode(PICK_TASK, random.Random(0), noise=0.8, invalid=0.3, max_steps=3, history_window=2)


def test_searching_demonstrator_looks_into_each_candidate_once():
    """With ``search`` the demonstrator finds the apple by looking around: before it takes the
    apple it only goes to the three non-target receptacles (each at most once) and opens the
    closed ones it arrives at; those steps are detours unless they head for the fridge (the
    apple's place); after the take it follows the plan. Rules written out for PICK_TASK."""
    firsts = set()
    for seed in range(40):
        demo = noisy_episode(PICK_TASK, random.Random(seed), 0.0, 0.0, 12, 2, search=True)
        actions = [s.action for s in demo.steps]
        assert demo.won, actions
        k = actions.index("take apple 1 from fridge 1")
        assert actions[k:] == PICK_PLAN[2:]
        search, visited = actions[:k], []
        for i, a in enumerate(search):
            if a.startswith("go to "):
                visited.append(a[len("go to "):])
            else:  # an open right after arriving at that closed container
                assert a in ("open fridge 1", "open microwave 1") and search[i - 1] == "go to " + a[len("open "):]
        assert set(visited) <= {"fridge 1", "microwave 1", "sinkbasin 1"} and len(set(visited)) == len(visited)
        assert visited[-1] == "fridge 1" and search[-1] == "open fridge 1"
        for s in demo.steps:
            assert s.consistent == (s.action in ("go to fridge 1", "open fridge 1") or s.action in PICK_PLAN[2:])
            assert s.expert_response.split("<action>")[1] in {a + "</action>" for a in PICK_PLAN}
        firsts.add(actions[0])
    assert firsts == {"go to fridge 1", "go to microwave 1", "go to sinkbasin 1"}  # the draw is random
    # without search the same draws follow the plan
    assert [s.action for s in noisy_episode(PICK_TASK, random.Random(3), 0.0, 0.0, 12, 2).steps] == PICK_PLAN


# ------------------------------------------------------------------ stage-0 batches


def test_bc_batches_layout_response_only_and_lm():
    encoded = [([5, 6, 7], [8, 9]), ([10, 11], [12])]  # (prompt ids, response ids + EOS)
    b = next(bc_batches(encoded, 2, random.Random(0), pad_id=0))
    # prompts left-padded to the smallest prompt bucket (64), responses right-padded to 16
    assert b.input_ids.shape == (2, 64 + 16) and b.loss_mask.shape == (2, 16)
    rows = {tuple(r[r != 0]) for r in b.input_ids}
    assert rows == {(5, 6, 7, 8, 9), (10, 11, 12)}
    for r, m in zip(b.input_ids, b.loss_mask):
        resp = r[64:]
        assert list(m) == [1.0 if t else 0.0 for t in resp]  # loss exactly on the response tokens
    # LM mode with weight 1: P = 1 (the first token), every later token is a target
    lm = next(bc_batches(encoded, 2, random.Random(0), pad_id=0, lm_weight=1.0))
    assert lm.input_ids.shape[1] == 1 + 64
    for r, m in zip(lm.input_ids, lm.loss_mask):
        seq = [int(t) for t in r if t]
        assert seq in ([5, 6, 7, 8, 9], [10, 11, 12])
        assert m.sum() == len(seq) - 1
    # tiny LM weight: (almost surely) only the response tokens stay in the loss
    lm0 = next(bc_batches(encoded, 2, random.Random(0), pad_id=0, lm_weight=1e-9))
    assert sorted(lm0.loss_mask.sum(1).tolist()) == [1.0, 2.0]


def test_cycled_batches_run_past_an_epoch_and_reject_too_small_buckets():
    # 5 examples in one bucket, batches of 2: 2 batches per epoch, one example dropped per epoch
    encoded = [([5, i], [8 + i]) for i in range(5)]
    batches = list(itertools.islice(cycled_batches(encoded, 2, 0, 0.0, "t", "stage0.batch_size"), 6))
    assert len(batches) == 6  # three epochs
    rows = [tuple(int(t) for t in r if t) for b in batches for r in b.input_ids]
    for epoch in range(3):
        seen = rows[4 * epoch: 4 * epoch + 4]
        assert len(set(seen)) == 4  # no example twice within an epoch
    assert len(set(rows)) == 5  # reshuffled epochs reach every example
    with pytest.raises(ValueError, match=r"stage0.analyzer_batch=8"):
        cycled_batches(encoded, 8, 0, 0.0, "t", "stage0.analyzer_batch")


def test_hint_examples_insert_the_demo_skill():
    demo = noisy_episode(PICK_TASK, random.Random(0), 0.0, 0.0, 12, 2)
    ex = bc_examples([demo], skill_share=1.0)
    acts = [e for e in ex if e[2] == "act"]
    hints = [e for e in ex if e[2] == "hint"]
    assert len(acts) == len(hints) == len(PICK_PLAN)
    for (p, r, _), (hp, hr, _) in zip(acts, hints):
        assert SKILL_HEADING not in p and SKILL_HEADING in hp and hr == r
        # the hint follows the task line: the hand-derived workflow of this episode
        assert "Your task is to: put a apple in countertop.\n\n## Episode-level skill" in hp
        assert "here it was inside the closed fridge 1, so go there and open it first" in hp
    # hints at the 'find' steps only: the start and the closed fridge (test_subgoal_text_by_hand)
    find_only = [e for e in bc_examples([demo], skill_share=0.0, find_skill_share=1.0) if e[2] == "hint"]
    assert [r.split("<action>")[1] for _, r, _ in find_only] == ["go to fridge 1</action>", "open fridge 1</action>"]
    # a searching demo's hint pairs answer with the expert's command, not the search's
    searching = noisy_episode(PICK_TASK, random.Random(5), 0.0, 0.0, 12, 2, search=True)
    assert searching.steps[0].action != "go to fridge 1"
    pairs = bc_examples([searching], skill_share=0.0, find_skill_share=1.0)
    hint_cmds = [r.split("<action>")[1] for _, r, k in pairs if k == "hint"]
    assert hint_cmds[0] == "go to fridge 1</action>" and "fridge 1" in searching.skill()


# ------------------------------------------------------------------ benchmark and scripted stage 1


def test_household_benchmark_splits():
    c = _household_config("ci")
    bench = make_benchmark(c.env)
    train, seen, unseen = (bench.tasks(s) for s in ("train", "seen", "unseen"))
    assert len(train) == c.env.num_train_tasks and len(seen) == len(unseen) == c.env.num_eval_tasks

    def strip(t):
        return json.dumps({k: v for k, v in t.items() if k not in ("task_id", "seed", "index")}, sort_keys=True)

    assert not {strip(t) for t in seen} & {strip(t) for t in train}
    assert all(t["split"] == "unseen" for t in unseen) and all(t["split"] == "seen" for t in train + seen)
    assert bench.spec.max_steps == c.env.max_steps and bench.stop_strings == ("</action>",)
    env = bench.factory(0)
    obs, info = env.reset(train[0])
    assert "Your task is to:" in obs and info["task_id"] == train[0]["task_id"]


def test_scripted_annotator_stage1_records_parse():
    c = _household_config("ci")
    bench = make_benchmark(c.env)
    tasks = bench.tasks("train")[:6]
    rng = random.Random(3)
    demos = [noisy_episode(t, rng, 0.5 * (i % 2), 0.1 * (i % 2), 8, 2) for i, t in enumerate(tasks)]
    trajs = [d.to_trajectory(f"u0/{d.task['task_id']}#{i}") for i, d in enumerate(demos)]
    ctx = AnalysisContext(success_threshold=bench.spec.success_threshold,
                          max_prompt_tokens=c.analysis.max_prompt_tokens, max_new_tokens=0, bench=bench)
    analysis = get_analyzer("scripted")(trajs, ctx)
    parses, prompts = analysis.parses, analysis.prompts
    assert set(parses) == set(prompts) == {t.traj_id for t in trajs}
    assert {d.won for d in demos} == {True, False}  # both kinds are covered
    for t in trajs:
        p = parses[t.traj_id]
        assert p.ok and len(p.skill.split()) >= 5
        rec = SkillRecord.from_parse(t, prompts[t.traj_id], p, bench.spec.success_threshold)
        assert parse_skill(rec.answer) == p  # the SFT target reads back to the same skill
        label = "SUCCESS: the agent completed the task." if t.won else "FAILURE: the agent did not complete the task."
        assert label in prompts[t.traj_id] and len(prompts[t.traj_id]) <= 3 * c.analysis.max_prompt_tokens + 1200
        assert p.skill.startswith("To put a" if t.won else "Avoid")
    # hand-made success: the hand-written workflow (module docstring of envs.household.annotator)
    demo = noisy_episode(PICK_TASK, random.Random(0), 0.0, 0.0, 12, 2)
    answer = household_scripted_answer(lambda split: [PICK_TASK] if split == "train" else [])
    assert parse_skill(answer(demo.to_trajectory("x"))).skill == ("To put a apple in countertop: find the apple (here it was inside the closed "
                                 "fridge 1, so go there and open it first), take it, then go to countertop 1 "
                                 "and put it there.")
    # a trajectory of a task the benchmark does not know is refused, naming the trajectory
    stranger = noisy_episode({**PICK_TASK, "task_id": "elsewhere"}, random.Random(0), 0.0, 0.0, 12, 2)
    with pytest.raises(ValueError, match=r"trajectory y has unknown task id 'elsewhere'"):
        answer(stranger.to_trajectory("y"))


def test_rl_scripted_analysis_is_the_envs_expert_analysis():
    """``analysis.analyzer = scripted`` in RL (the oracle): the config validates and the RL
    stage's analysis (`rl_analysis` of method seed) gives every household trajectory exactly the
    env's expert analysis of that very episode, checked against `household_scripted_answer` over
    the env's own splits, called directly."""
    c = _household_config("ci")
    c.method, c.analysis.analyzer = "seed", "scripted"
    validate(c)
    bench = make_benchmark(c.env)
    analyzer, ctx = rl_analysis(c, bench, switches(c).skill_source)
    rng = random.Random(5)
    demos = [noisy_episode(t, rng, 0.5 * (i % 2), 0.1 * (i % 2), 8, 2) for i, t in enumerate(bench.tasks("train")[:6])]
    trajs = [d.to_trajectory(f"u1/{d.task['task_id']}#{i}") for i, d in enumerate(demos)]
    analysis = analyzer(trajs, dataclasses.replace(ctx, update=0))
    expert = household_scripted_answer(household_splits(c.env), bool(c.env.skill_plan))
    assert {d.won for d in demos} == {True, False}  # both kinds are covered
    assert set(analysis.skills) == {t.traj_id for t in trajs}
    for t in trajs:
        want = parse_skill(expert(t))
        assert want.ok and analysis.parses[t.traj_id] == want and analysis.skills[t.traj_id] == want.skill
    assert len(set(analysis.skills.values())) == len(trajs)  # each its own episode's skill


def test_benchmarks_without_expert_analysis_have_no_scripted_annotator():
    c = _household_config("ci")
    c.env.name = "webshop"
    bench = make_benchmark(c.env)
    assert bench.scripted_answer is None
    ctx = AnalysisContext(success_threshold=10.0, max_prompt_tokens=64, max_new_tokens=0, bench=bench)
    with pytest.raises(ValueError, match="'scripted' is not available for env 'webshop'"):
        get_analyzer("scripted")([], ctx)


# ------------------------------------------------------------------ audit join


def test_audit_join_and_summary_hand_made():
    # by hand: sinkbasin is a detour (x), fridge is the way (ok), an invalid response (x), open (ok)
    actions = {"u0/hand-pick#0": {"task_id": "hand-pick",
                                  "actions": ["go to sinkbasin 1", "go to fridge 1", "", "open fridge 1"]}}
    gates = [
        {"update": 1, "traj_id": "u0/hand-pick#0", "step": 0, "gate_mean": 0.2, "gate_gt_half": 0.0, "n_tokens": 10},
        {"update": 1, "traj_id": "u0/hand-pick#0", "step": 1, "gate_mean": 0.8, "gate_gt_half": 1.0, "n_tokens": 10},
        {"update": 2, "traj_id": "u0/hand-pick#0", "step": 2, "gate_mean": 0.5, "gate_gt_half": 0.5, "n_tokens": 20},
        {"update": 2, "traj_id": "u0/hand-pick#0", "step": 3, "gate_mean": 0.9, "gate_gt_half": 1.0, "n_tokens": 30},
        {"update": 2, "traj_id": "u0/other#0", "step": 0, "gate_mean": 0.9, "gate_gt_half": 1.0, "n_tokens": 5},
        {"update": 2, "traj_id": "u0/hand-pick#0", "step": 9, "gate_mean": 0.9, "gate_gt_half": 1.0, "n_tokens": 5},
    ]
    joined = join_gates(gates, actions, {"hand-pick": PICK_TASK})
    assert [r["consistent"] for r in joined] == [False, True, False, True]
    s = summarize(joined, num_updates=2, windows=2)  # updates 1 and 2 (1-based)
    # consistent: (0.8*10 + 0.9*30) / 40 = 0.875, share (10 + 30) / 40 = 1
    assert s["all"]["consistent"] == {"rows": 2, "tokens": 40, "gate_mean": pytest.approx(0.875),
                                      "gate_gt_half": pytest.approx(1.0)}
    # inconsistent: (0.2*10 + 0.5*20) / 30 = 0.4, share (0 + 10) / 30
    assert s["all"]["inconsistent"]["gate_mean"] == pytest.approx(0.4)
    assert s["all"]["inconsistent"]["gate_gt_half"] == pytest.approx(1 / 3)
    assert s["w1"]["consistent"]["rows"] == 1 and s["w1"]["inconsistent"]["gate_mean"] == pytest.approx(0.2)
    assert s["w2"]["updates"] == [2, 2] and s["w2"]["consistent"]["gate_mean"] == pytest.approx(0.9)


def test_consistency_by_update_hand_made():
    assert update_of("u12/hand-pick#3") == 12 and update_of("s1/hand-pick#0") is None
    actions = {
        # update 0: detour, way, invalid, open -> 2 of 4 optimal
        "u0/hand-pick#0": {"task_id": "hand-pick",
                           "actions": ["go to sinkbasin 1", "go to fridge 1", "", "open fridge 1"]},
        # update 1: the whole shortest plan -> 5 of 5
        "u1/hand-pick#0": {"task_id": "hand-pick", "actions": list(PICK_PLAN)},
        # update 1: first step optimal, then a detour, then back to the fridge (optimal again)
        "u1/hand-pick#1": {"task_id": "hand-pick",
                           "actions": ["go to fridge 1", "go to sinkbasin 1", "go to fridge 1"]},
        "u1/unknown#0": {"task_id": "unknown", "actions": ["look"]},
        "eval/hand-pick#0": {"task_id": "hand-pick", "actions": ["look"]},
    }
    got = consistency_by_update(actions, {"hand-pick": PICK_TASK})
    assert got == {0: {"consistent": 2, "steps": 4}, 1: {"consistent": 7, "steps": 8}}
    per_seed = [{"consistency": {str(u): v for u, v in got.items()}},
                {"consistency": {"1": {"consistent": 0, "steps": 2}}}]
    assert pooled_share(per_seed, 'consistency', 'consistent', 0, 1) == pytest.approx(2 / 4)
    assert pooled_share(per_seed, 'consistency', 'consistent', 1, 2) == pytest.approx(7 / 10)
    assert pooled_share(per_seed, 'consistency', 'consistent', 5, 9) is None


def test_delta_audit_hand_made():
    # four step-samples of one won and one lost trajectory: detour, way, invalid, open (see above)
    actions = {"u0/hand-pick#0": {"task_id": "hand-pick", "won": True,
                                  "actions": ["go to sinkbasin 1", "go to fridge 1"]},
               "u0/hand-pick#1": {"task_id": "hand-pick", "won": False,
                                  "actions": ["go to sinkbasin 1", "go to fridge 1"]}}
    row = {"update": 1, "gate_gt_half": 0.0, "n_tokens": 4}
    gates = [{**row, "traj_id": "u0/hand-pick#0", "step": 0, "gate_mean": 0.32, "delta_mean": -1.0},
             {**row, "traj_id": "u0/hand-pick#0", "step": 1, "gate_mean": 0.91, "delta_mean": 3.0},
             {**row, "traj_id": "u0/hand-pick#1", "step": 0, "gate_mean": 0.52, "delta_mean": 0.0},
             {**row, "traj_id": "u0/hand-pick#1", "step": 1, "gate_mean": 0.57, "delta_mean": 0.0},
             {**row, "traj_id": "u0/hand-pick#1", "step": 1, "gate_mean": 0.5}]  # recorded before delta_mean
    got = delta_audit(join_gates(gates, actions, {"hand-pick": PICK_TASK}))
    # Delta = (-1, 3, 0, 0), consistent = (0, 1, 0, 1), won = (1, 1, 0, 0); mean Delta 0.5;
    # dx = (-1.5, 2.5, -.5, -.5), sum dx^2 = 9; consistent: dy = (-.5, .5, -.5, .5), sum dx dy = 2,
    # sum dy^2 = 1 -> r = 2 / 3; won: dy = (.5, .5, -.5, -.5), sum dx dy = 1 -> r = 1 / 3
    assert got["steps"] == 4
    assert got["r_expert"] == pytest.approx(2 / 3)
    assert got["r_outcome"] == pytest.approx(1 / 3)
    assert (got["delta_consistent"], got["delta_inconsistent"]) == (pytest.approx(1.5), pytest.approx(-0.5))
    assert (got["delta_won"], got["delta_lost"]) == (pytest.approx(1.0), pytest.approx(0.0))
    # gate bins of width 0.05 over all joined rows: 0.32 -> bin 6, 0.52 -> bin 10 (inconsistent);
    # 0.91 -> 18, 0.57 -> 11, 0.5 -> 10 (the row without a Delta)
    assert [i for i, c in enumerate(got["gate_hist"]["inconsistent"]) for _ in range(c)] == [6, 10]
    assert [i for i, c in enumerate(got["gate_hist"]["consistent"]) for _ in range(c)] == [10, 11, 18]
    assert pearson([1.0, 1.0], [0.0, 1.0]) is None and pearson([1.0], [2.0]) is None


def test_group_outcomes_hand_made():
    actions = {"u1/a#0": {"won": False}, "u1/a#1": {"won": False},   # all fail
               "u1/b#0": {"won": True}, "u1/b#1": {"won": False},    # mixed
               "u1/c#0": {"won": True}, "u1/c#1": {"won": True},     # all win
               "u2/a#0": {"won": False}, "u2/a#1": {"won": None},    # an unknown outcome is left out
               "eval/a#0": {"won": False}}
    assert group_outcomes(actions) == {1: {"groups": 3, "all_fail": 1, "all_win": 1},
                                       2: {"groups": 1, "all_fail": 1, "all_win": 0}}


def test_probe_summary_hand_computed():
    rows = [{"consistent": True, "d_a": np.array([0.0, 0.2]), "d_e": np.array([0.0, 0.2]), "subgoal": "find"},
            {"consistent": False, "d_a": np.array([-0.2]), "d_e": np.array([0.1, 0.3]), "subgoal": "find"},
            {"consistent": False, "d_a": np.array([0.0, -0.4]), "d_e": np.array([-0.1]), "subgoal": "put",
             "l0_e": np.array([-0.5, -0.25])}]
    sig = lambda x: 1.0 / (1.0 + np.exp(-5.0 * x))  # noqa: E731
    s = _summary(rows, beta=5.0)
    assert (s["steps_consistent"], s["steps_inconsistent"]) == (1, 2)
    assert s["gate_consistent"] == pytest.approx((sig(0.0) + sig(0.2)) / 2)
    # token mean over the pooled tokens of the detour steps: (-0.2), (0.0, -0.4)
    assert s["gate_inconsistent"] == pytest.approx((sig(-0.2) + sig(0.0) + sig(-0.4)) / 3)
    assert s["lift_expert"] == pytest.approx((0.4 + -0.1) / 2)
    assert s["lift_sampled"] == pytest.approx((-0.2 + -0.4) / 2)
    assert s["headroom_expert"] == pytest.approx(0.75)  # only the row with plain log-probs counts
    assert s["by_subgoal"] == {"find": {"steps": 1, "lift_expert": pytest.approx(0.4), "lift_sampled": pytest.approx(-0.2),
                                        "headroom_expert": None},
                               "put": {"steps": 1, "lift_expert": pytest.approx(-0.1), "lift_sampled": pytest.approx(-0.4),
                                       "headroom_expert": pytest.approx(0.75)}}
    assert _summary([], 5.0)["gate_consistent"] is None
    assert subgoal_verb("<think>put a hot apple in fridge. find the apple</think><action>go to x 1</action>") == "find"
    assert subgoal_verb("<think>put down the mug</think><action>look</action>") == "put"
    assert subgoal_verb("<action>look</action>") == ""
    # the apple of PICK_TASK starts in fridge 1
    assert names_start_place("find the apple (here it was inside the closed fridge 1, so go there)", PICK_TASK)
    assert not names_start_place("find the apple (here it was on the sinkbasin 1)", PICK_TASK)
    assert not names_start_place("look in fridge 12", PICK_TASK) and not names_start_place(None, PICK_TASK)
    assert names_start_place(noisy_episode(PICK_TASK, random.Random(1), 0.5, 0.0, 12, 2, search=True).skill(), PICK_TASK)


def test_step_recorder_appends_compact_trajectories(tmp_path):
    demo = noisy_episode(PICK_TASK, random.Random(0), 0.3, 0.3, 6, 2)
    record = step_recorder(tmp_path)
    record(UpdateRecord(3, [demo.to_trajectory("u3/hand-pick#1")], {}, {}, {}, {}))
    got = read_step_actions(tmp_path)
    assert got == {"u3/hand-pick#1": {"task_id": "hand-pick", "actions": [s.action for s in demo.steps],
                                      "won": demo.to_trajectory("x").won}}
    # a run killed mid-write leaves a torn last line; the resumed run's recorder drops it and appends
    path = tmp_path / "rl" / "step_actions.jsonl"
    path.write_text(path.read_text() + '{"traj_id": "u4/hand-pick#0", "task_')
    with pytest.warns(UserWarning, match="torn last line"):
        resumed = step_recorder(tmp_path)
    resumed(UpdateRecord(4, [demo.to_trajectory("u4/hand-pick#2")], {}, {}, {}, {}))
    assert sorted(read_step_actions(tmp_path)) == ["u3/hand-pick#1", "u4/hand-pick#2"]
    assert read_step_actions(tmp_path / "nothing") == {}


def test_repeat_share_hand_made(tmp_path):
    """Two trajectories: actions (a, a, a) and (b, invalid, b, c): the repeats are steps 2 and 3
    of the first (the invalid step breaks the second's run) -> 2 of 7 steps."""
    from seed_jax.rollout.trajectory import StepSample, Trajectory, write_trajectories

    def traj(i, acts):
        steps = [StepSample(prompt_ids=[], response_ids=[], response_logprobs=[], response_text="", prompt_text="",
                            raw_observation="", reward=0.0, valid=bool(a), action=a) for a in acts]
        return Trajectory(task_id=f"t{i}", group_id=0, traj_id=f"t{i}", task_description="", steps=steps,
                          episode_reward=0.0, won=False)

    (tmp_path / "eval").mkdir()
    write_trajectories(tmp_path / "eval" / "final_seen.trajectories.jsonl",
                       [traj(0, ["go to a 1"] * 3), traj(1, ["look", "", "look", "go to c 1"])])
    assert repeat_share(tmp_path, "final", "seen") == pytest.approx(2 / 7)
    assert repeat_share(tmp_path, "final", "unseen") is None


# ------------------------------------------------------------------ configs and arms


@pytest.mark.parametrize("preset", ["study", "ci", "tiny", "hard"])
def test_presets_validate(preset):
    c = _household_config(preset)
    validate(c)
    assert c.stage1.analyzer == "scripted" and c.analysis.analyzer == "self"
    assert 0 < c.rl.eval_every < c.rl.num_updates
    for arm in arms_of(c):
        assert arm_config(c, arm, 1).seed == 1
    a = arm_config(c, "seed@0.1", 2)
    assert a.method == "seed" and a.train.lambda_opd == 0.1 and c.train.lambda_opd == 0.01


def test_hard_preset_changes_only_the_rl_task_set_and_budget():
    """The hard preset runs from the study's stage 0 and stage 1 (--shared): everything those
    stages read is the study's; the RL tasks come from 8-receptacle layouts, 45 updates."""
    study, hard = _household_config("study").to_dict(), _household_config("hard").to_dict()
    diff = {(sec, k) for sec in study for k in (study[sec] if isinstance(study[sec], dict) else [None])
            if (study[sec].get(k) if k else study[sec]) != (hard[sec].get(k) if k else hard[sec])}
    assert diff == {("env", "num_receptacles"), ("rl", "num_updates"),
                    ("rl", "checkpoint_every"), ("study", "methods"), ("study", "probe_tasks")}
    assert hard["env"]["num_receptacles"] == 8 and hard["rl"]["num_updates"] == 45
    for preset, n in (("hard", 8), ("study", 5)):  # the RL tasks' layouts
        bench = make_benchmark(_household_config(preset).env)
        assert {len(load_task(t)[0].receptacles) for t in bench.tasks(bench.train_split)[:8]} == {n}


@pytest.mark.parametrize("preset", ["study", "ci", "gpu", "hard"])
def test_oracle_arm_is_seed_with_the_envs_expert_skills(preset):
    c = _household_config(preset)
    assert "oracle" in arms_of(c)
    o, s = arm_config(c, "oracle", 3), arm_config(c, "seed", 3)
    assert (o.method, o.analysis.analyzer, o.seed) == ("seed", "scripted", 3) and c.analysis.analyzer == "self"
    o.analysis.analyzer = "self"
    assert o.to_dict() == s.to_dict()  # nothing else differs from the SEED arm
    lam = arm_config(c, "oracle@0.1", 0)
    assert lam.analysis.analyzer == "scripted" and lam.train.lambda_opd == 0.1


def _study_script(*args):
    return subprocess.run([sys.executable, str(REPO / "bench" / "household_study.py"), *args], cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=300)


@pytest.mark.integration  # subprocess launches (CONTRIBUTING.md tiers)
def test_study_check_validates_every_arm_and_exits_2_naming_the_first_that_does_not():
    r = _study_script("--preset", "ci", "--check")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "oracle: method seed, analysis.analyzer scripted, lambda_opd 0.01, seeds 0: ok" in r.stdout
    assert "sft_grpo: method sft_grpo, analysis.analyzer self, no OPD" in r.stdout
    assert "3 arms of preset ci validate" in r.stdout
    # webshop has no expert analysis: SEED (own skills) validates, the oracle does not
    r = _study_script("--preset", "ci", "--check", "--arms", "seed,oracle", "--set", "env.name=webshop",
                      "--set", "stage1.analyzer=heuristic")
    assert r.returncode == 2 and "seed: method seed" in r.stdout and "oracle" not in r.stdout
    assert r.stderr.strip() == ("error: arm oracle: config.analysis.analyzer: 'scripted' reads the env's expert "
                                "analysis, which only household provides, not env 'webshop' (got 'scripted')")


def test_study_report_refuses_a_missing_study_directory(tmp_path):
    r = _study_script("--preset", "ci", "--report", "--out", str(tmp_path / "none"))
    assert r.returncode == 2 and not (tmp_path / "none").exists()
    assert r.stderr.strip().endswith(f"--report: {tmp_path / 'none'} is not a study directory "
                                     "(nothing to report; give --out, or --archive to restore)")


def test_report_mean_std():
    m, s, n = mean_std([0.5, 0.25, None, 0.75])
    assert (m, n) == (0.5, 3) and s == pytest.approx(0.25)  # sample std of (.25, .5, .75)
    assert fmt_pct(m, s) == "50.0 ± 25.0" and fmt_pct(None, None) == "-"
    assert mean_std([0.3])[1] is None


def test_ci95_student_t():
    # hand: values 0.1, 0.2, 0.3 -> mean 0.2, s = 0.1, half = t_{0.975,2} * 0.1 / sqrt(3) = 4.303 * 0.057735
    m, h, n = ci95([0.1, None, 0.2, 0.3])
    assert n == 3 and m == pytest.approx(0.2) and h == pytest.approx(4.303 * 0.1 / np.sqrt(3))
    assert ci95([0.4]) == (0.4, None, 1) and ci95([]) == (None, None, 0)
    stats = pytest.importorskip("scipy.stats")
    for df, t in enumerate(T975, start=1):  # the printed table against the t distribution
        assert t == pytest.approx(stats.t.ppf(0.975, df), abs=6e-4), df


def test_change_table_hand_made():
    res = {"splits": ["seen", "unseen"], "start": {"seen": 0.5, "unseen": 0.4},
           "arms": {"sft_grpo": {"0": {"final": {"seen": 0.6, "unseen": 0.5}},
                                 "1": {"final": {"seen": 0.7, "unseen": 0.5}},
                                 "2": {"final": {"seen": 0.8, "unseen": None}}}}}
    lines = change_table(res, ["sft_grpo", "seed"])
    row = [ln for ln in lines if ln.startswith("| GRPO")]
    # seen: changes .1 .2 .3 -> +20.0 +- 4.303 * 10 / sqrt(3) = 24.8 points; unseen: one value per seed 0, 1
    half = 4.303 * 10 / np.sqrt(3)
    assert row == [f"| GRPO (stage-1 SFT, lambda_opd=0) | +20.0 [{20 - half:+.1f}, {20 + half:+.1f}] | "
                   "+10.0 [+10.0, +10.0] | 3 |"]
    assert change_table({**res, "arms": {}}, ["sft_grpo"]) == []
    # paired: seed k's change is against the start evaluated with seed k (others: the common start)
    paired = {**res, "start_by_seed": {"0": {"seen": 0.3, "unseen": 0.5}, "1": {"seen": 0.7, "unseen": None}}}
    assert start_changes(paired, "sft_grpo", "seen") == pytest.approx([0.3, 0.0, 0.3])
    assert start_changes(paired, "sft_grpo", "unseen") == pytest.approx([0.0, 0.1])
    assert "same seed" in "\n".join(change_table(paired, ["sft_grpo"]))


def test_paired_table_hand_made():
    res = {"splits": ["seen", "unseen"], "start": {"seen": 0.5, "unseen": 0.4},
           "arms": {"sft_grpo": {"0": {"final": {"seen": 0.6, "unseen": 0.5}},
                                 "1": {"final": {"seen": 0.7, "unseen": 0.5}},
                                 "2": {"final": {"seen": 0.8, "unseen": 0.6}}},
                    "seed": {"0": {"final": {"seen": 0.7, "unseen": 0.5}},
                             "1": {"final": {"seen": 0.9, "unseen": None}},
                             "2": {"final": {"seen": 1.1, "unseen": 0.4}},
                             "3": {"final": {"seen": 0.0, "unseen": 0.0}}}}}  # seed 3: no GRPO twin
    assert paired_differences(res, "seed", "sft_grpo", "seen") == pytest.approx([0.1, 0.2, 0.3])
    assert paired_differences(res, "seed", "sft_grpo", "unseen") == pytest.approx([0.0, -0.2])
    lines = paired_table(res, ["sft_grpo", "seed"])
    row = [ln for ln in lines if ln.startswith("| SEED")]
    # seen: .1 .2 .3 -> +20.0 +- 4.303 * 10 / sqrt(3); unseen: 0, -20 -> -10.0 +- 12.706 * 14.142 / sqrt(2)
    h3, h2 = 4.303 * 10 / np.sqrt(3), 12.706 * (20 / np.sqrt(2)) / np.sqrt(2)  # s = 20 / sqrt(2) points
    assert len(row) == 1 and row[0].endswith(
        f"| +20.0 [{20 - h3:+.1f}, {20 + h3:+.1f}] | -10.0 [{-10 - h2:+.1f}, {-10 + h2:+.1f}] | 3 |")
    assert not [ln for ln in lines if ln.startswith("| GRPO")]  # the reference has no row
    assert paired_table({**res, "arms": {"seed": res["arms"]["seed"]}}, ["seed"]) == []


def test_skill_accuracy_by_update_hand_made(tmp_path):
    """PICK_TASK's apple starts in the closed fridge 1: an episode shows it only after 'open fridge 1'."""
    shown, not_shown = ["go to fridge 1", "open fridge 1"], ["go to sinkbasin 1", "go to fridge 1"]
    rows = [{"update": 1, "traj_id": "a", "task_id": "hand-pick", "parse_ok": True, "skill": "The apple was in the fridge 1."},
            {"update": 1, "traj_id": "b", "task_id": "hand-pick", "parse_ok": True, "skill": "Look on the sinkbasin 1."},
            {"update": 1, "traj_id": "c", "task_id": "hand-pick", "parse_ok": False, "skill": "fridge 1"},  # unparsed
            {"update": 2, "traj_id": "d", "task_id": "hand-pick", "parse_ok": True, "skill": "Check fridge 12 first."},
            {"update": 2, "traj_id": "e", "task_id": "hand-pick", "parse_ok": True, "skill": "the fridge 1"},  # no actions
            {"update": 2, "traj_id": "f", "task_id": "unknown", "parse_ok": True, "skill": "fridge 1"},
            {"update": 2, "traj_id": "g", "task_id": "hand-pick", "parse_ok": False, "skill": "", "summary": ""}]  # GRPO's row
    (tmp_path / "skills.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    actions = {tid: {"task_id": "hand-pick", "actions": acts, "won": False}
               for tid, acts in {"a": shown, "b": not_shown, "c": shown + ["take apple 1 from fridge 1"], "d": shown,
                                 "f": shown, "g": shown}.items()}
    got = skill_accuracy_by_update(tmp_path, {"hand-pick": PICK_TASK}, actions)
    # by hand: update 1 = a (shown, names it), b (not shown), c (shown, unparsed); update 2 = d (shown, wrong
    # place), e (named, no recorded actions: not counted as shown); f (unknown task) and g (no analysis) left out
    assert got == {1: {"skills": 3, "parsed": 2, "names_place": 1, "seen": 2, "seen_names_place": 1},
                   2: {"skills": 2, "parsed": 2, "names_place": 1, "seen": 1, "seen_names_place": 0}}
    assert skill_accuracy_by_update(tmp_path, {"hand-pick": PICK_TASK})[2] == {
        "skills": 2, "parsed": 2, "names_place": 1, "seen": 0, "seen_names_place": 0}
    per_seed = [{"skill_accuracy": {str(u): v for u, v in got.items()}}]
    assert pooled_share(per_seed, "skill_accuracy", "names_place", 1, 3) == 2 / 5
    assert pooled_share(per_seed, "skill_accuracy", "parsed", 2, 3) == 1.0
    assert pooled_share(per_seed, "skill_accuracy", "seen", 1, 3) == 3 / 5
    assert pooled_share(per_seed, "skill_accuracy", "seen_names_place", 1, 3) == 1 / 3
    # a run recorded before 'seen' existed: its counts read as 0, the reading accuracy as unknown
    old = [{"skill_accuracy": {"1": {"skills": 3, "parsed": 2, "names_place": 1}}}]
    assert pooled_share(old, "skill_accuracy", "names_place", 1, 2) == 1 / 3
    assert pooled_share(old, "skill_accuracy", "seen_names_place", 1, 2) is None
    assert skill_accuracy_by_update(tmp_path / "none", {}) == {}
    with pytest.raises(KeyError, match="not 'won'"):
        pooled_share(per_seed, "skill_accuracy", "won", 1, 3)


def test_analyzer_accuracy_hand_made(tmp_path):
    """Five stage-1 episodes of the hand-made pick task (apple starts in fridge 1): a won one whose
    skill names fridge 1, a won one whose skill names the sinkbasin, a lost one whose skill names
    fridge 1, a lost one whose analysis did not parse (no record), and an env error (left out);
    a won one of the same task with the apple on the sinkbasin whose skill names the fridge; plus
    one of an unknown task (left out). By hand: all 5 episodes, 4 parsed, 2 accurate; won 3 -> 3
    parsed, 1 accurate; lost 2 -> 1 parsed, 1 accurate; the constant guess 'fridge 1' (4 of the 5
    episodes start there) is right 4 times. The episodes a and b open the fridge and g goes to the
    sinkbasin, so they showed the apple's place (3, all parsed, 1 accurate: a); c and d only look
    (2, 1 parsed, 1 accurate: c's skill guessed right)."""
    from seed_jax.experiments.household.audit import analyzer_accuracy
    from seed_jax.rollout.trajectory import StepSample, Trajectory, write_trajectories
    from seed_jax.skills import canonical_answer, write_skill_records

    def step(action):
        return StepSample(prompt_ids=[], response_ids=[], response_logprobs=[], response_text="", prompt_text="",
                          raw_observation="", reward=0.0, valid=True, action=action)

    sink = {**PICK_TASK, "task_id": "hand-sink", "objects": {"apple 1": "sinkbasin 1", "mug 1": "fridge 1"}}

    def traj(tid, won, task="hand-pick", error=False, actions=("look",)):
        return Trajectory(task_id=task, group_id=0, traj_id=tid, task_description="", steps=[step(a) for a in actions],
                          episode_reward=10.0 * won, won=won, env_error=error)

    def rec(tid, skill):
        return SkillRecord(prompt="x", answer=canonical_answer("s", skill), traj_id=tid, outcome="", task_id="hand-pick")

    (tmp_path / "stage1").mkdir()
    write_trajectories(tmp_path / "stage1" / "trajectories.jsonl",
                       [traj("a", True, actions=("go to fridge 1", "open fridge 1")),
                        traj("b", True, actions=("go to fridge 1", "open fridge 1")), traj("c", False), traj("d", False),
                        traj("e", False, error=True), traj("f", True, task="unknown"),
                        traj("g", True, task="hand-sink", actions=("go to sinkbasin 1",))])
    write_skill_records(tmp_path / "stage1" / "sft.jsonl",
                        [rec("a", "find the apple (here it was inside the fridge 1), take it"),
                         rec("b", "find the apple (here it was on the sinkbasin 1), take it"),
                         rec("e", "the apple was in the fridge 1 all along"),
                         rec("f", "the apple was in the fridge 1 all along"),
                         rec("g", "find the apple (here it was inside the fridge 1), take it")])
    write_skill_records(tmp_path / "stage1" / "sft_heldout.jsonl",
                        [rec("c", "avoid this: the apple was in the closed fridge 1 all along")])
    got = analyzer_accuracy(tmp_path, {"hand-pick": PICK_TASK, "hand-sink": sink})
    assert got == {"all": {"trajectories": 5, "parsed": 4, "names_place": 2},
                   "won": {"trajectories": 3, "parsed": 3, "names_place": 1},
                   "lost": {"trajectories": 2, "parsed": 1, "names_place": 1},
                   "seen": {"trajectories": 3, "parsed": 3, "names_place": 1},
                   "unseen": {"trajectories": 2, "parsed": 1, "names_place": 1},
                   "constant_guess": {"place": "fridge 1", "names_place": 4}}


def test_delta_table_and_group_shares_hand_made():
    def seed(r_e, r_o, groups):
        delta = {"steps": 10, "r_expert": r_e, "r_outcome": r_o, "delta_consistent": r_e, "delta_inconsistent": -r_e,
                 "delta_won": 0.0, "delta_lost": 0.0, "gate_hist": {"consistent": [], "inconsistent": []}}
        return {"audit": {"delta": delta}, "groups": groups}

    g = {"1": {"groups": 4, "all_fail": 4, "all_win": 0}, "2": {"groups": 4, "all_fail": 2, "all_win": 1},
         "3": {"groups": 4, "all_fail": 0, "all_win": 0}}
    res = {"arms": {"oracle": {"0": seed(0.2, 0.1, g), "1": seed(0.4, 0.1, {"3": {"groups": 4, "all_fail": 1,
                                                                                    "all_win": 0}})}}}
    rows = [r for r in delta_table(res, ["oracle"]) if r.startswith("| SEED-oracle")]
    # r_outcome: 0.1 in both seeds, an interval of width 0
    # r_expert over seeds: mean 0.3, s = 0.1414, half = t_{.975,1} * s / sqrt 2 = 12.706 * 0.1 = 1.2706
    assert rows == ["| SEED-oracle (expert skills) | 2 | 20 | +0.300 [-0.971, +1.571] | +0.100 [+0.100, +0.100] | "
                    "0.30 | -0.30 | 0.00 | 0.00 |"]
    ds = list(res["arms"]["oracle"].values())
    assert edge_windows(ds, "groups", 1) == ((1, 2), (3, 4))
    assert pooled_share(ds, 'groups', "all_fail", 1, 2) == 1.0 and pooled_share(ds, 'groups', "all_fail", 3, 4) == 1 / 8
    assert pooled_share(ds, 'groups', "all_win", 1, 4) == 1 / 16 and pooled_share(ds, 'groups', "all_fail", 7, 9) is None


def test_link_shared(tmp_path):
    shared, out = tmp_path / "shared", tmp_path / "out"
    with pytest.raises(FileNotFoundError, match="stage 1 has not finished"):
        link_shared(shared, out)
    (shared / "base" / "stages").mkdir(parents=True)
    (shared / "base" / "stages" / "eval.json").write_text("{}")
    (shared / "stage0").mkdir()
    link_shared(shared, out)
    link_shared(shared, out)  # idempotent
    assert (out / "base").resolve() == (shared / "base").resolve() and (out / "stage0").is_symlink()
    other = tmp_path / "other"
    (other / "base").mkdir(parents=True)
    with pytest.raises(FileExistsError, match="is not a link"):
        link_shared(shared, other)


def test_study_finishes_each_seed_before_the_next(tmp_path, monkeypatch):
    """A study stopped part-way holds complete pairs: each seed's start and every arm of it run
    before the next seed's (the pipeline is replaced by a recorder that writes the stage markers
    `run_study` checks, and fails on the fourth RL run as a kill would)."""
    from seed_jax.experiments.household import experiment

    ran = []

    def fake_pipeline(config, wd, stages, callbacks=None):
        wd = Path(wd)
        if stages == "rl,eval" and sum(r[1] == "rl,eval" for r in ran) == 3:
            raise KeyboardInterrupt("stopped")
        ran.append((str(wd.relative_to(tmp_path)), stages))
        _write(wd / "stages" / "eval.json", "{}")

    monkeypatch.setattr(experiment, "run_stage0", lambda config, policy: _write(Path(policy) / "stage0.json", "{}"))
    monkeypatch.setattr(experiment, "run_pipeline", fake_pipeline)
    monkeypatch.setattr(experiment, "copy_stage1", lambda base, wd: None)
    monkeypatch.setattr(experiment, "write_report", lambda *a: {})
    c = _household_config("ci")
    c.study.probe_tasks = 0
    with pytest.raises(KeyboardInterrupt):
        run_study(c, tmp_path, arms=["sft_grpo", "seed"], seeds=[0, 1, 2])
    assert [r[0] for r in ran if r[0].startswith(("start", "arms"))] == [
        "start/seed0", "arms/sft_grpo/seed0", "arms/seed/seed0",
        "start/seed1", "arms/sft_grpo/seed1",  # stopped in seed 1's SEED run: seed 0 is a whole pair
    ]
    assert ran[0] == ("stage0/eval_run", "eval") and ran[1] == ("base", "collect,annotate,sft,eval")


def _write(path, text="x"):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_archive_keeps_finished_pieces_without_caches_and_copies(tmp_path):
    """`archive.pack` stores each finished piece once, leaving out caches, checkpoints, the
    arms' stage-1 copies and final models of seeds other than the probe's; `unpack` restores
    exactly the stored files into a study directory that lacks them, with their timings."""
    out, arch = tmp_path / "study", tmp_path / "archive"
    kept = ["stage0/policy/model.safetensors", "stage0/policy/stage0.json", "stage0/eval_run/stages/eval.json",
            "base/stages/eval.json", "base/sft/model/model.safetensors", "base/stage1/sft.jsonl",
            "start/seed0/stages/eval.json", "start/seed0/eval/checkpoint_seen.json",
            "arms/seed/seed0/stages/eval.json", "arms/seed/seed0/rl/step_actions.jsonl",
            "arms/seed/seed0/rl/final_model/model.safetensors", "arms/seed/seed0/metrics.jsonl",
            "arms/seed/seed1/stages/eval.json", "arms/seed_l0.1/seed0/stages/eval.json"]
    left_out = ["stage0/policy_bc/model.safetensors", "base/xla_cache/a", "base/tb/events",
                "arms/seed/seed0/rl/ckpt/3/state", "arms/seed/seed0/sft/model/model.safetensors",
                "arms/seed/seed0/stage1/sft.jsonl", "arms/seed/seed1/rl/final_model/model.safetensors",
                "arms/seed/seed0/xla_cache/b"]
    unfinished = ["arms/sft_grpo/seed0/metrics.jsonl", "start/seed1/eval/checkpoint_seen.json"]
    for f in kept + left_out + unfinished:
        _write(out / f, f)
    timings = {"stage0": {"wall_s": 1.0}, "stage1": {"wall_s": 2.0}, "start/seed0": {"wall_s": 3.0},
               "seed/seed0": {"wall_s": 4.0}, "seed@0.1/seed0": {"wall_s": 5.0}, "sft_grpo/seed0": {"wall_s": 6.0},
               "probe": {"wall_s": 7.0}}  # the probe's timing travels with probe.json
    _write(out / "timings.json", json.dumps(timings))
    _write(out / "probe.json", "{}")
    names = pack(out, arch, probe_seed=0)
    assert sorted(names) == ["probe.json", "seed-seed0", "seed-seed1", "seed_l0.1-seed0", "shared", "start-seed0"]
    assert pack(out, arch, probe_seed=0) == []  # nothing new
    back = tmp_path / "restored"
    assert sorted(unpack(arch, back)) == sorted(names)
    files = sorted(str(p.relative_to(back)) for p in back.rglob("*") if p.is_file())
    assert files == sorted(kept + ["timings.json", "probe.json"])
    assert all((back / f).read_text() == f for f in kept)
    assert json.loads((back / "timings.json").read_text()) == {k: v for k, v in timings.items() if k != "sft_grpo/seed0"}
    assert unpack(arch, back) == []  # everything there already
    # a study that links another's stage 0 / stage 1 leaves the shared piece to that one's archive
    linked = tmp_path / "linked"
    link_shared(out, linked)
    _write(linked / "arms/seed/seed2/stages/eval.json")
    assert pack(linked, tmp_path / "archive2") == ["seed-seed2"]


def test_probe_points_are_the_policies_present(tmp_path):
    """The probe reads the stage-1 checkpoint and the first seed's final GRPO / SEED policies
    that exist, so a study probes again once another of them has finished."""
    _write(tmp_path / "base/sft/model/config.json")
    _write(tmp_path / "arms/seed/seed3/rl/final_model/config.json")
    _write(tmp_path / "arms/seed_static/seed3/rl/final_model/config.json")
    _write(tmp_path / "arms/sft_grpo/seed3/rl/step_actions.jsonl")  # unfinished: no final model
    arms = ["sft_grpo", "seed", "seed_static"]
    assert set(probe_points(tmp_path, arms, [3, 4])) == {"stage-1 checkpoint", "seed"}
    assert set(probe_points(tmp_path, arms, [4, 3])) == {"stage-1 checkpoint"}


# ------------------------------------------------------------------ stage 0 (slow) and the ci study


@pytest.mark.slow
def test_stage0_bc_beats_a_random_policy(tmp_path):
    """A short stage 0 on an easy household (4 receptacles, no distractor, objects on surfaces)
    succeeds more often than a uniformly random admissible policy on the same tasks."""
    c = _household_config("ci")
    c.env.num_receptacles, c.env.num_distractors, c.env.closed_share = 4, 0, 0.0
    c.env.max_steps = c.rollout.max_steps = 10
    c.env.num_eval_tasks = 16
    c.stage0.update(hidden=96, num_tasks=200, copy_steps=150, steps=250, eval_tasks=16, noise=0.05,
                    invalid=0.0, nothing=0.0,
                    search=False)  # the omniscient demonstrator: a searching clone needs a longer stage 0
    s = run_stage0(c, tmp_path / "policy")
    assert (tmp_path / "policy" / "config.json").exists() and (tmp_path / "policy" / "tokenizer.json").exists()
    bench = make_benchmark(c.env)
    rand = random_policy_success(bench.tasks("seen")[:16], 10, c.env.history_window, episodes=8)
    assert s["random_policy_success"] <= rand + 0.1
    assert s["eval_success_rate"] > rand, s
    assert s["eval_invalid_rate"] < 0.2


@pytest.mark.integration
def test_stage0_starts_from_a_pretrained_model(tmp_path, smol_tokenizer):
    """``stage0.init`` = a HF directory (the gpu preset's path, here a tiny random llama over
    SmolLM2's tokenizer): stage 0 clones on that model's own tokenizer from its weights (checked
    against transformers' tensors), with no induction warm-up, and saves a policy of its shape."""
    import numpy as np

    from seed_jax.experiments.household.bc import BCConfig, initial_policy
    from seed_jax.models import load_model
    from tests.conftest import tiny_hf_model

    hf = tiny_hf_model("llama", vocab_size=len(smol_tokenizer), bos_token_id=smol_tokenizer.bos_token_id,
                       eos_token_id=smol_tokenizer.eos_token_id, pad_token_id=smol_tokenizer.pad_token_id,
                       max_position_embeddings=2048)
    src = tmp_path / "pretrained"
    hf.save_pretrained(src)
    smol_tokenizer.save_pretrained(src)
    c = _household_config("tiny")
    c.stage0.update(init=str(src), copy_steps=5, steps=2, analyzer_steps=1, eval_tasks=1)
    bc = BCConfig.from_config(c.stage0)
    tok, cfg, params = initial_policy(c, bc)
    assert len(tok) == len(smol_tokenizer) and cfg.hidden_size == 64 and cfg.num_layers == 2
    want = hf.model.embed_tokens.weight.detach().numpy()
    assert np.allclose(np.asarray(_leaf(params, want.shape)), want)
    s = run_stage0(c, tmp_path / "policy")
    assert s["copy_steps"] == 0 and s["train_steps"] == 2 and s["vocab"] == len(smol_tokenizer)
    assert s["params"] == sum(p.numel() for p in hf.parameters())
    saved = load_model(tmp_path / "policy")
    assert saved.config.vocab_size == len(smol_tokenizer) and saved.config.hidden_size == 64
    assert (tmp_path / "policy" / "tokenizer.json").exists()


@pytest.mark.integration
def test_stage0_continues_a_stage0_policy(tmp_path):
    """``stage0.init`` = a finished stage-0 policy with ``steps = 0``: no warm-up, no BC; with no
    multi-task steps the saved policy is the source's weights bit for bit (it was loaded, nothing
    else ran); with two, they move, over ``analyzer_episodes`` analyzer demonstrations per task."""
    from safetensors.numpy import load_file

    c = _household_config("tiny")
    run_stage0(c, tmp_path / "src")
    src = load_file(tmp_path / "src" / "model.safetensors")
    outs = {}
    for k, (steps, episodes) in enumerate([(0, 1), (2, 3)]):
        cc = _household_config("tiny")
        cc.stage0.update(init=str(tmp_path / "src"), steps=0, analyzer_steps=steps, analyzer_episodes=episodes)
        s = run_stage0(cc, tmp_path / f"cont{k}")
        assert s["copy_steps"] == 0 and s["train_steps"] == 0 and s["loss_first"] is None
        assert s["analyzer_examples"] == episodes * c.stage0.num_tasks and s["multitask_steps"] == steps
        outs[k] = load_file(tmp_path / f"cont{k}" / "model.safetensors")
    assert outs[0].keys() == src.keys()
    assert all(np.array_equal(outs[0][n], src[n]) for n in src)
    assert any(not np.array_equal(outs[1][n], src[n]) for n in src)


def _leaf(params, shape):
    """The one leaf of ``params`` with this shape (the embedding table)."""
    import jax

    leaves = [x for x in jax.tree_util.tree_leaves(params) if tuple(x.shape) == tuple(shape)]
    assert len(leaves) == 1, [tuple(x.shape) for x in jax.tree_util.tree_leaves(params)]
    return leaves[0]


@pytest.mark.integration
def test_ci_study_end_to_end(tmp_path):
    """The ci preset of the study (about 3 minutes on 2 cores) runs every stage and arm through
    the pipeline; it is the fast-tier guard of `bench/household_study.py`."""
    c = _household_config("ci")
    res = run_study(c, tmp_path)
    md = (tmp_path / "results.md").read_text()
    assert "| GRPO" in md and "| SEED" in md and "stage-1 checkpoint" in md
    for f in ("results.json", "curves.png", "timings.json"):
        assert (tmp_path / f).exists()
    # the start evaluated with each seed, paired with that seed's final evaluation
    assert (tmp_path / "start" / "seed0" / "eval" / "checkpoint_unseen.json").exists()
    assert set(res["start_by_seed"]) == {"0"} and "same seed" in md
    for arm in c.study.methods:
        wd = tmp_path / "arms" / arm / "seed0"
        assert (wd / "eval" / "final_seen.json").exists() and (wd / "eval" / f"rl_{c.rl.eval_every:06d}_unseen.json").exists()
        assert (wd / "rl" / "step_actions.jsonl").exists()
        # the arm started from the shared stage-1 checkpoint: same SFT weights as base/
        a = (wd / "sft" / "model" / "model.safetensors").read_bytes()
        assert a == (tmp_path / "base" / "sft" / "model" / "model.safetensors").read_bytes()
    n = c.rl.num_updates * c.rl.tasks_per_update * c.rollout.group_size
    assert len((tmp_path / "arms" / "seed" / "seed0" / "rl" / "step_actions.jsonl").read_text().splitlines()) == n
    assert set(res["arms"]) == set(c.study.methods) and "oracle" in res["arms"] and "| SEED-oracle" in md
    # the Delta audit and the GRPO groups: every gate row carries its Delta, every update has one
    # group per task; GRPO has no gates, the oracle (whose every trajectory has a skill) has them
    # (the toy SEED arm's own skills rarely parse, so it may have none)
    gates = (tmp_path / "arms" / "oracle" / "seed0" / "step_gates.jsonl").read_text().splitlines()
    gate_rows = [json.loads(x) for x in gates]
    assert gate_rows and all(math.isfinite(r["delta_mean"]) for r in gate_rows)
    audit = res["arms"]["oracle"]["0"]["audit"]
    assert audit["delta"]["steps"] == audit["joined_rows"] == len(gate_rows)
    assert res["arms"]["sft_grpo"]["0"]["audit"] is None
    for arm in c.study.methods:
        groups = res["arms"][arm]["0"]["groups"]
        assert len(groups) == c.rl.num_updates and all(g["groups"] == c.rl.tasks_per_update for g in groups.values())
    assert "## Delta audit" in md and "## GRPO signal" in md and (tmp_path / "audit.png").exists()
    # the oracle's skills are the expert's analysis, which names where the object was: accuracy 1
    acc = res["arms"]["oracle"]["0"]["skill_accuracy"]
    assert sum(v["skills"] for v in acc.values()) == n and all(v["names_place"] == v["skills"] for v in acc.values())
    assert all(v["seen_names_place"] == v["seen"] <= v["skills"] for v in acc.values())  # read from the run's actions
    assert "## Analyzer accuracy" in md and "names it when shown" in md
    assert not res["arms"]["sft_grpo"]["0"]["skill_accuracy"]
    # the oracle's teacher read the env's expert analysis of each very episode (rebuilt from its
    # recorded commands; `household_scripted_answer` called directly)
    expert = household_scripted_answer(household_splits(c.env), bool(c.env.skill_plan))
    oracle = tmp_path / "arms" / "oracle" / "seed0"
    episodes = {r["traj_id"]: r for r in map(json.loads, (oracle / "rl" / "step_actions.jsonl").read_text().splitlines())}
    logged = [json.loads(line) for line in (oracle / "skills.jsonl").read_text().splitlines()]
    assert len(logged) == n and {e["traj_id"] for e in logged} == set(episodes)
    for e in logged:
        ep = episodes[e["traj_id"]]
        traj = SimpleNamespace(traj_id=ep["traj_id"], task_id=ep["task_id"], won=ep["won"],
                               steps=[SimpleNamespace(valid=v, action=a, response_text="")
                                      for a, v in zip(ep["actions"], ep["valid"])])
        assert e["parse_ok"] and e["skill"] == parse_skill(expert(traj)).skill, e["traj_id"]
    # the analyzer bench: the stage-1 checkpoint plays 2 tasks twice and analyses its own episodes
    from bench.household_analyzer import main as analyzer_main

    given = os.path.relpath(tmp_path)  # recorded as given, not as this machine's absolute path
    assert analyzer_main(["--shared", given, "--preset", "ci", "--tasks", "2", "--group", "2",
                          "--out", str(tmp_path / "analyzer")]) == 0
    (row,) = json.loads((tmp_path / "analyzer" / "analyzer.json").read_text())["rows"]
    assert row["study"] == given
    (wd,) = [d for d in (tmp_path / "analyzer").iterdir() if d.is_dir()]
    ran = json.loads((wd / "config.json").read_text())
    assert ran["model"]["path"] == str(tmp_path / "base" / "sft" / "model") and ran["stage1"]["analyzer"] == "self"
    a = row["accuracy"]
    assert a["all"]["trajectories"] == 4 and a["won"]["trajectories"] + a["lost"]["trajectories"] == 4
    assert 0 <= a["all"]["names_place"] <= a["all"]["parsed"] <= 4
    assert a["seen"]["trajectories"] + a["unseen"]["trajectories"] == 4
    assert analyzer_main(["--shared", str(tmp_path / "nothing")]) == 2
    probe = json.loads((tmp_path / "probe.json").read_text())
    assert set(probe) == {"stage-1 checkpoint", "sft_grpo", "seed"}
    assert probe["seed"]["demos"] == c.study.probe_tasks and "Teacher probe" in md
    # a re-run finds everything done and only rewrites the report
    again = run_study(c, tmp_path)
    assert again["arms"]["seed"]["0"]["final"] == res["arms"]["seed"]["0"]["final"]
    # archived, the study goes on elsewhere from its pieces: nothing runs again (no arm copies
    # stage 1 anew), and the report is the same
    pack(tmp_path, tmp_path / "archive")
    elsewhere = run_study(c, tmp_path / "elsewhere", archive=tmp_path / "archive")
    assert not (tmp_path / "elsewhere" / "arms" / "seed" / "seed0" / "sft").exists()
    assert elsewhere["arms"] == res["arms"] and elsewhere["probe"] == res["probe"]
    # --report runs nothing and leaves out a run killed part-way (its files there, its last stage
    # marker not): SEED's seed 0 as if killed in its evaluation
    from bench.household_study import main as study_main

    (tmp_path / "elsewhere" / "arms" / "seed" / "seed0" / "stages" / "eval.json").unlink()
    (tmp_path / "elsewhere" / "results.md").unlink()
    assert study_main(["--preset", "ci", "--out", str(tmp_path / "elsewhere"), "--report", "--quiet"]) == 0
    partial = json.loads((tmp_path / "elsewhere" / "results.json").read_text())
    assert partial["arms"]["seed"] == {} and partial["arms"]["oracle"] == json.loads(json.dumps(res["arms"]["oracle"], default=str))
    assert not (tmp_path / "elsewhere" / "arms" / "seed" / "seed0" / "stages" / "eval.json").exists()  # not rerun
    assert "| SEED-oracle" in (tmp_path / "elsewhere" / "results.md").read_text()


def test_hardness_scan_refuses_bad_input_before_any_work(tmp_path, capsys):
    from bench.household_hardness import all_fail_share, main, parse_grid

    assert parse_grid("5:0.3,8:1") == [(5, 0.3), (8, 1.0)]
    with pytest.raises(ValueError, match=r"'8-1' is not RECEPTACLES:CLOSED_SHARE"):
        parse_grid("5:0.3,8-1")
    # by hand, G = 8: types of 12 tasks each at p = 0.5 and p = 0: (12 * 0.5^8 + 12 * 1) / 24
    assert all_fail_share({"a": {"n": 12, "success_rate": 0.5}, "b": {"n": 12, "success_rate": 0.0}}) == \
        pytest.approx((0.5 ** 8 + 1.0) / 2)
    assert main(["--shared", str(tmp_path), "--out", str(tmp_path / "o")]) == 2
    assert "no finished stage 1 there" in capsys.readouterr().err
    (tmp_path / "base" / "stages").mkdir(parents=True)
    (tmp_path / "base" / "stages" / "eval.json").write_text("{}")
    (tmp_path / "base" / "sft" / "model").mkdir(parents=True)
    assert main(["--shared", str(tmp_path), "--grid", "3:0.3", "--out", str(tmp_path / "o")]) == 2
    assert "num_receptacles must be in [4, 15], got 3" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
