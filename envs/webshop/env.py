"""WebShop as a seed_jax `Environment` (docs/METHOD.md §5), plus a picklable factory and goal lists.

Agent contract: the response holds ``<think>...</think>`` then ``<action>search[query]</action>``
or ``<action>click[text]</action>``. The action text is lower-cased (as the original env does
with its argument). A response is *invalid* (reward ``-0.1``, no-op, ``info['reason']`` says
why) when its action block is missing/duplicated/mixed/unclosed/empty/holds CJK
(`envs.actions.parse_action`), when the block is not ``search[...]``/``click[...]``
(``malformed``), or when the action is not available on the page (``unavailable``): search
only on the search page, click only on a listed clickable. (The original engine also
accepted a search from any page and ignored unknown clicks without penalty.)

info keys (reset and step): those of the `envs.base` contract (``action_text`` is the action
applied, ``search[query]`` or ``click[text]`` lower-cased, '' when invalid; ``score``), and
``penalty``, ``available_actions``, ``has_search_bar``, ``clickables``, ``page``,
``truncated``, ``goal_asin``, ``purchased_asin``, ``reward_info``.

``click[buy now]`` ends the episode: reward 10 if the task score is exactly 1, else 0;
``info['score']`` is the task score in [0, 1]. After ``max_steps`` (15) steps without a
purchase the episode ends with reward 0 (``info['truncated']``).

Prompt (verl-agent's WebShop template): task line ``Your task is to: <instruction>.``, the
number of steps taken, the last 2 (observation, action) pairs, the current observation,
the admissible actions, and the instruction to think in ``<think></think>`` and answer with
one action in ``<action></action>``. Observations in the prompt are the text-mode page
without its instruction part, each ``[SEP]`` field quoted (verl-agent ``format_obs``);
``info['raw_observation']`` is the full text-mode page.

Data (`envs.webshop.data`): ``catalog_path`` (items_shuffle format) defaults to a catalog
GENERATED in memory by `envs.webshop.generate` from ``goals_path`` (items_ins_v2 format), which
defaults to ``$SEED_WEBSHOP_DATA/items_ins_v2_1000.json`` when that file exists, else the copy
vendored in ``envs/webshop/data/items_ins_v2_1000.json.gz``.
Goal splits follow the original WebShop baselines: test = goals [0, 500), eval = [500, 1500),
train = [1500, N).
"""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path
from typing import Any

from seed_jax.envs.actions import parse_action
from seed_jax.envs.base import WIN_REWARD, Environment, EnvSpec, StepRecord
from seed_jax.envs.prompt import history_line, recent_steps
from seed_jax.envs.webshop.catalog import (
    Catalog,
    CatalogError,
    Goal,
    build_catalog,
    clean_products,
    load_attributes,
    load_products,
)
from seed_jax.envs.webshop.data import DATA_ENV_VAR, VENDORED_ATTRIBUTES
from seed_jax.envs.webshop.engine import DONE, SEP, WebShopEngine, build_index
from seed_jax.envs.webshop.generate import generate_products
from seed_jax.envs.webshop.search import BM25Index

WEBSHOP_SPEC = EnvSpec(name="webshop", max_steps=15, history_window=2)
SUCCESS_REWARD = WIN_REWARD
SPLITS: dict[str, tuple[int, int | None]] = {
    "test": (0, 500), "eval": (500, 1500), "train": (1500, None), "all": (0, None)}
ATTRIBUTES_FILE = "items_ins_v2_1000.json"
_ACTION = re.compile(r"(search|click)\[(.+)\]", re.DOTALL)

PROMPT_HEAD = ("You are an expert autonomous agent operating in the WebShop e-commerce environment.\n"
               "Your task is to: {task}.\n")
PROMPT_HISTORY = ("Prior to this step, you have already taken {n} step(s). Below are the most recent "
                  "{k} observations and the corresponding actions you took: {history}\n"
                  "You are now at step {cur} and your current observation is: {obs}.\n")
PROMPT_NO_HISTORY = "Your current observation is: {obs}.\n"
PROMPT_TAIL = ("Your admissible actions of the current situation are:\n[\n{actions}\n].\n\n"
               "Now it's your turn to take one action for the current step.\n"
               "You should first reason step-by-step about the current situation, then think "
               "carefully which admissible action best advances the shopping goal. This reasoning "
               "process MUST be enclosed within <think> </think> tags.\n"
               "Once you've finished your reasoning, you should choose an admissible action for "
               "current step and present it within <action> </action> tags.")


def default_goals_path() -> Path:
    """``$SEED_WEBSHOP_DATA/items_ins_v2_1000.json`` when it exists, else the vendored copy."""
    env = os.environ.get(DATA_ENV_VAR)
    if env and (Path(env) / ATTRIBUTES_FILE).is_file():
        return Path(env) / ATTRIBUTES_FILE
    return VENDORED_ATTRIBUTES


def _resolve(goals_path: str | os.PathLike | None) -> str:
    return os.fspath(goals_path) if goals_path is not None else os.fspath(default_goals_path())


