"""Household environment, its exact expert planner and the scripted annotator.

References that do not come from the code under test: hand-written observations, prompts and
plans for a hand-made task; a small independent interpreter of command sequences (what is held,
what was heated...) to check that expert plans really solve the task; a brute-force BFS over
*full* world states with *every* admissible command (no abstraction, no pruning) for the
expert's distances and optimal-action sets; hand-constructed failures for the annotator.
"""

from __future__ import annotations

import collections
import functools
import json
import os
import pickle
import random
import subprocess
import sys
from pathlib import Path

import pytest

from seed_jax.envs.household import (
    HOUSEHOLD_SPEC,
    EpisodeRecord,
    HouseholdConfig,
    HouseholdEnv,
    annotate_episode,
    annotate_json,
    annotate_trajectory,
    combinations,
    make_household_env,
    make_tasks,
    start_place_seen,
)
from seed_jax.envs.household.tasks import load_task
from seed_jax.envs.household.world import goal_reached, transitions

REPO = Path(__file__).resolve().parents[1]


def act(cmd: str) -> str:
    return f"<think>I follow the plan.</think><action>{cmd}</action>"


# a hand-made heat task: the apple is in the closed fridge, a mug on the countertop
HEAT_TASK = {
    "task_id": "hand-heat", "split": "seen", "task_type": "heat", "object": "apple", "target": "countertop",
    "task_description": "put a hot apple in countertop.", "target_object": "apple 1",
    "receptacles": ["cabinet 1", "countertop 1", "fridge 1", "microwave 1", "sinkbasin 1"],
    "objects": {"apple 1": "fridge 1", "mug 1": "countertop 1"}, "opened": [],
}
HEAT_PLAN = ["go to fridge 1", "open fridge 1", "take apple 1 from fridge 1", "go to microwave 1",
             "heat apple 1 with microwave 1", "go to countertop 1", "put apple 1 in/on countertop 1"]


# ------------------------------------------------------------------ independent references


def check_plan_solves(task: dict, plan: list[str]) -> bool:
    """Independent interpreter: does `plan` end with the task object, processed as the task
    asks (and not undone by a later opposite process), put in a receptacle of the target kind?"""
    obj, holding, props, put_in = task["target_object"], "", set(), ""
    need = {"pick": None, "clean": "clean", "heat": "hot", "cool": "cool"}[task["task_type"]]
    for cmd in plan:
        words = cmd.split()
        if words[0] == "take":
            holding = cmd[len("take "):].split(" from ")[0]
        elif words[0] == "put":
            if cmd.startswith(f"put {obj} "):
                put_in = cmd.split(" in/on ")[1]
            holding = ""
        elif words[0] in ("clean", "heat", "cool") and holding == obj:
            if words[0] == "clean":
                props.add("clean")
            elif words[0] == "heat":
                props -= {"cool"}
                props.add("hot")
            else:
                props -= {"hot"}
                props.add("cool")
    return bool(put_in) and put_in.rsplit(" ", 1)[0] == task["target"] and (need is None or need in props)


def brute_force(task: dict, state) -> tuple[int, set[str]]:
    """Full-state BFS with every admissible command: (goal distance, optimal first commands)."""
    layout, _ = load_task(task)
    if goal_reached(layout, state):
        return 0, set()
    frontier = {state: set()}
    seen = {state}
    depth = 0
    while frontier:
        depth += 1
        nxt: dict = {}
        for s, firsts in frontier.items():
            if goal_reached(layout, s):
                continue
            for cmd, (s2, _) in transitions(layout, s).items():
                if s2 in seen:
                    continue
                nxt.setdefault(s2, set()).update(firsts or {cmd})
        goals = [s for s in nxt if goal_reached(layout, s)]
        if goals:
            return depth, set().union(*(nxt[g] for g in goals))
        seen.update(nxt)
        frontier = nxt
    raise AssertionError("unsolvable")


# ------------------------------------------------------------------ expert planner


