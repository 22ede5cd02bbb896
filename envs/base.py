"""The environment contract shared by every seed_jax environment (importable without JAX).

An environment is a small stateful object:

    obs, info = env.reset(task)
    obs, reward, done, info = env.step(response_text)

`response_text` is the raw model response. The environment projects it to an action with
`envs.actions.parse_action`, applies the invalid-action penalty of docs/METHOD.md §5 when the
response is invalid (the game then sees a no-op), and reports in `info`, after ``reset`` and
after every ``step``, every key of `INFO_KEYS`:

- ``valid`` (bool): the response was a valid action (always True at reset);
- ``won`` (bool): the episode is solved;
- ``raw_observation`` (str): the environment's own observation text, as given to the analyzer;
- ``action_text`` (str): the action the response carried, as the environment applied it (its
  own normalisation: lower-cased command, ``search[query]`` ...); '' when the response was
  invalid and at reset. The rollout loop records it as `StepSample.action`;
- ``reason`` (str): why the response was invalid ('' when valid and at reset);
- ``task_id`` (str): the id of the episode's task;
- ``step`` (int): steps taken in the episode (0 at reset);

and, where the environment has them, the keys of `OPTIONAL_INFO_KEYS`:

- ``task_type`` (str): the task's type (ALFWorld, household); evaluation and the skill bank
  group by it;
- ``score`` (float): the task score in [0, 1] of the last step (WebShop); evaluation averages it;
- ``data_source`` (str): the dataset a question comes from (search, household).

Further keys are environment-specific facts (``admissible_commands``, ``retrieved``...).
`missing_info_keys` says which keys an info lacks; ``tests/test_env_contract.py`` holds every
environment to the contract.

Each environment also builds its own agent prompt text (`build_prompt`) from the task, the
history window and the current observation; the prompt contains one line that states the
task (``Your task is to: ...``, ``Your question: ...``, ``Your goal ...``) so that the
skill-insertion function H can place the skill right after it. Environments that show past
steps also give the same prompt with fewer of them (`Environment.prompt_variants`), so that a
token cap drops old steps before it cuts the task or the current observation.
"""

from __future__ import annotations

import abc
import dataclasses
from typing import Any

WIN_REWARD = 10.0  # reward of the winning step in the 10 x won environments

# the info keys of every reset and step (see the module docstring)
INFO_KEYS = ("valid", "won", "raw_observation", "action_text", "reason", "task_id", "step")
# the info keys an environment carries where it has the fact (see the module docstring)
OPTIONAL_INFO_KEYS = ("task_type", "score", "data_source")


def missing_info_keys(info: dict, optional: tuple[str, ...] = ()) -> list[str]:
    """The keys of `INFO_KEYS`, then of `optional` (the optional keys the environment has),
    that `info` lacks."""
    return [k for k in (*INFO_KEYS, *optional) if k not in info]


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

    def prompt_variants(self) -> list[str]:
        """The current prompt with fewer past steps shown, longest first, the last with none:
        what a prompt cap falls back to before cutting tokens, so that the task line and the
        current observation survive (`seed_jax.rollout.loop.fit_prompt`). [] (this default): the
        environment has no shorter prompt."""
        return []

    @property
    @abc.abstractmethod
    def task_description(self) -> str:
        """The task sentence of the current episode (used by the analyzer input x_tau)."""

    def close(self) -> None:  # noqa: B027 - a default no-op hook, not abstract
        """Release engine resources."""
