"""Benchmark registry: how the pipeline builds each environment and its task splits.

One `Benchmark` per environment name binds the env's spec (penalty, step limit, success
threshold), the stop strings of its action tags, a picklable env factory for the worker pool,
a task loader per split and, where the env has them, its scripted expert analysis of a
trajectory and its scripted demonstrations of the action format. Only this file knows the env
packages' constructors.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable
from pathlib import Path

from seed_jax.envs.alfworld import ALFWORLD_SPEC, list_games, make_alfworld_env
from seed_jax.envs.alfworld.demos import demonstration as alfworld_demonstration
from seed_jax.envs.alfworld.games import FULL_COUNTS, JSON_DIR, count_games, find_data_dir
from seed_jax.envs.base import EnvSpec
from seed_jax.envs.demos import PromptOf
from seed_jax.envs.household import household_scripted_answer, household_spec, household_splits, make_household_env
from seed_jax.envs.search import (
    SEARCH_SPEC,
    find_search_r1_file,
    load_default_tasks,
    load_tasks,
    make_search_env,
    search_r1_files,
)
from seed_jax.envs.search.demos import demonstration as search_demonstration
from seed_jax.envs.webshop import WEBSHOP_SPEC, load_goals, make_webshop_env
from seed_jax.envs.webshop.data import WebShopData, find_webshop_data
from seed_jax.envs.webshop.demos import demonstration as webshop_demonstration
from seed_jax.rollout.pool import EnvFactory
from seed_jax.rollout.trajectory import Trajectory

ScriptedAnswer = Callable[[Trajectory], str]
# (training tasks, how a turn's prompt is read off the env) -> scripted (prompt, response) turns
Demonstrate = Callable[[list[dict], PromptOf], list[tuple[str, str]]]



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
    # scripted (prompt, response) turns in the env's action format for the given training tasks
    # (None: the env has none); stage-1 SFT's format warm-up (``stage1.format_warmup_tasks``)
    demonstrations: Demonstrate | None = None

    def tasks(self, split: str, limit: int | None = None, seed: int = 0) -> list[dict]:
        """Tasks of a split; ``limit`` takes a seeded random subset (stable order)."""
        tasks = self.load_split(split)
        if not tasks:
            raise ValueError(f"{self.name}: split {split!r} has no tasks")
        if limit is not None and limit < len(tasks):
            idx = sorted(random.Random(f"{seed}:{split}").sample(range(len(tasks)), limit))
            tasks = [tasks[i] for i in idx]
        return tasks


VENDORED_SEARCH_SPLITS = ("train", "hotpotqa")  # the vendored 80/20 HotpotQA sample


def search_split_file(env_cfg, split: str) -> str | None:
    """The data file of a search split: ``env.datasets.<split>``, else the split's file in
    Search-R1's layout under ``env.data_dir`` (`envs.search.data`); None when neither names an
    existing file (the vendored sample may then serve, see `missing_search_data`)."""
    explicit = dict(env_cfg.get("datasets", {}) or {}).get(split)
    if explicit:
        return explicit if Path(explicit).is_file() else None
    data_dir = env_cfg.get("data_dir", "")
    return find_search_r1_file(data_dir, split) if data_dir else None


def _vendored_serves(env_cfg, split: str) -> bool:
    """The vendored sample serves `split` only with ``env.vendored_data``, for 'train' and
    'hotpotqa', and only when no file was asked for (neither ``env.datasets.<split>`` nor
    ``env.data_dir`` set): a file asked for and missing is an error, never a fallback."""
    asked = bool(dict(env_cfg.get("datasets", {}) or {}).get(split)) or bool(env_cfg.get("data_dir", ""))
    return bool(env_cfg.get("vendored_data", True)) and split in VENDORED_SEARCH_SPLITS and not asked


def search_splits(env_cfg) -> tuple[str, ...]:
    """The splits a search run reads: 'train' and ``env.eval_splits``."""
    return ("train", *[s for s in env_cfg.get("eval_splits", ("hotpotqa",)) if s != "train"])


def missing_search_data(env_cfg, splits: tuple[str, ...] | None = None) -> str | None:
    """None when every split of `splits` (default `search_splits`) has its data; else a message
    naming each missing split with the files looked for, and the layout expected. The
    vendored sample serves where `_vendored_serves` says so (never in the paper preset)."""
    missing = [s for s in (search_splits(env_cfg) if splits is None else splits)
               if search_split_file(env_cfg, s) is None and not _vendored_serves(env_cfg, s)]
    if not missing:
        return None
    data_dir = env_cfg.get("data_dir", "") or "<data_dir>"
    datasets = dict(env_cfg.get("datasets", {}) or {})
    looked = []
    for s in missing:
        if datasets.get(s):
            looked.append(f"{s}: env.datasets.{s} = {datasets[s]} does not exist")
        else:
            first, *others = search_r1_files(data_dir, s)
            looked.append(f"{s}: {first} (or {', '.join(Path(o).name for o in others)})")
    return (f"no data file for the search split(s) {', '.join(missing)}: {'; '.join(looked)}. "
            "Set env.data_dir to a directory in Search-R1's layout (<data_dir>/nq_hotpotqa_train/train.parquet; "
            "<data_dir>/<split>/test.parquet, or dev.parquet for hotpotqa, 2wikimultihopqa and musique: parquet "
            "with the columns question, golden_answers, data_source as Search-R1's data scripts write them, or "
            "FlashRAG .jsonl), or name a file per split in env.datasets. The vendored HotpotQA sample serves "
            "only with env.vendored_data=True (the local and tiny presets) and neither env.data_dir nor "
            "env.datasets set for the split.")


def _demonstrate(factory: EnvFactory, demonstration) -> Demonstrate:
    """`Benchmark.demonstrations` from an env-level ``demonstration(env, task, prompt_of)``: one
    env of ``factory`` plays every task's script, closed afterwards."""

    def demonstrate(tasks: list[dict], prompt_of: PromptOf) -> list[tuple[str, str]]:
        env = factory(0)
        try:
            return [turn for task in tasks for turn in demonstration(env, task, prompt_of)]
        finally:
            env.close()

    return demonstrate