@pytest.mark.parametrize("split", ["seen", "unseen"])
def test_expert_plan_solves_every_generated_task(split):
    env = HouseholdEnv()
    for task in make_tasks(split, 200, seed=11):
        obs, info = env.reset(task)
        plan = info["expert_plan"]
        assert 1 <= len(plan) == info["expert_distance"] <= env.spec.max_steps
        assert check_plan_solves(task, plan), (task, plan)
        total, done = 0.0, False
        for i, cmd in enumerate(plan):
            assert not done
            assert cmd in env.admissible_commands and cmd in env.expert_actions()
            obs, reward, done, info = env.step(act(cmd))
            total += reward
            assert info["valid"] and info["admissible"] and info["expert_consistent"]
            assert info["expert_distance"] == len(plan) - i
        assert done and info["won"] and info["done_reason"] == "won" and total == 10.0 and reward == 10.0


def test_expert_hand_made_task():
    env = HouseholdEnv()
    obs, info = env.reset(HEAT_TASK)
    assert info["expert_plan"] == HEAT_PLAN
    assert info["expert_actions"] == ["go to fridge 1"] and info["expert_distance"] == 7
    env.step(act("go to countertop 1"))  # a detour: from the countertop the fridge is still the way
    assert env.expert_actions() == ["go to fridge 1"] and env.expert_result().distance == 7
    env.step(act("take mug 1 from countertop 1"))  # now a distractor in hand: put it down first or carry it
    # hand count: put mug (1) + 7 = 8, or go to fridge, open, put mug there, take apple... = 8 as well
    assert env.expert_result().distance == 8
    assert set(env.expert_actions()) == {"put mug 1 in/on countertop 1", "go to fridge 1"}


def test_expert_matches_brute_force_on_random_states():
    rng = random.Random(0)
    checked = holding_distractor = 0
    for cfg in (HouseholdConfig(5, 1, 0.5), HouseholdConfig(6, 2, 0.5), HouseholdConfig(4, 2, 1.0)):
        for split in ("seen", "unseen"):
            for task in make_tasks(split, 12, seed=5, config=cfg):
                env = HouseholdEnv(max_steps=60)
                env.reset(task)
                for _ in range(rng.randrange(0, 20)):  # random walk to a random reachable state
                    if env.done:
                        break
                    env.step(act(rng.choice(env.admissible_commands)))
                if env.done:
                    continue
                dist, firsts = brute_force(task, env.state)
                res = env.expert_result()
                assert (res.distance, set(res.actions)) == (dist, firsts), (task["task_id"], env.state)
                checked += 1
                holding_distractor += env.state.holding not in ("", task["target_object"])
    assert checked >= 50 and holding_distractor >= 3


def test_step_info_reports_expert_actions_before_the_step():
    env = HouseholdEnv()
    env.reset(HEAT_TASK)
    _, _, _, info = env.step(act("go to cabinet 1"))
    assert info["expert_actions"] == ["go to fridge 1"] and not info["expert_consistent"]
    _, _, _, info = env.step(act("go to fridge 1"))
    assert info["expert_actions"] == ["go to fridge 1"] and info["expert_consistent"]
    _, _, _, info = env.step("no tags")
    assert info["expert_actions"] == ["open fridge 1"] and not info["expert_consistent"]


# ------------------------------------------------------------------ dynamics, texts, invalid actions


