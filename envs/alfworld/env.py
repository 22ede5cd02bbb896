"""`AlfWorldEnv`: the agent-facing ALFWorld environment (docs/METHOD.md §5).

- reset(task) loads the task's game file (kept loaded while the same game is reset again),
  returns the initial observation without TextWorld's welcome header; the task description
  is the sentence of its 'Your task is to: ...' line.
- step(response) parses ``<action>cmd</action>`` (lower-cased) with `envs.actions.parse_action`.
  A valid command is sent to the engine even when not admissible (the engine then answers
  'Nothing happens.'). An invalid response costs ``invalid_penalty`` and the game is not
  stepped: the observation repeats the previous one after a note saying the response was invalid.
  reward_t = 10 * won_t - 0.1 * invalid_t; done_t = won_t or t >= max_steps.

info keys (reset and step): those of the `envs.base` contract (``valid``, ``won``,
``raw_observation``, ``action_text`` (the command sent, '' when invalid), ``reason`` (why the
response was invalid, '' when valid), ``task_id``, ``step`` (steps taken), ``task_type``), and
``admissible_commands`` (list, 'help' dropped), ``gamefile``, ``action`` (= ``action_text``)
and ``done_reason`` ('won', 'max_steps' or '').
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from seed_jax.envs.actions import parse_action
from seed_jax.envs.alfworld.engine import EngineState, GameEngine
from seed_jax.envs.alfworld.games import DATA_ENV_VAR, task_type_of
from seed_jax.envs.alfworld.prompt import ALFWORLD_PROMPT
from seed_jax.envs.alfworld.text import extract_task, strip_banner
from seed_jax.envs.base import WIN_REWARD, Environment, EnvSpec, StepRecord

ALFWORLD_SPEC = EnvSpec(name="alfworld", max_steps=30, history_window=5)
INVALID_ACTION_TEXT = "(invalid response, no action taken)"


def invalid_note(reason: str) -> str:
    """The note put before the repeated observation after an invalid response."""
    return (
        f"Your previous response was invalid ({reason}): it must contain exactly one "
        "<action>...</action> block holding one admissible action. Nothing happened."
    )


class AlfWorldEnv(Environment):
    """One ALFWorld episode at a time on the real TextWorld engine."""

    def __init__(
        self,
        data_dir: str | os.PathLike | None = None,
        max_steps: int | None = None,
        history_window: int | None = None,
    ):
        self.spec = ALFWORLD_SPEC.with_overrides(max_steps=max_steps, history_window=history_window)
        self._data_dir = data_dir
        self._engine: GameEngine | None = None
        self._task: dict | None = None
        self._task_description = ""
        self._history: list[StepRecord] = []
        self._observation = ""  # what the agent is shown now (raw observation of the last step)
        self._engine_observation = ""  # the engine's last answer (repeated after invalid responses)
        self._admissible: tuple[str, ...] = ()
        self._won = False
        self._done = True

    # ------------------------------------------------------------------ episode

    def _game_path(self, game_file: str) -> str:
        path = Path(game_file)
        if not path.is_absolute():
            base = self._data_dir or os.environ.get(DATA_ENV_VAR)
            if not base:
                raise ValueError(
                    f"relative game_file {game_file!r} needs data_dir=... or ${DATA_ENV_VAR} to resolve against"
                )
            path = Path(base) / path
        return str(path)

    def _normalise_task(self, task: Any) -> dict:
        if isinstance(task, (str, os.PathLike)):
            task = {"game_file": str(task)}
        if not isinstance(task, dict) or "game_file" not in task:
            raise TypeError(f"an ALFWorld task is a dict with a 'game_file' key (or a path), got {task!r}")
        game_file = self._game_path(str(task["game_file"]))
        trial = Path(game_file).parent
        return {
            "task_id": task.get("task_id", f"{trial.parent.name}/{trial.name}"),
            "game_file": game_file,
            "task_type": task.get("task_type") or task_type_of(trial.parent.name),
            "split": task.get("split", ""),
        }

    def reset(self, task: Any) -> tuple[str, dict]:
        task = self._normalise_task(task)
        if self._engine is None or self._engine.game_file != task["game_file"]:
            self.close()
            self._engine = GameEngine(task["game_file"])
        state = self._engine.reset()
        observation = strip_banner(state.feedback)
        self._task = task
        self._task_description = extract_task(observation)
        self._history = []
        self._observation = observation
        self._engine_observation = observation
        self._admissible = state.admissible_commands
        self._won = state.won
        self._done = False
        return observation, self._info(valid=True, action="", reason="", done_reason="")

    def step(self, response_text: str) -> tuple[str, float, bool, dict]:
        if self._task is None or self._engine is None:
            raise RuntimeError("AlfWorldEnv.step called before reset")
        if self._done:
            raise RuntimeError("AlfWorldEnv.step called on a finished episode; call reset")
        parsed = parse_action(response_text, self.spec.action_kinds, lowercase=True)
        shown = self._observation
        if parsed.valid:
            state: EngineState = self._engine.step(parsed.text)
            self._engine_observation = strip_banner(state.feedback)
            self._observation = self._engine_observation
            self._admissible = state.admissible_commands
            self._won = state.won
            reward = WIN_REWARD if state.won else 0.0
            action = parsed.text
        else:
            self._observation = f"{invalid_note(parsed.reason)}\n{self._engine_observation}"
            reward = -self.spec.invalid_penalty
            action = ""
        self._history.append(StepRecord(observation=shown, action=action or INVALID_ACTION_TEXT))
        done_reason = "won" if self._won else ("max_steps" if len(self._history) >= self.spec.max_steps else "")
        self._done = bool(done_reason)
        info = self._info(valid=parsed.valid, action=action, reason=parsed.reason, done_reason=done_reason)
        return self._observation, reward, self._done, info

    def _info(self, valid: bool, action: str, reason: str, done_reason: str) -> dict:
        assert self._task is not None
        return {
            "valid": valid,
            "won": self._won,
            "raw_observation": self._observation,
            "admissible_commands": list(self._admissible),
            "task_type": self._task["task_type"],
            "task_id": self._task["task_id"],
            "gamefile": self._task["game_file"],
            "step": len(self._history),
            "action": action,
            "action_text": action,
            "reason": reason,
            "done_reason": done_reason,
        }

    # ------------------------------------------------------------------ prompt

    def build_prompt(self) -> str:
        if self._task is None:
            raise RuntimeError("AlfWorldEnv.build_prompt called before reset")
        return ALFWORLD_PROMPT.build(
            self._task_description, self._history, self._observation, self._admissible, self.spec.history_window
        )

    def prompt_variants(self) -> list[str]:
        if self._task is None:
            raise RuntimeError("AlfWorldEnv.prompt_variants called before reset")
        return ALFWORLD_PROMPT.variants(
            self._task_description, self._history, self._observation, self._admissible, self.spec.history_window
        )

    @property
    def task_description(self) -> str:
        return self._task_description

    @property
    def admissible_commands(self) -> list[str]:
        return list(self._admissible)

    @property
    def game_file(self) -> str:
        """The current episode's game file (absolute); '' before the first reset."""
        return self._task["game_file"] if self._task else ""

    @property
    def done(self) -> bool:
        return self._done

    def close(self) -> None:
        if self._engine is not None:
            self._engine.close()
            self._engine = None


def make_alfworld_env(
    data_dir: str | os.PathLike | None = None,
    max_steps: int | None = None,
    history_window: int | None = None,
) -> AlfWorldEnv:
    """Picklable factory for worker processes (pass it, or a functools.partial of it, to the pool)."""
    return AlfWorldEnv(data_dir=data_dir, max_steps=max_steps, history_window=history_window)