def _search(env_cfg) -> Benchmark:
    retriever = {"kind": env_cfg.retriever, "corpus_path": env_cfg.get("corpus") or None,
                 "url": env_cfg.get("retriever_url") or None}
    retriever = {k: v for k, v in retriever.items() if v is not None}
    factory = EnvFactory(make_search_env, retriever=retriever, seed_kwarg=None)
    n_eval = env_cfg.get("default_eval_size", 20)

    def load(split: str) -> list[dict]:
        path = search_split_file(env_cfg, split)
        if path is not None:
            return load_tasks(path)
        if _vendored_serves(env_cfg, split):
            default = load_default_tasks()
            return default[:-n_eval] if split == "train" else default[-n_eval:]
        raise ValueError(f"search: {missing_search_data(env_cfg, (split,))}")

    return Benchmark("search", SEARCH_SPEC, ("</search>", "</answer>"), factory, load, "train",
                     tuple(env_cfg.get("eval_splits", ("hotpotqa",))),
                     demonstrations=_demonstrate(factory, search_demonstration))


ALFWORLD_SPLITS = ("train", "valid_seen", "valid_unseen")
ALFWORLD_LAYOUT = (f"expected <dir>/{JSON_DIR}/{{train,valid_seen,valid_unseen}}/<task>/<trial>/game.tw-pddl, as "
                   "`alfworld-download` leaves $ALFWORLD_DATA (envs/alfworld/README.md)")


def alfworld_data(env_cfg):
    """``(directory or None, where from)`` of the ALFWorld games (`envs.alfworld.games.find_data_dir`):
    ``env.data_dir``, else ``$ALFWORLD_DATA``, else the vendored subset when ``env.vendored_data``."""
    return find_data_dir(env_cfg.get("data_dir") or None, bool(env_cfg.get("vendored_data", True)))


def missing_alfworld_data(env_cfg, found=None) -> str | None:
    """None when the ALFWorld games are there; else one line naming the directory and the layout.
    ``env.vendored_data`` False (the paper preset) also needs the full release's game counts
    (`envs.alfworld.games.FULL_COUNTS`), not a subset. ``found``: `alfworld_data`'s answer, when
    the caller has it."""
    path, where = found or alfworld_data(env_cfg)
    if path is None:
        return (f"no ALFWorld data: {where} and env.vendored_data is False (the paper preset needs the full "
                f"game set: `alfworld-download`, then set $ALFWORLD_DATA or env.data_dir); {ALFWORLD_LAYOUT}")
    if not path.is_dir():
        return f"ALFWorld data directory {path} ({where}) does not exist; {ALFWORLD_LAYOUT}"
    counts = {split: count_games(path, split) for split in ALFWORLD_SPLITS}
    empty = [split for split, n in counts.items() if n == 0]
    if empty:
        return f"ALFWorld data directory {path} ({where}) has no games for {', '.join(empty)}; {ALFWORLD_LAYOUT}"
    if not env_cfg.get("vendored_data", True):
        short = [f"{split} {counts[split]} of {FULL_COUNTS[split]}" for split in ALFWORLD_SPLITS
                 if counts[split] < FULL_COUNTS[split]]
        if short:
            return (f"ALFWorld data directory {path} ({where}) holds a subset ({', '.join(short)} games); "
                    "env.vendored_data=False (the paper preset) needs the full release (`alfworld-download`); "
                    f"{ALFWORLD_LAYOUT}")
    return None