def test_hand_written_episode_texts():
    env = HouseholdEnv()
    obs, info = env.reset(HEAT_TASK)
    assert obs == ("You are in the middle of a room. Looking quickly around you, you see a cabinet 1, a countertop 1, "
                   "a fridge 1, a microwave 1, and a sinkbasin 1.\n\nYour task is to: put a hot apple in countertop.")
    assert info["admissible_commands"] == ["go to cabinet 1", "go to countertop 1", "go to fridge 1",
                                           "go to microwave 1", "go to sinkbasin 1", "inventory", "look"]
    expected = [
        ("go to countertop 1", "You arrive at countertop 1. On the countertop 1, you see a mug 1."),
        ("go to fridge 1", "You arrive at fridge 1. The fridge 1 is closed."),
        ("take apple 1 from fridge 1", "Nothing happens."),
        ("open fridge 1", "You open the fridge 1. The fridge 1 is open. In it, you see a apple 1."),
        ("take apple 1 from fridge 1", "You pick up the apple 1 from the fridge 1."),
        ("inventory", "You are carrying: a apple 1."),
        ("go to microwave 1", "You arrive at microwave 1. The microwave 1 is closed."),
        ("heat apple 1 with microwave 1", "You heat the apple 1 using the microwave 1."),
        ("look", "You are facing the microwave 1. Next to it, you see nothing."),
        ("go to countertop 1", "You arrive at countertop 1. On the countertop 1, you see a mug 1."),
        ("put apple 1 in/on countertop 1", "You put the apple 1 in/on the countertop 1."),
    ]
    for i, (cmd, want) in enumerate(expected, 1):
        obs, reward, done, info = env.step(act(cmd))
        assert obs == want and info["raw_observation"] == want, cmd
        assert done == (i == len(expected)) and reward == (10.0 if i == len(expected) else 0.0)
    assert info["won"]


def test_put_before_heating_and_cool_after_heat_do_not_win():
    env = HouseholdEnv(max_steps=30)
    env.reset(HEAT_TASK)
    for cmd in ["go to fridge 1", "open fridge 1", "take apple 1 from fridge 1", "go to countertop 1",
                "put apple 1 in/on countertop 1", "take apple 1 from countertop 1", "go to microwave 1",
                "heat apple 1 with microwave 1", "go to fridge 1", "cool apple 1 with fridge 1",
                "go to countertop 1"]:
        _, _, done, info = env.step(act(cmd))
        assert info["admissible"] and not done, cmd
    _, reward, done, info = env.step(act("put apple 1 in/on countertop 1"))
    assert not done and reward == 0.0 and not info["won"]  # cooled after heating: no longer hot


@pytest.mark.parametrize("response,reason", [
    ("go to fridge 1", "missing"),
    ("<action>go to fridge 1</action><action>look</action>", "duplicated"),
    ("<action>go to fridge 1", "unclosed"),
    ("<action>   </action>", "empty"),
    ("<think>\u4f60\u597d</think><action>go to fridge 1</action>", "cjk"),
])
def test_invalid_response_is_a_penalised_no_op(response, reason):
    env = HouseholdEnv()
    env.reset(HEAT_TASK)
    env.step(act("go to fridge 1"))
    before, obs_before = env.state_fingerprint(), env.build_prompt().split("Observation: ")[-1].split("\n")[0]
    obs, reward, done, info = env.step(response)
    assert env.state_fingerprint() == before
    assert reward == pytest.approx(-0.1) and not info["valid"] and info["reason"] == reason and not done
    assert info["action"] == "" and info["step"] == 2
    assert obs.endswith("\nYou arrive at fridge 1. The fridge 1 is closed.") and reason in obs
    assert obs_before == "You arrive at fridge 1. The fridge 1 is closed."
    assert "Action 2: '(invalid response)'" in env.build_prompt()


@pytest.mark.parametrize("cmd", ["go to garage 1", "take apple 1 from fridge 1", "put apple 1 in/on fridge 1",
                                 "heat apple 1 with microwave 1", "go to fridge 1", "open cabinet 1", "dance"])
def test_non_admissible_command_nothing_happens(cmd):
    env = HouseholdEnv()
    env.reset(HEAT_TASK)
    env.step(act("go to fridge 1"))
    before = env.state_fingerprint()
    obs, reward, done, info = env.step(act(cmd))
    assert obs == "Nothing happens." and reward == 0.0 and info["valid"] and not info["admissible"]
    assert env.state_fingerprint() == before and not done


def test_action_is_lower_cased_and_whitespace_normalised():
    env = HouseholdEnv()
    env.reset(HEAT_TASK)
    obs, _, _, info = env.step("<think>go</think><action>  Go To   Fridge 1 </action>")
    assert info["admissible"] and info["action"] == "go to fridge 1" and obs.startswith("You arrive at fridge 1.")


