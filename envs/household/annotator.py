"""Scripted (rule-based) analyzer for household trajectories: the stage-1 "external annotator".

Given an `EpisodeRecord` (the task dict, the command of every step -- '' for an invalid
response -- and the outcome), `annotate_episode` replays the episode on the symbolic world and
asks the exact expert (`envs.household.expert`) for the optimal commands at every visited
state. It answers in the analyzer's JSON format, ``{"episode_summary": str, "episode_skill": str}``
(`seed_jax.skills.canonical_answer` layout: json.dumps with ensure_ascii=False):

- success -> a *workflow*: the recipe of the task type with this episode's facts (where the
  object was, whether it had to be opened, which appliance, which target receptacle), then
  the shortest plan from the start (left out with ``include_plan=False``);
- failure -> an *avoidance rule* naming the **first costly deviation**: the first step whose
  command was not among the expert's optimal commands at that state (an invalid response, a
  command that was not admissible, or an admissible detour), what it was, and the optimal
  command instead; then a warning sign and the recipe. A failure without any deviation (the
  episode was cut short) says so.

Deterministic: the text depends only on the record. Every skill has far more than 5 words.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any

from seed_jax.envs.actions import parse_action
from seed_jax.envs.household.expert import ExpertCache, ExpertResult
from seed_jax.envs.household.tasks import load_task
from seed_jax.envs.household.world import (
    APPLIANCE,
    Layout,
    WorldState,
    accessible,
    goal_reached,
    is_openable,
    kind_of,
    transitions,
)

_VERB_OF_PROP = {"clean": "clean", "hot": "heat", "cool": "cool"}


@dataclasses.dataclass(frozen=True)
class EpisodeRecord:
    """What the scripted analyzer needs: the task dict, one command per step ('' = invalid
    response), and whether the episode was won."""

    task: dict
    actions: tuple[str, ...]
    won: bool

    @classmethod
    def from_trajectory(cls, traj: Any, task: dict) -> EpisodeRecord:
        """From a `seed_jax.rollout.trajectory.Trajectory` (its steps' `valid` / `action`,
        falling back to parsing `response_text` when `action` is empty) and its task dict."""
        actions = []
        for s in traj.steps:
            if not s.valid:
                actions.append("")
                continue
            act = s.action or parse_action(s.response_text, ("action",), lowercase=True).text
            actions.append(act)
        return cls(task=task, actions=tuple(actions), won=bool(traj.won))


@dataclasses.dataclass(frozen=True)
class StepAudit:
    """One replayed step: the command, what the expert would have done, and the cost."""

    index: int  # 1-based step number
    action: str  # '' when the response was invalid
    admissible: bool
    optimal: tuple[str, ...]  # optimal commands at the state before the step
    distance_before: int
    distance_after: int

    @property
    def consistent(self) -> bool:
        return self.action in self.optimal

    @property
    def cost(self) -> int:
        """Steps lost by this step: 1 + d(after) - d(before) (0 for an optimal command)."""
        return 1 + self.distance_after - self.distance_before


def replay(task: dict, actions: Sequence[str]) -> tuple[list[StepAudit], WorldState, ExpertResult]:
    """Replay `actions` from the task's start; returns the per-step audits, the final state and
    the expert result at the start state. Replay stops at a win."""
    layout, state = load_task(task)
    expert = ExpertCache(layout)
    start = expert(state)
    audits = []
    for i, action in enumerate(actions, 1):
        if goal_reached(layout, state):
            break
        before = expert(state)
        moves = transitions(layout, state) if action else {}
        if action in moves:
            state = moves[action][0]
        after = expert(state)
        audits.append(StepAudit(i, action, action in moves, before.actions, before.distance, after.distance))
    return audits, state, start


def start_place_seen(task: dict, actions: Sequence[str]) -> bool:
    """Did the episode show where the task object started? Replays ``actions`` from the task's
    start as `replay` does ('' = an invalid response; a command that is not admissible changes
    nothing; stops at a win) and is True iff at the start or after some step the agent stood at
    the object's start receptacle while it was accessible (a surface, or a container open
    then) with the object still there, or held the object. Only then can an analyzer name the
    start place by reading the episode; otherwise a skill naming it is a guess (or, for the
    scripted analyzer, privileged knowledge of the world)."""
    layout, state = load_task(task)
    obj = layout.target_object
    place = state.where(obj)

    def shows(s: WorldState) -> bool:
        return s.holding == obj or (s.location == place and accessible(s, place) and s.where(obj) == place)

    if shows(state):
        return True
    for action in actions:
        if goal_reached(layout, state):
            break
        moves = transitions(layout, state) if action else {}
        if action in moves:
            state = moves[action][0]
        if shows(state):
            return True
    return False


def first_deviation(audits: Sequence[StepAudit]) -> StepAudit | None:
    """The first step whose command was not optimal at its state (None when there is none)."""
    return next((a for a in audits if not a.consistent), None)


def _object_name(layout: Layout) -> str:
    return layout.target_object.rsplit(" ", 1)[0]


def _place_phrase(receptacle: str) -> str:
    if is_openable(receptacle):
        return f"inside the closed {receptacle}, so go there and open it first"
    return f"on the {receptacle}"


def recipe(layout: Layout, start_place: str, final_place: str) -> str:
    """The workflow sentence of the task type with this episode's places.

    'To put a hot apple in countertop: find the apple (here it was inside the closed fridge 1,
    so go there and open it first), take it, go to microwave 1 and heat it, then go to
    countertop 1 and put it there. Never put it down before it is hot.'
    """
    obj = _object_name(layout)
    prop = layout.required_property
    what = f"{prop} {obj}" if prop else obj
    place = f"go to {final_place}, open it, and put it there" if is_openable(final_place) else \
        f"go to {final_place} and put it there"
    head = f"To put a {what} in {layout.target_kind}: find the {obj} (here it was {_place_phrase(start_place)}), take it, "
    if not prop:
        return head + f"then {place}."
    verb = _VERB_OF_PROP[prop]
    return (head + f"go to {APPLIANCE[layout.task_type]} and {verb} it, then {place}. "
            f"Never put it down before it is {prop}.")


def _target_place(plan: Sequence[str], layout: Layout) -> str:
    """Receptacle where an optimal plan puts the object (its last command 'put X in/on R')."""
    for cmd in reversed(plan):
        if cmd.startswith(f"put {layout.target_object} in/on "):
            return cmd.split(" in/on ", 1)[1]
    return next(r for r in layout.receptacles if kind_of(r) == layout.target_kind)


def _quote_best(optimal: Sequence[str]) -> str:
    return f"'{optimal[0]}'" if len(optimal) == 1 else " or ".join(f"'{a}'" for a in optimal[:2])


def _describe_deviation(layout: Layout, dev: StepAudit, state_before: WorldState) -> tuple[str, str]:
    """(what went wrong at the deviating step, the warning sign) in words."""
    obj, name = layout.target_object, _object_name(layout)
    prop = layout.required_property
    a = dev.action
    where_obj = state_before.where(obj)
    if not a:
        return (f"the response was invalid, so step {dev.index} was lost",
                "Warning sign: the answer must end with exactly one action block holding one admissible action")
    if not dev.admissible:
        return (f"'{a}' was not an admissible action, so nothing happened",
                "Warning sign: the observation 'Nothing happens.' means the action was not in the admissible list")
    if a in ("look", "inventory"):
        return (f"'{a}' changed nothing and wasted a step",
                "Warning sign: an action that only repeats what you already know brings the goal no closer")
    if a.startswith("close "):
        return (f"closing {a[len('close '):]} wasted a step",
                "Warning sign: closing a container is never needed for the task")
    if a.startswith("go to "):
        dest = a[len("go to "):]
        if state_before.holding == obj:
            return (f"it went to {dest} while holding the {name}",
                    f"Warning sign: once you hold the {name}, go straight to "
                    + (f"{APPLIANCE[layout.task_type]} to make it {prop}" if prop and (obj, prop) not in
                       state_before.props else f"a {layout.target_kind}"))
        if state_before.holding:
            return (f"it went to {dest} while holding the {state_before.holding}, which the task does not need",
                    "Warning sign: put down objects the task does not need")
        return (f"it went to {dest}, but the {name} was {_place_phrase(where_obj)}",
                f"Warning sign: if the {name} is not in sight, search the closed containers")
    if a.startswith("open "):
        return (f"it opened {a[len('open '):]}, but the {name} was {_place_phrase(where_obj) if where_obj else 'elsewhere'}",
                "Warning sign: open only containers that may hold the object or that you must put it in")
    if a.startswith("take "):
        taken = a[len("take "):].split(" from ", 1)[0]
        return (f"it took the {taken}, which the task does not need",
                f"Warning sign: only the {name} matters; leave other objects where they are")
    if a.startswith("put "):
        dest = a.split(" in/on ", 1)[1]
        if a.startswith(f"put {obj} ") and prop and (obj, prop) not in state_before.props:
            return (f"it put the {name} in/on {dest} before it was {prop}",
                    f"Warning sign: the task asks for a {prop} {name}; {_VERB_OF_PROP[prop]} it first")
        if a.startswith(f"put {obj} "):
            return (f"it put the {name} in/on {dest}, which is not a {layout.target_kind}",
                    f"Warning sign: the {name} must end in a {layout.target_kind}")
        return (f"it put the {state_before.holding} in/on {dest} at a bad place",
                "Warning sign: put down unneeded objects where you are going anyway")
    verb = a.split(" ", 1)[0]
    if verb in ("clean", "heat", "cool"):
        if not prop:
            return (f"it tried to {verb} the {a.split(' ')[1]}, which this task does not ask for",
                    f"Warning sign: this task only asks to move the {name}")
        return (f"it used '{a}', but the task needs the {name} {prop}",
                f"Warning sign: read the task again; it asks for a {prop} {name}")
    return (f"'{a}' did not bring the goal closer", "Warning sign: the goal distance did not shrink")


def annotate_episode(record: EpisodeRecord, include_plan: bool = True) -> dict[str, str]:
    """{'episode_summary': ..., 'episode_skill': ...} for one episode (see module docstring).

    `include_plan=False` leaves the 'Shortest plan: ...' sentence out of the skill (shorter
    skills for tiny analyzers)."""
    layout, start_state = load_task(record.task)
    audits, final_state, start = replay(record.task, record.actions)
    won = goal_reached(layout, final_state)
    if won != bool(record.won):
        raise ValueError(f"task {record.task.get('task_id')!r}: the record says won={record.won} but replaying its "
                         f"{len(record.actions)} actions gives won={won} (wrong task dict or actions?)")
    task_sentence = record.task["task_description"]
    start_place = start_state.where(layout.target_object)
    n = len(audits)
    plan_text = f" Shortest plan: {', '.join(start.plan)}." if include_plan else ""
    if won:
        final_place = final_state.where(layout.target_object)
        extra = "" if n == start.distance else f" with {n - start.distance} extra step(s)"
        summary = (f"The agent had to {task_sentence} It succeeded in {n} step(s){extra}; "
                   f"the shortest plan has {start.distance} step(s).")
        skill = f"{recipe(layout, start_place, final_place)}{plan_text}"
        return {"episode_summary": summary, "episode_skill": skill}
    target_place = _target_place(start.plan, layout)
    dev = first_deviation(audits)
    if dev is None:
        summary = (f"The agent had to {task_sentence} It followed optimal actions but stopped after {n} step(s), "
                   f"before the {start.distance} step(s) the task needs.")
        skill = (f"Avoid running out of steps: follow the shortest plan without detours. "
                 f"{recipe(layout, start_place, target_place)}{plan_text}")
        return {"episode_summary": summary, "episode_skill": skill}
    state = start_state
    for a in audits[: dev.index - 1]:
        state = transitions(layout, state)[a.action][0]
    wrong, warning = _describe_deviation(layout, dev, state)
    summary = (f"The agent had to {task_sentence} It failed after {n} step(s); its first costly mistake was at "
               f"step {dev.index}: " + (f"'{dev.action}'." if dev.action else "an invalid response."))
    skill = (f"Avoid this mistake: at step {dev.index} {wrong}; the better action was {_quote_best(dev.optimal)}. "
             f"{warning}. {recipe(layout, start_place, target_place)}")
    return {"episode_summary": summary, "episode_skill": skill}


def annotate_json(record: EpisodeRecord, include_plan: bool = True) -> str:
    """The analyzer answer text: json.dumps of `annotate_episode` (keys in the order summary, skill)."""
    out = annotate_episode(record, include_plan)
    return json.dumps({"episode_summary": out["episode_summary"], "episode_skill": out["episode_skill"]},
                      ensure_ascii=False)


def annotate_trajectory(traj: Any, task: dict, include_plan: bool = True) -> str:
    """`annotate_json` for a `Trajectory` of the rollout loop and its task dict."""
    return annotate_json(EpisodeRecord.from_trajectory(traj, task), include_plan)