def _alfworld(env_cfg) -> Benchmark:
    """Loading a split raises `missing_alfworld_data`'s line when the games are not there (the
    benchmark itself can be built without them: its spec and splits)."""
    found = alfworld_data(env_cfg)  # resolved once: `import alfworld` later sets $ALFWORLD_DATA
    data_dir = None if found[0] is None else str(found[0])
    factory = EnvFactory(make_alfworld_env, data_dir=data_dir, seed_kwarg=None)

    def load(split: str) -> list[dict]:
        missing = missing_alfworld_data(env_cfg, found)
        if missing:
            raise ValueError(f"alfworld: {missing}")
        return list_games(data_dir, split)

    return Benchmark("alfworld", ALFWORLD_SPEC, ("</action>",), factory, load, "train", ("valid_seen", "valid_unseen"),
                     demonstrations=_demonstrate(factory, alfworld_demonstration))


def webshop_data(env_cfg) -> tuple[WebShopData | None, str | None]:
    """`envs.webshop.data.find_webshop_data` for a config's ``env`` block."""
    return find_webshop_data(env_cfg.get("data_dir", "") or "", env_cfg.get("catalog_path", "") or "",
                             env_cfg.get("goals_path", "") or "", bool(env_cfg.get("human_goals", False)),
                             bool(env_cfg.get("vendored_data", True)))


def _webshop(env_cfg) -> Benchmark:
    """Loading a split raises `webshop_data`'s line when the files are missing (the benchmark
    itself can be built without them: its spec and splits)."""
    data, missing = webshop_data(env_cfg)
    kw = data.env_kwargs() if data is not None else {}
    factory = EnvFactory(make_webshop_env, seed_kwarg=None, **kw)

    def load(split: str) -> list[dict]:
        if data is None:
            raise ValueError(f"webshop: {missing}")
        return load_goals(split=split, **kw)

    return Benchmark("webshop", WEBSHOP_SPEC, ("</action>",), factory, load, "train", ("test",),
                     demonstrations=_demonstrate(factory, webshop_demonstration))


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
# the benchmarks with an expert analysis (``Benchmark.scripted_answer``), the only ones the
# 'scripted' analyzer serves; `seed_jax.pipeline.validate` reads it without building one, and
# `make_benchmark` holds every benchmark to it
EXPERT_ANALYSIS = frozenset({"household"})


def has_expert_analysis(env_name: str) -> bool:
    """Whether the benchmark ``env_name`` analyses a trajectory itself (`EXPERT_ANALYSIS`)."""
    return env_name in EXPERT_ANALYSIS


def missing_data(env_cfg) -> str | None:
    """What a benchmark's data lacks (one line), checked before any model loads
    (`seed_jax.pipeline.preflight`): None when nothing is missing."""
    if env_cfg.name == "search":
        return missing_search_data(env_cfg)
    if env_cfg.name == "alfworld":
        return missing_alfworld_data(env_cfg)
    if env_cfg.name == "webshop":
        return webshop_data(env_cfg)[1]
    return None


def describe_data(env_cfg) -> str | None:
    """One line naming the data a run reads, for its log, summary (``Data:``) and report; the
    WebShop generated catalog is named as such. None for the benchmarks without data files."""
    if env_cfg.name == "alfworld":
        path, where = alfworld_data(env_cfg)
        return f"ALFWorld games {path} ({where})"
    if env_cfg.name == "webshop":
        data, missing = webshop_data(env_cfg)
        return data.describe() if data is not None else f"WebShop data missing: {missing}"
    if env_cfg.name == "search":
        vendored = [s for s in search_splits(env_cfg) if search_split_file(env_cfg, s) is None
                    and _vendored_serves(env_cfg, s)]
        return ("search: the vendored HotpotQA sample" if vendored else
                f"search: {env_cfg.get('data_dir') or 'env.datasets'}")
    return None


def make_benchmark(env_cfg) -> Benchmark:
    if env_cfg.name not in BENCHMARKS:
        raise ValueError(f"env.name: unknown environment {env_cfg.name!r}; known: {sorted(BENCHMARKS)}")
    bench = BENCHMARKS[env_cfg.name](env_cfg)
    if (bench.scripted_answer is not None) != has_expert_analysis(bench.name):
        raise AssertionError(f"{bench.name}: Benchmark.scripted_answer disagrees with EXPERT_ANALYSIS")
    return bench