def test_max_steps_ends_the_episode_without_reward():
    env = HouseholdEnv(max_steps=3)
    env.reset(HEAT_TASK)
    outs = [env.step(act("look")) for _ in range(3)]
    assert [o[2] for o in outs] == [False, False, True] and outs[-1][3]["done_reason"] == "max_steps"
    assert sum(o[1] for o in outs) == 0.0
    with pytest.raises(RuntimeError, match="finished episode"):
        env.step(act("look"))


def test_spec_defaults():
    assert HOUSEHOLD_SPEC.max_steps == 12 and HOUSEHOLD_SPEC.invalid_penalty == 0.1
    assert HOUSEHOLD_SPEC.action_kinds == ("action",) and HOUSEHOLD_SPEC.success_threshold == 10.0
    env = HouseholdEnv(max_steps=15, history_window=5)
    assert env.spec.max_steps == 15 and env.spec.history_window == 5
    assert HouseholdEnv(invalid_penalty=0.5).spec.invalid_penalty == 0.5
    assert HouseholdEnv(max_steps=None).spec == HOUSEHOLD_SPEC
    for bad in ({"max_steps": 0}, {"history_window": -1}, {"invalid_penalty": -0.1}):
        with pytest.raises(ValueError, match="need max_steps >= 1"):
            HouseholdEnv(**bad)


# ------------------------------------------------------------------ prompt


def test_prompt_hand_written():
    env = HouseholdEnv(history_window=2)
    env.reset(HEAT_TASK)
    for cmd in ["go to countertop 1", "go to fridge 1", "open fridge 1"]:
        env.step(act(cmd))
    assert env.build_prompt() == (
        "You are an expert agent in a household.\n"
        "Your task is to: put a hot apple in countertop.\n"
        "Prior to this step, you took 3 step(s). Your last 2 observations and actions:\n"
        "[Observation 2: 'You arrive at countertop 1. On the countertop 1, you see a mug 1.', Action 2: 'go to fridge 1']\n"
        "[Observation 3: 'You arrive at fridge 1. The fridge 1 is closed.', Action 3: 'open fridge 1']\n"
        "You are now at step 4. Observation: You open the fridge 1. The fridge 1 is open. In it, you see a apple 1.\n"
        "Your admissible actions are: ['close fridge 1'\n 'go to cabinet 1'\n 'go to countertop 1'\n"
        " 'go to microwave 1'\n 'go to sinkbasin 1'\n 'inventory'\n 'look'\n 'take apple 1 from fridge 1'].\n"
        "\n"
        "Think inside <think> </think>, then give one admissible action inside <action> </action>.")


def test_prompt_first_step_and_skill_insertion():
    from seed_jax.skills import SKILL_HEADING, insert_skill

    env = HouseholdEnv()
    env.reset(HEAT_TASK)
    prompt = env.build_prompt()
    lines = prompt.split("\n")
    assert lines[1] == "Your task is to: put a hot apple in countertop." and "Prior to this step" not in prompt
    assert sum(line.startswith("Your task is to:") for line in lines) == 1  # the room text has no task line
    assert lines[2].startswith("You are now at step 1. Observation: You are in the middle of a room.")
    h = insert_skill(prompt, "Open the fridge 1 first, then heat the apple.")
    assert h.split("\n")[1:4] == ["Your task is to: put a hot apple in countertop.", "", SKILL_HEADING]


# ------------------------------------------------------------------ tasks, splits, determinism


