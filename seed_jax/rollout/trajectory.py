"""Trajectory records written by the rollout loop (plain data, JSON round-trip, no JAX).

One `StepSample` per environment step is one training sample of docs/METHOD.md §3.2: the
ordinary templated prompt `h_t` (token ids), the sampled response `a_t` (token ids and their
sampling log-probs `l_old`), plus what the analyzer and the teacher twin need: the prompt's
user-message text before chat templating (H(h, s) is applied to it), the raw observation the
environment showed at this step, validity, reward and penalty.

Reward bookkeeping (docs/METHOD.md §3.3):

- ``StepSample.reward``  the environment's reward for this step *without* the invalid-action
  penalty (for the paper's environments: 0 except at the winning step, 10 x won / EM 0-1);
- ``StepSample.penalty`` the invalid-action penalty charged at this step (>= 0; 0 if valid);
- ``Trajectory.episode_reward`` the outcome reward R(tau) = sum of step rewards (penalties not
  included), i.e. the environment's success reward such as 10 x won;
- the per-step GRPO score R(tau) - penalty_t is `seed_jax.losses.step_scores`.

Trajectories with ``env_error=True`` (a worker crashed or hung) are excluded from the loss and
counted in metrics.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterable, Iterator
from typing import Any

from seed_jax.jsonl import iter_records, write_records


def _require(d: dict, cls: type, name: str) -> None:
    """Raise a clear error when dict `d` lacks a required field of `cls`."""
    if not isinstance(d, dict):
        raise TypeError(f"{cls.__name__}.from_dict expects a dict, got {type(d).__name__}")
    missing = [f.name for f in dataclasses.fields(cls) if f.name not in d and _is_required(f)]
    if missing:
        raise ValueError(f"{cls.__name__} record ({name}) lacks field(s) {missing}")


def _is_required(f: dataclasses.Field) -> bool:
    return f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING


@dataclasses.dataclass
class StepSample:
    """One environment step = one training sample (see module docstring for rewards)."""

    prompt_ids: list[int]  # ordinary templated prompt h_t, token ids (after left truncation)
    response_ids: list[int]  # sampled response a_t, token ids (stop token included if sampled)
    response_logprobs: list[float]  # l_old: sampling log-probs of response_ids, same length
    response_text: str  # decoded response as given to env.step
    prompt_text: str  # user-message text before chat templating (input of H(h, s))
    raw_observation: str  # environment's own observation shown at this step (for x_tau)
    valid: bool  # the response held exactly one well-formed action block
    reward: float  # environment reward of this step, penalty excluded
    penalty: float = 0.0  # invalid-action penalty charged at this step (>= 0)
    action: str = ""  # the parsed action text ('' when invalid)
    prompt_tokens: int = -1  # the templated prompt's length before left truncation (-1: not recorded)

    @property
    def prompt_cut(self) -> bool:
        """The prompt lost tokens to left truncation (`rollout.max_prompt_tokens`)."""
        return self.prompt_tokens > len(self.prompt_ids)

    def __post_init__(self) -> None:
        if len(self.response_logprobs) != len(self.response_ids):
            raise ValueError(
                f"StepSample: {len(self.response_logprobs)} response_logprobs for "
                f"{len(self.response_ids)} response_ids"
            )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> StepSample:
        _require(d, cls, "step")
        return cls(
            prompt_ids=[int(x) for x in d["prompt_ids"]],
            response_ids=[int(x) for x in d["response_ids"]],
            response_logprobs=[float(x) for x in d["response_logprobs"]],
            response_text=str(d["response_text"]),
            prompt_text=str(d["prompt_text"]),
            raw_observation=str(d["raw_observation"]),
            valid=bool(d["valid"]),
            reward=float(d["reward"]),
            penalty=float(d.get("penalty", 0.0)),
            action=str(d.get("action", "")),
            prompt_tokens=int(d.get("prompt_tokens", -1)),
        )


@dataclasses.dataclass
class Trajectory:
    """One finished episode of one task; `group_id` groups the N rollouts of a task (GRPO)."""

    task_id: str
    group_id: int
    traj_id: str
    task_description: str
    steps: list[StepSample]
    episode_reward: float  # outcome reward R(tau), penalties excluded (e.g. 10 x won)
    won: bool  # success: episode_reward >= the environment's success threshold
    env_error: bool = False  # a worker crashed / hung: exclude from the loss
    final_observation: str = ""  # observation after the last step (shown to the analyzer)
    info: dict[str, Any] = dataclasses.field(default_factory=dict)  # JSON-able extras

    @property
    def num_steps(self) -> int:
        return len(self.steps)

    @property
    def total_penalty(self) -> float:
        return float(sum(s.penalty for s in self.steps))

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["steps"] = [s.to_dict() for s in self.steps]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Trajectory:
        _require(d, cls, str(d.get("traj_id", "?")) if isinstance(d, dict) else "?")
        return cls(
            task_id=str(d["task_id"]),
            group_id=int(d["group_id"]),
            traj_id=str(d["traj_id"]),
            task_description=str(d["task_description"]),
            steps=[StepSample.from_dict(s) for s in d["steps"]],
            episode_reward=float(d["episode_reward"]),
            won=bool(d["won"]),
            env_error=bool(d.get("env_error", False)),
            final_observation=str(d.get("final_observation", "")),
            info=dict(d.get("info", {})),
        )

    def to_json(self) -> str:
        """One-line JSON (non-ASCII kept as is)."""
        return json.dumps(self.to_dict(), ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str) -> Trajectory:
        return cls.from_dict(json.loads(text))


def write_trajectories(path: str | os.PathLike, trajectories: Iterable[Trajectory]) -> int:
    """Write one trajectory per line (UTF-8); returns the number written. Overwrites `path`."""
    return write_records(path, trajectories)


def iter_trajectories(path: str | os.PathLike) -> Iterator[Trajectory]:
    """Yield the trajectories of a jsonl file; blank lines are skipped, a line that is not a
    trajectory raises ValueError naming file and line."""
    return iter_records(path, Trajectory.from_json, "trajectory")


def read_trajectories(path: str | os.PathLike) -> list[Trajectory]:
    """All trajectories of a jsonl file (see `iter_trajectories`)."""
    return list(iter_trajectories(path))
