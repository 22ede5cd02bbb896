"""`HouseholdEnv`: a small procedurally generated household in ALFWorld's style (docs/METHOD.md §5).

- reset(task) takes a task dict of `envs.household.tasks` and returns the initial
  observation: the room description, a blank line and 'Your task is to: <task sentence>'.
- step(response) parses ``<action>cmd</action>`` (lower-cased) with `envs.actions.parse_action`.
  An admissible command changes the world and returns its feedback; a well-formed command
  that is not admissible returns 'Nothing happens.' (no penalty, state unchanged, as in
  ALFWorld). An invalid response (parse failure) costs ``invalid_penalty`` and is a no-op: the
  observation repeats the previous one after a short note.
  reward_t = 10 * won_t - 0.1 * invalid_t; done_t = won_t or t >= max_steps.

info keys (reset and step): those of the `envs.base` contract (``valid``, ``won``,
``raw_observation``, ``action_text`` (command parsed, lower-cased, whitespace collapsed; ''
when invalid), ``reason`` (why invalid, '' when valid), ``task_id``, ``step`` (steps taken),
``task_type``, ``data_source`` ('household')), and ``admissible_commands`` (sorted), ``action``
(= ``action_text``), ``admissible`` (the command was admissible), ``done_reason`` ('won',
'max_steps' or ''), ``expert_actions`` (sorted optimal commands at the state *before* this
step; at reset: at the initial state), ``expert_consistent`` (the step's command is one of
them; False at reset and for invalid responses), ``expert_distance`` (goal distance before
the step). Reset adds ``expert_plan``: one optimal plan from the initial state.
"""

from __future__ import annotations

from typing import Any

from seed_jax.envs.actions import parse_action
from seed_jax.envs.base import WIN_REWARD, Environment, EnvSpec, StepRecord
from seed_jax.envs.household.expert import ExpertCache, ExpertResult
from seed_jax.envs.household.prompt import HOUSEHOLD_PROMPT
from seed_jax.envs.household.tasks import load_task
from seed_jax.envs.household.world import (
    NOTHING_HAPPENS,
    Layout,
    WorldState,
    admissible_commands,
    goal_reached,
    room_description,
    transitions,
)
from seed_jax.envs.prompt import TASK_PREFIX

HOUSEHOLD_SPEC = EnvSpec(name="household", max_steps=12, history_window=2)
INVALID_ACTION_TEXT = "(invalid response)"


def invalid_note(reason: str) -> str:
    """The note put before the repeated observation after an invalid response."""
    return f"Your previous response was invalid ({reason}). Nothing happened."