def test_splits_are_disjoint_in_the_combination_and_cover_every_type():
    seen = {(t["task_type"], t["object"], t["target"]) for t in make_tasks("seen", 400, seed=0)}
    unseen = {(t["task_type"], t["object"], t["target"]) for t in make_tasks("unseen", 400, seed=0)}
    assert seen and unseen and not seen & unseen
    assert not set(combinations("seen")) & set(combinations("unseen"))
    for ttype in ("pick", "clean", "heat", "cool"):
        assert any(c[0] == ttype for c in unseen) and any(c[0] == ttype for c in seen)
    # unseen is new only as a combination: its objects and targets all occur in seen tasks
    assert {c[1] for c in unseen} <= {c[1] for c in combinations("seen")}
    assert {c[2] for c in unseen} <= {c[2] for c in combinations("seen")}
    counts = collections.Counter(t["task_type"] for t in make_tasks("seen", 40, seed=3))
    assert set(counts.values()) == {10}


def test_tasks_deterministic_json_and_independent_of_hash_seed():
    a = make_tasks("unseen", 30, seed=7)
    assert a == make_tasks("unseen", 30, seed=7) and a != make_tasks("unseen", 30, seed=8)
    assert json.loads(json.dumps(a)) == a
    code = ("import json; from seed_jax.envs.household import make_tasks; "
            "print(json.dumps(make_tasks('unseen', 30, seed=7), sort_keys=True))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONHASHSEED": "123"}).stdout
    assert json.loads(out) == a
    # the task dict alone determines the episode
    e1, e2 = HouseholdEnv(), HouseholdEnv()
    o1, i1 = e1.reset(a[0])
    o2, i2 = e2.reset(json.loads(json.dumps(a[0])))
    assert (o1, i1) == (o2, i2)


def test_generated_tasks_respect_the_knobs():
    for cfg in (HouseholdConfig(num_receptacles=4, num_distractors=0, closed_share=1.0),
                HouseholdConfig(num_receptacles=9, num_distractors=5, closed_share=0.0)):
        for t in make_tasks("seen", 40, seed=2, config=cfg):
            assert len(t["receptacles"]) == cfg.num_receptacles and len(t["objects"]) == cfg.num_distractors + 1
            assert {"fridge 1", "microwave 1", "sinkbasin 1"} <= set(t["receptacles"])
            assert any(r.rsplit(" ", 1)[0] == t["target"] for r in t["receptacles"])
            where = t["objects"][t["target_object"]].rsplit(" ", 1)[0]
            assert where != t["target"]
            closed = where in ("fridge", "microwave", "cabinet", "drawer")
            assert closed == (cfg.closed_share == 1.0)
    for bad in (dict(num_receptacles=3), dict(num_distractors=-1), dict(closed_share=1.5)):
        with pytest.raises(ValueError):
            HouseholdConfig(**bad)


def test_bad_task_dicts_raise_clear_errors():
    env = HouseholdEnv()
    with pytest.raises(ValueError, match="lacks key"):
        env.reset({"task_id": "x"})
    with pytest.raises(ValueError, match="not a receptacle"):
        env.reset({**HEAT_TASK, "objects": {"apple 1": "garage 1"}})
    with pytest.raises(TypeError):
        env.reset("not a dict")
    with pytest.raises(RuntimeError, match="before reset"):
        HouseholdEnv().step(act("look"))


def test_factory_is_picklable_and_works_with_the_pool():
    from seed_jax.rollout.pool import EnvFactory, InProcessBackend

    factory = EnvFactory(make_household_env, max_steps=10, history_window=2)
    clone = pickle.loads(pickle.dumps(factory))
    env = clone(1234)
    assert isinstance(env, HouseholdEnv) and env.spec.max_steps == 10
    pickle.loads(pickle.dumps(functools.partial(make_household_env, max_steps=10)))()
    backend = InProcessBackend(factory, seed=0)
    res = backend.reset({0: HEAT_TASK})[0]
    assert not res.env_error and res.task_description == "put a hot apple in countertop."
    assert "Your task is to: put a hot apple in countertop." in res.prompt
    step = backend.step({0: act("go to fridge 1")})[0]
    assert step.info["expert_consistent"] and step.info["action_text"] == "go to fridge 1"
    backend.close()


# ------------------------------------------------------------------ scripted annotator


