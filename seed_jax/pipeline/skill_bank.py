"""A static skill bank from stage-1 annotations (static-skill ablation, Skill-Prompt, Skill-GRPO).

Lookup for a task: a successful skill of the same task id, else any skill of that task id,
else a successful skill of the same task type, else the first successful skill, else None.
Deterministic (file order).
"""

from __future__ import annotations

import os
from typing import Protocol

from seed_jax.paths import run_path
from seed_jax.skills import parse_skill, read_skill_records

STAGE1_RECORDS = ("stage1", "sft.jsonl")


class _Bench(Protocol):
    train_split: str

    def tasks(self, split: str) -> list[dict]: ...


class SkillBank:
    def __init__(self, records: list[dict]):
        self.records = records

    @classmethod
    def from_file(cls, path: str | os.PathLike, task_types: dict[str, str] | None = None) -> SkillBank:
        recs = []
        if run_path(path).exists():
            for r in read_skill_records(path):
                p = parse_skill(r.answer)
                if p.ok:
                    recs.append({"task_id": r.task_id, "success": r.outcome == "success", "skill": p.skill,
                                 "task_type": (task_types or {}).get(r.task_id, "")})
        return cls(recs)

    @classmethod
    def for_run(cls, workdir: str | os.PathLike, bench: _Bench) -> SkillBank:
        """The run's bank: the accepted stage-1 records (``<workdir>/stage1/sft.jsonl``), each with
        the task type of its training task, so that a task of a type the bank has gets a skill of
        that type (the same bank for RL, the in-training and the final evaluation)."""
        types = {str(t["task_id"]): str(t.get("task_type", "")) for t in bench.tasks(bench.train_split)}
        return cls.from_file(run_path(workdir).joinpath(*STAGE1_RECORDS), types)

    def lookup(self, task: dict) -> str | None:
        tid = str(task.get("task_id", ""))
        ttype = str(task.get("task_type", ""))
        tiers = [
            lambda r: r["task_id"] == tid and r["success"],
            lambda r: r["task_id"] == tid,
            lambda r: bool(ttype) and r["task_type"] == ttype and r["success"],
            lambda r: r["success"],
        ]
        for tier in tiers:
            for r in self.records:
                if tier(r):
                    return r["skill"]
        return None

    def __len__(self) -> int:
        return len(self.records)
