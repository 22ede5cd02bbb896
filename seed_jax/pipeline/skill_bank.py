"""A static skill bank from stage-1 annotations (static-skill ablation, Skill-Prompt, Skill-GRPO).

Lookup for a task, first tier that has a record:

1. a successful skill of the same task id, else any skill of that task id;
2. a successful skill of the same task type (ALFWorld, household);
3. the successful skill whose training task reads most like the task: BM25 (`envs.bm25`, the
   search environment's analyzer) of the task's text (``question``, ``instruction``) over the
   bank's task texts, among the records of the task's group (``data_source``, ``category``)
   when the bank has any of that group, else over all successful records; best score > 0,
   ties by file order;
4. the first successful skill of the task's group, else the first successful skill;

else None. Deterministic (file order).
"""

from __future__ import annotations

import os
from typing import Protocol

from seed_jax.envs.bm25 import BM25
from seed_jax.envs.search.bm25 import analyzer as words_analyzer
from seed_jax.paths import run_path
from seed_jax.skills import parse_skill, read_skill_records

STAGE1_RECORDS = ("stage1", "sft.jsonl")
TEXT_KEYS = ("question", "instruction")  # the task statement of a task dict (search, WebShop)
GROUP_KEYS = ("data_source", "category")  # the task's data source (search) / category (WebShop)


class _Bench(Protocol):
    train_split: str

    def tasks(self, split: str) -> list[dict]: ...


def task_text(task: dict) -> str:
    """The task's statement: its first non-empty ``TEXT_KEYS`` value ('' when none)."""
    return next((str(task[k]) for k in TEXT_KEYS if task.get(k)), "")


def task_group(task: dict) -> str:
    """The task's data source or category: its first non-empty ``GROUP_KEYS`` value ('' when none)."""
    return next((str(task[k]) for k in GROUP_KEYS if task.get(k)), "")


class SkillBank:
    def __init__(self, records: list[dict]):
        self.records = records
        self._indexes: dict[str, tuple[list[dict], BM25 | None]] = {}

    @classmethod
    def from_file(cls, path: str | os.PathLike, task_types: dict[str, str] | None = None,
                  tasks: dict[str, dict] | None = None) -> SkillBank:
        """Records of the parsed skills of ``path``; ``tasks`` (training task dicts by id) give
        each record its task's text and group, ``task_types`` its task type (``tasks``' own
        ``task_type`` when not given)."""
        tasks = tasks or {}
        recs = []
        if run_path(path).exists():
            for r in read_skill_records(path):
                p = parse_skill(r.answer)
                if p.ok:
                    task = tasks.get(r.task_id, {})
                    ttype = (task_types or {}).get(r.task_id, str(task.get("task_type", "")))
                    recs.append({"task_id": r.task_id, "success": r.outcome == "success", "skill": p.skill,
                                 "task_type": ttype, "text": task_text(task), "group": task_group(task)})
        return cls(recs)

    @classmethod
    def for_run(cls, workdir: str | os.PathLike, bench: _Bench) -> SkillBank:
        """The run's bank: the accepted stage-1 records (``<workdir>/stage1/sft.jsonl``), each with
        the task type, text and group of its training task, so that a task gets a skill of its
        type or, without types, of the most similar training task of its group (the same bank
        for RL, the in-training and the final evaluation)."""
        tasks = {str(t["task_id"]): t for t in bench.tasks(bench.train_split)}
        return cls.from_file(run_path(workdir).joinpath(*STAGE1_RECORDS), tasks=tasks)

    def _index(self, group: str) -> tuple[list[dict], BM25 | None]:
        """The successful records of ``group`` (all successful ones when the bank has none of
        it) and a BM25 index of their task texts (None when no record has a text)."""
        if group not in self._indexes:
            ok = [r for r in self.records if r["success"]]
            recs = [r for r in ok if group and r.get("group") == group] or ok
            texts = [r.get("text", "") for r in recs]
            self._indexes[group] = (recs, BM25.build(texts, words_analyzer()) if any(texts) else None)
        return self._indexes[group]

    def _most_similar(self, task: dict) -> str | None:
        recs, index = self._index(task_group(task))
        query = task_text(task)
        if index is not None and query:
            hits = index.top(query, 1)
            if hits:
                return recs[hits[0][0]]["skill"]
        return recs[0]["skill"] if recs else None

    def lookup(self, task: dict) -> str | None:
        tid = str(task.get("task_id", ""))
        ttype = str(task.get("task_type", ""))
        tiers = [
            lambda r: r["task_id"] == tid and r["success"],
            lambda r: r["task_id"] == tid,
            lambda r: bool(ttype) and r["task_type"] == ttype and r["success"],
        ]
        for tier in tiers:
            for r in self.records:
                if tier(r):
                    return r["skill"]
        return self._most_similar(task)

    def __len__(self) -> int:
        return len(self.records)