def test_annotator_success_workflow():
    rec = EpisodeRecord(task=HEAT_TASK, actions=tuple(HEAT_PLAN), won=True)
    out = json.loads(annotate_json(rec))
    assert set(out) == {"episode_summary", "episode_skill"}
    skill = out["episode_skill"]
    assert "inside the closed fridge 1" in skill and "go to microwave 1 and heat it" in skill
    assert "go to countertop 1 and put it there" in skill and ", ".join(HEAT_PLAN) in skill
    assert "succeeded in 7 step(s)" in out["episode_summary"]
    from seed_jax.skills import parse_skill

    assert parse_skill(annotate_json(rec)).ok
    short = annotate_episode(rec, include_plan=False)["episode_skill"]
    assert "Shortest plan" not in short and skill.startswith(short)


@pytest.mark.parametrize("actions,step,phrases", [
    # went to the cabinet instead of the fridge that holds the apple
    (["go to cabinet 1", "go to fridge 1"], 1,
     ["at step 1 it went to cabinet 1, but the apple was inside the closed fridge 1", "'go to fridge 1'"]),
    # two optimal steps, then an invalid response
    (["go to fridge 1", "open fridge 1", ""], 3, ["the response was invalid", "'take apple 1 from fridge 1'"]),
    # a command that is not admissible
    (["go to fridge 1", "take apple 1 from fridge 1"], 2,
     ["'take apple 1 from fridge 1' was not an admissible action", "'open fridge 1'"]),
    # put down before heating
    (HEAT_PLAN[:3] + ["go to countertop 1", "put apple 1 in/on countertop 1"], 4,
     ["it went to countertop 1 while holding the apple", "'go to microwave 1'"]),
    (HEAT_PLAN[:4] + ["go to countertop 1"], 5, ["'heat apple 1 with microwave 1'"]),
    (HEAT_PLAN[:3] + ["look"], 4, ["'look' changed nothing"]),
])
def test_annotator_names_the_first_costly_deviation(actions, step, phrases):
    out = annotate_episode(EpisodeRecord(task=HEAT_TASK, actions=tuple(actions), won=False))
    skill = out["episode_skill"]
    assert skill.startswith(f"Avoid this mistake: at step {step} ")
    for p in phrases:
        assert p in skill, (p, skill)
    assert f"first costly mistake was at step {step}" in out["episode_summary"]
    assert "To put a hot apple in countertop:" in skill and len(skill.split()) >= 5


def test_annotator_put_before_processing_and_truncated_optimal_run():
    task = {**HEAT_TASK, "objects": {"apple 1": "sinkbasin 1", "mug 1": "countertop 1"}}
    # at the sinkbasin holding the apple: putting it back is the mistake
    out = annotate_episode(EpisodeRecord(task, ("go to sinkbasin 1", "take apple 1 from sinkbasin 1",
                                                "put apple 1 in/on sinkbasin 1"), False))
    assert "at step 3 it put the apple in/on sinkbasin 1 before it was hot" in out["episode_skill"]
    task = {**HEAT_TASK, "objects": {"apple 1": "fridge 1", "mug 1": "fridge 1"}}
    out = annotate_episode(EpisodeRecord(task, ("go to fridge 1", "open fridge 1", "take mug 1 from fridge 1"), False))
    assert "at step 3 it took the mug 1, which the task does not need" in out["episode_skill"]
    out = annotate_episode(EpisodeRecord(HEAT_TASK, tuple(HEAT_PLAN[:3]), False))
    assert "followed optimal actions" in out["episode_summary"]
    with pytest.raises(ValueError, match="won"):
        annotate_episode(EpisodeRecord(HEAT_TASK, tuple(HEAT_PLAN), False))


