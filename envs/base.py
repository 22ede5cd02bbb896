"""The environment contract shared by every seed_jax environment (importable without JAX).

An environment is a small stateful object:

    obs, info = env.reset(task)
    obs, reward, done, info = env.step(response_text)

`response_text` is the raw model response. The environment projects it to an action with
`envs.actions.parse_action`, applies the invalid-action penalty of docs/METHOD.md §5 when the
response is invalid (the game then sees a no-op), and reports at least these `info` keys:

- ``valid`` (bool): whether the response held exactly one well-formed action block;
- ``won`` (bool): whether the episode is solved;
- ``raw_observation`` (str): the environment's own observation text, as given to the analyzer;
- environment-specific facts (``admissible_commands``, ``task_type``, ``retrieved``, ``score``...).

Each environment also builds its own agent prompt text (`build_prompt`) from the task, the
history window and the current observation; the prompt contains one line that states the
task (``Your task is to: ...``, ``Your question: ...``, ``Your goal ...``) so that the
skill-insertion function H can place the skill right after it.
"""

from __future__ import annotations

import abc
import dataclasses
from typing import Any

WIN_REWARD = 10.0  # reward of the winning step in the 10 x won environments


@dataclasses.dataclass(frozen=True, kw_only=True)
class EnvSpec:
    """Agent-facing constants of one benchmark (docs/METHOD.md §5).

    The defaults are those of the 10 x won environments (ALFWorld, WebShop, household): one
    ``<action>`` block per response, 0.1 charged for an invalid one, success iff the episode
    earned `WIN_REWARD`. Checked on construction: max_steps >= 1, history_window >= 0,
    invalid_penalty >= 0.
    """

    name: str
    action_kinds: tuple[str, ...] = ("action",)  # tag names accepted as the action block
    invalid_penalty: float = 0.1
    max_steps: int
    history_window: int
    success_threshold: float = WIN_REWARD  # reward >= threshold counts as success

    def __post_init__(self) -> None:
        if self.max_steps < 1 or self.history_window < 0 or self.invalid_penalty < 0:
            raise ValueError(f"need max_steps >= 1, history_window >= 0, invalid_penalty >= 0; got {self}")

    def with_overrides(self, max_steps: int | None = None, history_window: int | None = None,
                       invalid_penalty: float | None = None) -> EnvSpec:
        """This spec with the given fields replaced (None keeps the spec's value): the
        environments' constructor arguments."""
        changes: dict[str, Any] = {}
        if max_steps is not None:
            changes["max_steps"] = int(max_steps)
        if history_window is not None:
            changes["history_window"] = int(history_window)
        if invalid_penalty is not None:
            changes["invalid_penalty"] = float(invalid_penalty)
        return dataclasses.replace(self, **changes)


@dataclasses.dataclass
class StepRecord:
    """One (observation, action) pair kept for the prompt's history window."""

    observation: str
    action: str


class Environment(abc.ABC):
    """Base class of the text environments."""

    spec: EnvSpec

    @abc.abstractmethod
    def reset(self, task: Any) -> tuple[str, dict]:
        """Start an episode on `task`; returns (observation, info)."""

    @abc.abstractmethod
    def step(self, response_text: str) -> tuple[str, float, bool, dict]:
        """Apply one raw model response; returns (observation, reward, done, info)."""

    @abc.abstractmethod
    def build_prompt(self) -> str:
        """The ordinary agent prompt (user message text) for the current state."""

    @property
    @abc.abstractmethod
    def task_description(self) -> str:
        """The task sentence of the current episode (used by the analyzer input x_tau)."""

    def close(self) -> None:  # noqa: B027 - a default no-op hook, not abstract
        """Release engine resources."""
