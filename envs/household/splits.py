"""The household benchmark's settings, task splits and expert analysis, read from an env config.

``env_cfg`` is any mapping with ``.get`` (the pipeline's ``config.env``); keys and defaults:
``num_receptacles`` 6, ``num_distractors`` 3, ``closed_share`` 0.5 (`household_task_config`),
``max_steps`` / ``history_window`` (`household_spec`, default `HOUSEHOLD_SPEC`'s), and for the
splits (`household_splits`):

- ``train``  [num_train_tasks 256, train_seed 0]: seen combinations, the RL / stage-1 task pool;
- ``seen``   [num_eval_tasks 64, eval_seed 1]: seen combinations in new layouts; tasks whose
  content (everything but id / seed / index) equals a train task are skipped, so the split
  holds ``num_eval_tasks`` tasks none of which occurs in ``train``;
- ``unseen`` [num_eval_tasks, eval_seed]: held-out (type, object, target) combinations.

`household_scripted_answer` is the env's expert analysis of one trajectory: the JSON answer of
the scripted analyzer (`annotate_json`), for the task the trajectory's ``task_id`` names.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from seed_jax.envs.base import EnvSpec
from seed_jax.envs.household.annotator import EpisodeRecord, annotate_json
from seed_jax.envs.household.env import HOUSEHOLD_SPEC
from seed_jax.envs.household.tasks import HouseholdConfig, generate_task, make_tasks

BENCHMARK_SPLITS = ("train", "seen", "unseen")


def household_task_config(env_cfg: Mapping[str, Any]) -> HouseholdConfig:
    return HouseholdConfig(num_receptacles=int(env_cfg.get("num_receptacles", 6)),
                           num_distractors=int(env_cfg.get("num_distractors", 3)),
                           closed_share=float(env_cfg.get("closed_share", 0.5)))


def household_spec(env_cfg: Mapping[str, Any]) -> EnvSpec:
    return dataclasses.replace(HOUSEHOLD_SPEC, max_steps=int(env_cfg.get("max_steps", HOUSEHOLD_SPEC.max_steps)),
                               history_window=int(env_cfg.get("history_window", HOUSEHOLD_SPEC.history_window)))


def _content(task: dict) -> str:
    return json.dumps({k: v for k, v in task.items() if k not in ("task_id", "seed", "index")}, sort_keys=True)


def household_splits(env_cfg: Mapping[str, Any]) -> Callable[[str], list[dict]]:
    """split name -> task dicts (cached; fresh dict copies on every call; see the module docstring)."""
    hc = household_task_config(env_cfg)
    n_train = int(env_cfg.get("num_train_tasks", 256))
    n_eval = int(env_cfg.get("num_eval_tasks", 64))
    train_seed, eval_seed = int(env_cfg.get("train_seed", 0)), int(env_cfg.get("eval_seed", 1))

    @functools.cache
    def load(split: str) -> tuple[dict, ...]:
        if split == "train":
            return tuple(make_tasks("seen", n_train, train_seed, hc))
        if split == "unseen":
            return tuple(make_tasks("unseen", n_eval, eval_seed, hc))
        if split == "seen":
            taken = {_content(t) for t in load("train")}
            out, i = [], 0
            while len(out) < n_eval:
                t = generate_task("seen", eval_seed, i, hc)
                if _content(t) not in taken:
                    out.append(t)
                i += 1
            return tuple(out)
        raise ValueError(f"household: unknown split {split!r}; known: {', '.join(BENCHMARK_SPLITS)}")

    return lambda split: [dict(t) for t in load(split)]


def household_scripted_answer(load_split: Callable[[str], list[dict]], include_plan: bool = False,
                              splits: Sequence[str] = BENCHMARK_SPLITS) -> Callable[[Any], str]:
    """``answer(traj) -> str``: ``annotate_json(EpisodeRecord.from_trajectory(traj, task),
    include_plan)`` with ``task`` the dict of ``traj.task_id`` among ``splits`` (read on the
    first call). ``traj`` is a `seed_jax.rollout.trajectory.Trajectory` (or any object with its
    ``task_id``, ``traj_id``, ``won`` and ``steps``). Raises ValueError for an unknown task id."""
    by_id: dict[str, dict] = {}

    def answer(traj) -> str:
        if not by_id:
            for split in splits:
                by_id.update({t["task_id"]: t for t in load_split(split)})
        task = by_id.get(traj.task_id)
        if task is None:
            raise ValueError(f"household scripted analyzer: trajectory {traj.traj_id} has unknown task id "
                             f"{traj.task_id!r}")
        return annotate_json(EpisodeRecord.from_trajectory(traj, task), include_plan)

    return answer