def test_annotator_on_random_rollouts_matches_env_audit_and_is_deterministic():
    from seed_jax.rollout.trajectory import StepSample, Trajectory
    from seed_jax.skills import parse_skill

    rng = random.Random(1)
    env = HouseholdEnv()
    outcomes = collections.Counter()
    for task in make_tasks("seen", 40, seed=4) + make_tasks("unseen", 40, seed=4):
        env.reset(task)
        steps, done, first_bad = [], False, None
        while not done:
            roll = rng.random()
            cmd = (env.expert_actions()[0] if roll < 0.6 else rng.choice(env.admissible_commands) if roll < 0.9
                   else "dance")
            response = act(cmd) if roll < 0.97 else "no action"
            _, reward, done, info = env.step(response)
            if first_bad is None and not info["expert_consistent"]:
                first_bad = info["step"]
            steps.append(StepSample(prompt_ids=[], response_ids=[], response_logprobs=[], response_text=response,
                                    prompt_text="", raw_observation="", valid=info["valid"],
                                    reward=max(reward, 0.0), action=info["action_text"]))
        traj = Trajectory(task_id=task["task_id"], group_id=0, traj_id="t", task_description=task["task_description"],
                          steps=steps, episode_reward=10.0 * info["won"], won=info["won"])
        text = annotate_trajectory(traj, task)
        assert text == annotate_trajectory(traj, json.loads(json.dumps(task)))
        parsed = parse_skill(text)
        assert parsed.ok and len(parsed.skill.split()) >= 5
        outcomes[info["won"]] += 1
        if not info["won"] and first_bad is not None:
            assert parsed.skill.startswith(f"Avoid this mistake: at step {first_bad} ")
            assert f"first costly mistake was at step {first_bad}" in parsed.summary
    assert outcomes[True] >= 5 and outcomes[False] >= 5


@pytest.mark.parametrize("task_change, actions, seen", [
    ({}, (), False),
    ({}, ("go to fridge 1",), False),  # the fridge is closed: its contents are not shown
    ({}, ("go to fridge 1", "open fridge 1"), True),
    ({}, ("open fridge 1", "go to fridge 1"), False),  # not admissible in the middle of the room: no-op
    ({}, ("", "go to fridge 1", "dance", "open fridge 1"), True),  # invalid and unknown commands change nothing
    ({}, ("go to countertop 1", "go to microwave 1", "look"), False),
    ({"opened": ["fridge 1"]}, ("go to fridge 1",), True),  # open from the start: arriving shows it
    ({"objects": {"apple 1": "countertop 1", "mug 1": "fridge 1"}}, ("go to countertop 1",), True),
    ({"objects": {"apple 1": "countertop 1", "mug 1": "fridge 1"}}, ("go to fridge 1", "open fridge 1"), False),
])
def test_start_place_seen_hand_made(task_change, actions, seen):
    assert start_place_seen({**HEAT_TASK, **task_change}, actions) is seen


def test_start_place_seen_matches_the_env_observations():
    """Independent reference: the texts the real env returned. An episode showed the object's
    start place iff some observation says it lies there ('On the X, you see ... apple 1', 'The X
    is open. In it, you see ... apple 1') or that the agent picked it up from there."""
    import re

    rng = random.Random(3)
    env = HouseholdEnv(max_steps=6)  # short episodes: many never reach the object
    counts = collections.Counter()
    for task in make_tasks("seen", 60, seed=5) + make_tasks("unseen", 60, seed=5):
        obj, place = task["target_object"], task["objects"][task["target_object"]]
        shown = re.compile(rf"(On the {place}, you see|The {place} is open\. In it, you see)[^.]*\b{obj}\b"
                           rf"|You pick up the {obj} from the {place}\.")
        obs, _ = env.reset(task)
        texts, actions, done = [obs], [], False
        while not done:
            roll = rng.random()
            cmd = env.expert_actions()[0] if roll < 0.3 else rng.choice(env.admissible_commands) if roll < 0.95 else "dance"
            obs, _, done, info = env.step(act(cmd))
            texts.append(obs)
            actions.append(info["action_text"] if info["valid"] else "")
        reference = any(shown.search(t) for t in texts)
        assert start_place_seen(task, actions) is reference, (task["task_id"], actions)
        counts[reference] += 1
    assert counts[True] >= 10 and counts[False] >= 10
