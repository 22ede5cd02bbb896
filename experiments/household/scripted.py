"""The household benchmark's pieces for the pipeline: spec, task splits, scripted analyzer.

`seed_jax.pipeline.environments._household` binds these into a `Benchmark`.

Splits (``config.env`` keys in brackets):

- ``train``  [num_train_tasks, train_seed]: seen combinations, the RL / stage-1 task pool;
- ``seen``   [num_eval_tasks, eval_seed]: seen combinations in new layouts; tasks whose
  content (everything but id / seed / index) equals a train task are skipped, so the split
  holds ``num_eval_tasks`` tasks none of which occurs in ``train``;
- ``unseen`` [num_eval_tasks, eval_seed]: held-out (type, object, target) combinations.

The scripted analyzer (stage 1, ``config.stage1.analyzer = 'scripted'``) answers for each
trajectory with `envs.household.annotate_json` (expert-based workflow / avoidance rule) and
builds x_tau with `seed_jax.skills.build_analyzer_prompt` at ``analyzer_max_chars``
characters, the budget the policy's own analysis uses in stage 2
(3 x ``analysis.max_prompt_tokens``).
"""

from __future__ import annotations

import dataclasses
import functools
import json
from typing import Callable, Sequence

from envs.base import EnvSpec


def household_task_config(env_cfg):
    from envs.household import HouseholdConfig

    return HouseholdConfig(num_receptacles=int(env_cfg.get("num_receptacles", 6)),
                           num_distractors=int(env_cfg.get("num_distractors", 3)),
                           closed_share=float(env_cfg.get("closed_share", 0.5)))


def household_spec(env_cfg) -> EnvSpec:
    from envs.household import HOUSEHOLD_SPEC

    return dataclasses.replace(HOUSEHOLD_SPEC, max_steps=int(env_cfg.get("max_steps", HOUSEHOLD_SPEC.max_steps)),
                               history_window=int(env_cfg.get("history_window", HOUSEHOLD_SPEC.history_window)))


def _content(task: dict) -> str:
    return json.dumps({k: v for k, v in task.items() if k not in ("task_id", "seed", "index")}, sort_keys=True)


def household_splits(env_cfg) -> Callable[[str], list[dict]]:
    """split name -> task dicts (cached; see the module docstring)."""
    from envs.household import generate_task, make_tasks

    hc = household_task_config(env_cfg)
    n_train = int(env_cfg.get("num_train_tasks", 256))
    n_eval = int(env_cfg.get("num_eval_tasks", 64))
    train_seed, eval_seed = int(env_cfg.get("train_seed", 0)), int(env_cfg.get("eval_seed", 1))

    @functools.lru_cache(maxsize=None)
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
        raise ValueError(f"household: unknown split {split!r}; known: train, seen, unseen")

    return lambda split: [dict(t) for t in load(split)]


def scripted_annotator(load_split: Callable[[str], list[dict]], success_threshold: float, max_chars: int,
                       include_plan: bool = False, splits: Sequence[str] = ("train", "seen", "unseen")):
    """``annotate(trajs) -> (parses, prompts)`` keyed by traj_id, for `seed_jax.pipeline.stage1`."""
    from envs.household import EpisodeRecord, annotate_json
    from seed_jax.skills import build_analyzer_prompt, parse_skill

    by_id: dict[str, dict] = {}

    def annotate(trajs):
        if not by_id:
            for split in splits:
                by_id.update({t["task_id"]: t for t in load_split(split)})
        parses, prompts = {}, {}
        for t in trajs:
            if t.task_id not in by_id:
                raise ValueError(f"scripted annotator: trajectory {t.traj_id} has unknown task id {t.task_id!r}")
            prompts[t.traj_id] = build_analyzer_prompt(t, success_threshold, max_chars=max_chars)
            parses[t.traj_id] = parse_skill(annotate_json(EpisodeRecord.from_trajectory(t, by_id[t.task_id]),
                                                          include_plan))
        return parses, prompts

    return annotate