class HouseholdEnv(Environment):
    """One household episode at a time; the world is symbolic (`envs.household.world`)."""

    def __init__(self, max_steps: int | None = None, history_window: int | None = None,
                 invalid_penalty: float | None = None, seed: int | None = None):
        """`seed` is accepted for `EnvFactory` and unused: episodes are fully set by the task dict."""
        self.spec = HOUSEHOLD_SPEC.with_overrides(max_steps=max_steps, history_window=history_window,
                                                  invalid_penalty=invalid_penalty)
        self._task: dict | None = None
        self._layout: Layout | None = None
        self._state: WorldState | None = None
        self._expert: ExpertCache | None = None
        self._history: list[StepRecord] = []
        self._observation = ""
        self._world_observation = ""
        self._won = False
        self._done = True

    # ------------------------------------------------------------------ episode

    def reset(self, task: Any) -> tuple[str, dict]:
        layout, state = load_task(task)
        self._task = dict(task)
        self._layout, self._state = layout, state
        self._expert = ExpertCache(layout)
        self._history = []
        self._observation = f"{room_description(layout)}\n\n{TASK_PREFIX} {task['task_description']}"
        self._world_observation = self._observation
        self._won = goal_reached(layout, state)
        self._done = False
        expert = self._expert(state)
        info = self._info(True, "", "", True, "", expert, False)
        info["expert_plan"] = list(expert.plan)
        return self._observation, info

    def step(self, response_text: str) -> tuple[str, float, bool, dict]:
        if self._layout is None or self._state is None or self._expert is None:
            raise RuntimeError("HouseholdEnv.step called before reset")
        if self._done:
            raise RuntimeError("HouseholdEnv.step called on a finished episode; call reset")
        parsed = parse_action(response_text, self.spec.action_kinds, lowercase=True)
        shown = self._observation
        expert = self._expert(self._state)
        admissible = False
        if parsed.valid:
            action = " ".join(parsed.text.split())
            moves = transitions(self._layout, self._state)
            if action in moves:
                admissible = True
                self._state, self._world_observation = moves[action]
            else:
                self._world_observation = NOTHING_HAPPENS
            self._observation = self._world_observation
            self._won = goal_reached(self._layout, self._state)
            reward = WIN_REWARD if self._won else 0.0
        else:
            action = ""
            self._observation = f"{invalid_note(parsed.reason)}\n{self._world_observation}"
            reward = -self.spec.invalid_penalty
        self._history.append(StepRecord(observation=shown, action=action or INVALID_ACTION_TEXT))
        done_reason = "won" if self._won else ("max_steps" if len(self._history) >= self.spec.max_steps else "")
        self._done = bool(done_reason)
        info = self._info(parsed.valid, action, parsed.reason, admissible, done_reason, expert,
                          parsed.valid and action in expert.actions)
        return self._observation, reward, self._done, info

    def _info(self, valid: bool, action: str, reason: str, admissible: bool, done_reason: str,
              expert: ExpertResult, consistent: bool) -> dict:
        assert self._task is not None
        return {
            "valid": valid,
            "won": self._won,
            "raw_observation": self._observation,
            "admissible_commands": self.admissible_commands,
            "task_type": self._task["task_type"],
            "task_id": self._task["task_id"],
            "data_source": "household",
            "step": len(self._history),
            "action": action,
            "action_text": action,
            "reason": reason,
            "admissible": admissible,
            "done_reason": done_reason,
            "expert_actions": list(expert.actions),
            "expert_consistent": bool(consistent),
            "expert_distance": expert.distance,
        }

    # ------------------------------------------------------------------ expert and state

    def expert_result(self) -> ExpertResult:
        """Goal distance, optimal next commands and one optimal plan at the current state."""
        if self._layout is None or self._state is None or self._expert is None:
            raise RuntimeError("HouseholdEnv.expert_result called before reset")
        return self._expert(self._state)

    def expert_actions(self) -> list[str]:
        """Sorted optimal next commands at the current state (every command that starts a shortest plan)."""
        return list(self.expert_result().actions)

    def expert_plan(self) -> list[str]:
        """One optimal plan from the current state."""
        return list(self.expert_result().plan)

    @property
    def state(self) -> WorldState:
        if self._state is None:
            raise RuntimeError("HouseholdEnv.state read before reset")
        return self._state

    def state_fingerprint(self) -> str:
        """Canonical string of the symbolic world state (equal iff the worlds are equal)."""
        return self.state.fingerprint()

    # ------------------------------------------------------------------ prompt

    def build_prompt(self) -> str:
        if self._task is None:
            raise RuntimeError("HouseholdEnv.build_prompt called before reset")
        return HOUSEHOLD_PROMPT.build(self._task["task_description"], self._history, self._observation,
                                      self.admissible_commands, self.spec.history_window)

    def prompt_variants(self) -> list[str]:
        if self._task is None:
            raise RuntimeError("HouseholdEnv.prompt_variants called before reset")
        return HOUSEHOLD_PROMPT.variants(self._task["task_description"], self._history, self._observation,
                                         self.admissible_commands, self.spec.history_window)

    @property
    def task_description(self) -> str:
        return self._task["task_description"] if self._task else ""

    @property
    def admissible_commands(self) -> list[str]:
        if self._layout is None or self._state is None:
            return []
        return admissible_commands(self._layout, self._state)

    @property
    def done(self) -> bool:
        return self._done


def make_household_env(max_steps: int | None = None, history_window: int | None = None,
                       invalid_penalty: float | None = None, seed: int | None = None) -> HouseholdEnv:
    """Picklable factory for worker processes (use with `seed_jax.rollout.pool.EnvFactory`)."""
    return HouseholdEnv(max_steps=max_steps, history_window=history_window, invalid_penalty=invalid_penalty,
                        seed=seed)
