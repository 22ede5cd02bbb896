"""Benchmark registry: how the pipeline builds each environment and its task splits.

One `Benchmark` per environment name binds the env's spec (penalty, step limit, success
threshold), the stop strings of its action tags, a picklable env factory for the worker pool,
a task loader per split and, where the env has one, its scripted expert analysis of a
trajectory. Only this file knows the env packages' constructors.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable
from pathlib import Path

from envs.alfworld import ALFWORLD_SPEC, list_games, make_alfworld_env
from envs.base import EnvSpec
from envs.household import household_scripted_answer, household_spec, household_splits, make_household_env
from envs.search import SEARCH_SPEC, load_default_tasks, load_tasks, make_search_env
from envs.webshop import WEBSHOP_SPEC, load_goals, make_webshop_env
from seed_jax.rollout.pool import EnvFactory
from seed_jax.rollout.trajectory import Trajectory

ScriptedAnswer = Callable[[Trajectory], str]

REPO = Path(__file__).resolve().parents[2]
SHARED_DATA = REPO.parent / "shared" / "data"


@dataclasses.dataclass
class Benchmark:
    name: str
    spec: EnvSpec
    stop_strings: tuple[str, ...]
    factory: EnvFactory
    load_split: Callable[[str], list[dict]]  # split name -> all its task dicts
    train_split: str
    eval_splits: tuple[str, ...]
    # the JSON text of the env's expert analysis of one trajectory (None: the env has none);
    # the 'scripted' analyzer of `seed_jax.pipeline.analyzers` parses it
    scripted_answer: ScriptedAnswer | None = None

    def tasks(self, split: str, limit: int | None = None, seed: int = 0) -> list[dict]:
        """Tasks of a split; ``limit`` takes a seeded random subset (stable order)."""
        tasks = self.load_split(split)
        if not tasks:
            raise ValueError(f"{self.name}: split {split!r} has no tasks")
        if limit is not None and limit < len(tasks):
            idx = sorted(random.Random(f"{seed}:{split}").sample(range(len(tasks)), limit))
            tasks = [tasks[i] for i in idx]
        return tasks


def _search(env_cfg) -> Benchmark:
    retriever = {"kind": env_cfg.retriever, "corpus_path": env_cfg.get("corpus") or None,
                 "url": env_cfg.get("retriever_url") or None}
    retriever = {k: v for k, v in retriever.items() if v is not None}
    factory = EnvFactory(make_search_env, retriever=retriever, seed_kwarg=None)
    n_eval = env_cfg.get("default_eval_size", 20)

    def load(split: str) -> list[dict]:
        paths = dict(env_cfg.get("datasets", {}) or {})
        if split in paths:
            return load_tasks(paths[split])
        default = load_default_tasks()
        if split == "train":
            return default[:-n_eval]
        if split == "hotpotqa":
            return default[-n_eval:]
        raise ValueError(f"search: unknown split {split!r}; set env.datasets.{split} to a data file")

    return Benchmark("search", SEARCH_SPEC, ("</search>", "</answer>"), factory, load, "train",
                     tuple(env_cfg.get("eval_splits", ("hotpotqa",))))


def _alfworld(env_cfg) -> Benchmark:
    data_dir = env_cfg.get("data_dir") or str(SHARED_DATA / "alfworld")
    factory = EnvFactory(make_alfworld_env, data_dir=data_dir, seed_kwarg=None)
    return Benchmark("alfworld", ALFWORLD_SPEC, ("</action>",), factory,
                     lambda split: list_games(data_dir, split), "train", ("valid_seen", "valid_unseen"))


def _webshop(env_cfg) -> Benchmark:
    kw = {k: env_cfg.get(k) for k in ("catalog_path", "goals_path") if env_cfg.get(k)}
    factory = EnvFactory(make_webshop_env, seed_kwarg=None, **kw)
    return Benchmark("webshop", WEBSHOP_SPEC, ("</action>",), factory,
                     lambda split: load_goals(split=split, **kw), "train", ("test",))


def _household(env_cfg) -> Benchmark:
    """Splits and settings from `envs.household.splits`; the scripted stage-1 analyzer answers
    with the expert's analysis (``env.skill_plan``: with the shortest plan)."""
    spec = household_spec(env_cfg)
    factory = EnvFactory(make_household_env, max_steps=spec.max_steps, history_window=spec.history_window,
                         seed_kwarg=None)
    load = household_splits(env_cfg)
    answer = household_scripted_answer(load, bool(env_cfg.get("skill_plan", False)))
    return Benchmark("household", spec, ("</action>",), factory, load, "train",
                     tuple(env_cfg.get("eval_splits", ("seen", "unseen"))), scripted_answer=answer)


BENCHMARKS: dict[str, Callable] = {"search": _search, "alfworld": _alfworld, "webshop": _webshop,
                                   "household": _household}


def make_benchmark(env_cfg) -> Benchmark:
    if env_cfg.name not in BENCHMARKS:
        raise ValueError(f"env.name: unknown environment {env_cfg.name!r}; known: {sorted(BENCHMARKS)}")
    return BENCHMARKS[env_cfg.name](env_cfg)