@functools.lru_cache(maxsize=8)
def _site(catalog_path: str | None, goals_path: str, human_goals_path: str | None,
          human_goals: bool, num_products: int | None, seed: int) -> tuple[Catalog, BM25Index]:
    if catalog_path is None:
        raw = generate_products(load_attributes(goals_path))
        products = clean_products(raw, f"<catalog generated from {goals_path}>", goals_path,
                                  human_goals_path, human_goals, num_products)
    else:
        products = load_products(catalog_path, goals_path, human_goals_path, human_goals, num_products)
    catalog = build_catalog(products, use_human_goals=human_goals, seed=seed)
    return catalog, build_index(catalog)


def get_site(catalog_path: str | os.PathLike | None = None, goals_path: str | os.PathLike | None = None,
             human_goals_path: str | os.PathLike | None = None, human_goals: bool = False,
             num_products: int | None = None, seed: int = 233) -> tuple[Catalog, BM25Index]:
    """(catalog, search index) for one data configuration, cached per process."""
    return _site(None if catalog_path is None else os.fspath(catalog_path), _resolve(goals_path),
                 None if human_goals_path is None else os.fspath(human_goals_path),
                 bool(human_goals), num_products, seed)


def load_goals(catalog_path: str | os.PathLike | None = None, goals_path: str | os.PathLike | None = None,
               split: str = "all", limit: int | None = None,
               human_goals_path: str | os.PathLike | None = None, human_goals: bool = False,
               num_products: int | None = None, seed: int = 233) -> list[dict]:
    """JSON-serialisable task dicts ``{task_id, goal_index, asin, instruction, category, split}`` of
    a split (``category``: the goal product's category, the skill bank's task group)."""
    if split not in SPLITS:
        raise ValueError(f"unknown WebShop split {split!r}; expected one of {sorted(SPLITS)}")
    catalog, _ = get_site(catalog_path, goals_path, human_goals_path, human_goals, num_products, seed)
    lo, hi = SPLITS[split]
    idxs = range(lo, min(hi if hi is not None else len(catalog.goals), len(catalog.goals)))
    tasks = [{"task_id": f"webshop/{i}", "goal_index": i, "asin": catalog.goals[i].asin,
              "instruction": catalog.goals[i].instruction_text, "category": catalog.goals[i].category,
              "split": split} for i in idxs]
    return tasks[:limit] if limit is not None else tasks


def make_webshop_env(catalog_path: str | os.PathLike | None = None,
                     goals_path: str | os.PathLike | None = None, **kwargs: Any) -> WebShopEnv:
    """Picklable factory (module-level): ``functools.partial(make_webshop_env, ...)()``."""
    return WebShopEnv(catalog_path=catalog_path, goals_path=goals_path, **kwargs)


def format_observation(raw: str, instruction: str) -> str:
    """verl-agent ``format_obs``: fields after the instruction field, each quoted."""
    parts = raw.split(SEP)
    if instruction in parts:
        return SEP.join(f"'{p}'" for p in parts[parts.index(instruction) + 1:])
    return raw


