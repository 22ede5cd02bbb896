"""Agent-prompt pieces shared by the environments written in ALFWorld's layout.

`HistoryPrompt.build` writes the verl-agent layout; an environment gives its own sentences
(ALFWorld's in `envs.alfworld.prompt`, shorter ones in `envs.household.prompt`)::

    {role_line}
    Your task is to: {task}
    {history_sentence}                                  (left out at step 1)
    [Observation {i}: '{obs_i}', Action {i}: '{act_i}']   (one line per kept step, i = n-k+1 .. n)
    {current_sentence}
    {admissible_sentence}

    {instruction}

where ``n`` = steps taken so far, ``k`` = how many of them are shown (the last
``history_window``; none when it is 0). Observations are shown without their own
'Your task is to:' line (`without_task_line`), so that the task line, the anchor after which
H(h, s) inserts a skill, is unique.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from seed_jax.envs.base import StepRecord

TASK_PREFIX = "Your task is to:"


def without_task_line(observation: str) -> str:
    """The observation with its 'Your task is to: ...' line(s) removed, stripped."""
    lines = [line for line in observation.splitlines() if not line.strip().startswith(TASK_PREFIX)]
    return "\n".join(lines).strip()


def format_admissible(commands: Sequence[str]) -> str:
    """['a', 'b'] -> "['a'\\n 'b']" (the verl-agent rendering of the admissible list)."""
    return "[" + "\n ".join(f"'{c}'" for c in commands) + "]"


def recent_steps(history: Sequence[StepRecord], window: int) -> list[tuple[int, StepRecord]]:
    """The last ``window`` records of ``history`` with their 1-based step numbers ([] when
    ``window <= 0``)."""
    kept = list(history[-window:]) if window > 0 else []
    return list(enumerate(kept, start=len(history) - len(kept) + 1))


def history_line(i: int, observation: str, action: str) -> str:
    """``[Observation {i}: '{observation}', Action {i}: '{action}']``."""
    return f"[Observation {i}: '{observation}', Action {i}: '{action}']"


@dataclasses.dataclass(frozen=True)
class HistoryPrompt:
    """The sentences of one environment's prompt (layout in the module docstring).

    ``history_sentence`` is formatted with ``n`` (steps taken) and ``k`` (steps shown),
    ``current_sentence`` with ``step`` (n + 1) and ``observation``,
    ``admissible_sentence`` with ``actions`` (`format_admissible` of the commands).
    """

    role_line: str
    history_sentence: str
    current_sentence: str
    admissible_sentence: str
    instruction: str

    def build(self, task: str, history: Sequence[StepRecord], observation: str,
              admissible_commands: Sequence[str], history_window: int) -> str:
        """The user-message text for the current state; ``history`` holds every step taken so
        far. Raises ValueError when ``task`` is not one line."""
        if "\n" in task:
            raise ValueError(f"the task sentence must be one line, got {task!r}")
        n = len(history)
        kept = recent_steps(history, history_window)
        lines = [self.role_line, f"{TASK_PREFIX} {task}"]
        if n:
            lines.append(self.history_sentence.format(n=n, k=len(kept)))
            lines += [history_line(i, without_task_line(rec.observation), rec.action) for i, rec in kept]
        lines.append(self.current_sentence.format(step=n + 1, observation=without_task_line(observation)))
        lines.append(self.admissible_sentence.format(actions=format_admissible(admissible_commands)))
        lines += ["", self.instruction]
        return "\n".join(lines)

    def variants(self, task: str, history: Sequence[StepRecord], observation: str,
                 admissible_commands: Sequence[str], history_window: int) -> list[str]:
        """`build` with ``k`` = min(history_window, len(history)) - 1, ..., 0 past steps shown
        (longest first; [] when no past step is shown): `envs.base.Environment.prompt_variants`."""
        shown = min(history_window, len(history))
        return [self.build(task, history, observation, admissible_commands, k) for k in range(shown - 1, -1, -1)]