class WebShopEnv(Environment):
    """Text WebShop episode over a catalog (see module docstring)."""

    spec = WEBSHOP_SPEC

    def __init__(self, catalog_path: str | os.PathLike | None = None,
                 goals_path: str | os.PathLike | None = None,
                 human_goals_path: str | os.PathLike | None = None, human_goals: bool = False,
                 num_products: int | None = None, seed: int = 233, show_attrs: bool = False,
                 max_steps: int = WEBSHOP_SPEC.max_steps,
                 history_window: int = WEBSHOP_SPEC.history_window):
        self.catalog, self.index = get_site(catalog_path, goals_path, human_goals_path,
                                            human_goals, num_products, seed)
        self.engine = WebShopEngine(self.catalog, self.index, show_attrs=show_attrs)
        self.max_steps, self.history_window = max_steps, history_window
        self.goal: Goal | None = None
        self.task: dict = {}
        self.task_id = ""
        self.history: list[StepRecord] = []
        self.steps = 0
        self.done = True

    # ------------------------------------------------------------------ episode

    def _goal_of(self, task: Any) -> tuple[Goal, dict]:
        if isinstance(task, int):
            task = {"goal_index": task}
        if not isinstance(task, dict):
            raise TypeError(f"WebShop task must be a dict or goal index, got {type(task).__name__}")
        if "goal" in task:
            goal = task["goal"] if isinstance(task["goal"], Goal) else Goal.from_dict(task["goal"])
            if goal.asin not in self.catalog.by_asin:
                raise CatalogError(f"task goal asin {goal.asin!r} is not in the loaded catalog")
            return goal, task
        if "goal_index" not in task:
            raise KeyError("WebShop task needs 'goal_index' or 'goal'")
        i = int(task["goal_index"])
        if not 0 <= i < len(self.catalog.goals):
            raise IndexError(f"goal_index {i} out of range (catalog has {len(self.catalog.goals)} goals)")
        goal = self.catalog.goals[i]
        for key, val in (("asin", goal.asin), ("instruction", goal.instruction_text)):
            if key in task and task[key] != val:
                raise CatalogError(f"task {task.get('task_id', i)!r} {key} {task[key]!r} does not match "
                                   f"goal {i} of the loaded catalog ({val!r}): different data files?")
        return goal, task

    def reset(self, task: Any) -> tuple[str, dict]:
        self.goal, self.task = self._goal_of(task)
        self.task_id = str(self.task.get("task_id", f"webshop/{self.task.get('goal_index', self.goal.asin)}"))
        self.engine.start(self.goal)
        self.history, self.steps, self.done = [], 0, False
        obs = self.engine.observation()
        return obs, self._info(valid=True, action="", reason="", penalty=0.0)

    def available_actions(self) -> list[str]:
        """Admissible action strings of the current page (verl-agent ``format_avail_actions``)."""
        acts = ["search[<your query>]"] if self.engine.has_search_bar() else []
        return acts + [f"click[{c}]" for c in self.engine.clickables()]

    def _check(self, response_text: str) -> tuple[str, str, str]:
        """-> (verb, argument, reason); reason '' when the action is valid and available."""
        parsed = parse_action(response_text, self.spec.action_kinds)
        if not parsed.valid:
            return "", "", parsed.reason
        m = _ACTION.fullmatch(parsed.text.strip().lower())
        if m is None or not m.group(2).strip():
            return "", "", "malformed"
        verb, arg = m.group(1), m.group(2).strip()
        if verb == "search" and not self.engine.has_search_bar():
            return verb, arg, "unavailable"
        if verb == "click" and arg not in self.engine.clickables():
            return verb, arg, "unavailable"
        return verb, arg, ""

    def step(self, response_text: str) -> tuple[str, float, bool, dict]:
        if self.done:
            raise RuntimeError("WebShop episode is over (or not started): call reset(task) first")
        before = self._agent_observation()
        verb, arg, reason = self._check(response_text)
        self.steps += 1
        reward = 0.0
        if reason:
            reward = -self.spec.invalid_penalty
        elif verb == "search":
            self.engine.search(arg)
        else:
            self.engine.click(arg)
        self.history.append(StepRecord(before, f"{verb}[{arg}]" if verb else f"<invalid: {reason}>"))
        truncated = False
        if self.engine.page_type == DONE:
            self.done = True
            reward = SUCCESS_REWARD if self.engine.reward.score == 1.0 else 0.0
        elif self.steps >= self.max_steps:
            self.done = truncated = True
        info = self._info(valid=not reason, action="" if reason else f"{verb}[{arg}]", reason=reason,
                          penalty=self.spec.invalid_penalty if reason else 0.0, truncated=truncated)
        return self.engine.observation(), reward, self.done, info

    def _info(self, valid: bool, action: str, reason: str, penalty: float, truncated: bool = False) -> dict:
        r = self.engine.reward
        score = r.score if r is not None else 0.0
        return {
            "valid": valid,
            "action_text": action,
            "reason": reason,
            "penalty": penalty,
            "won": r is not None and score == 1.0,
            "score": float(score),
            "raw_observation": self.engine.observation(),
            "available_actions": self.available_actions() if not self.done else [],
            "has_search_bar": self.engine.has_search_bar(),
            "clickables": list(self.engine.clickables()),
            "page": self.engine.page_type,
            "step": self.steps,
            "truncated": truncated,
            "task_id": self.task_id,
            "goal_asin": self.goal.asin,
            "purchased_asin": self.engine.asin if r is not None else None,
            "reward_info": r.to_dict() if r is not None else None,
        }

    # ------------------------------------------------------------------ prompt

    @property
    def task_description(self) -> str:
        return self.goal.instruction_text if self.goal is not None else ""

    def _agent_observation(self) -> str:
        return format_observation(self.engine.observation(), self.goal.instruction_text)

    def build_prompt(self) -> str:
        return self._prompt(self.history_window)

    def prompt_variants(self) -> list[str]:
        return [self._prompt(k) for k in range(min(self.history_window, len(self.history)) - 1, -1, -1)]

    def _prompt(self, history_window: int) -> str:
        """The prompt with the last ``history_window`` steps shown (module docstring)."""
        task = self.goal.instruction_text
        obs = self._agent_observation()
        actions = "\n".join(f"'{a}'," for a in self.available_actions())
        text = PROMPT_HEAD.format(task=task)
        if self.history and history_window > 0:
            recent = recent_steps(self.history, history_window)
            lines = "\n".join(history_line(i, h.observation, h.action) for i, h in recent)
            text += PROMPT_HISTORY.format(n=len(self.history), k=len(recent), history=lines,
                                          cur=len(self.history) + 1, obs=obs)
        else:
            text += PROMPT_NO_HISTORY.format(obs=obs)
        return text + PROMPT_TAIL.format(actions=actions)
