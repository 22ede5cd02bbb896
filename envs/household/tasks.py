"""Task generation: difficulty knobs, the seen / unseen split, JSON task dicts.

A *combination* is (task_type, object kind, target receptacle kind), e.g. ('heat', 'apple',
'countertop'). The unseen split holds out about `UNSEEN_PERCENT` % of all valid combinations,
chosen by a fixed hash (sha256 of 'household-split-v1:{type}:{object}:{target}', first 8 bytes
big-endian, mod 100 < UNSEEN_PERCENT); the seen split has the rest. Every object kind and every
target kind still occurs in the seen split: only the combination is new at test time.

Valid combinations: the object kind allows the task type (`world.OBJECT_TASKS`); the target is
one of `world.TARGET_KINDS`, except a heat task never targets the microwave nor a cool task the
fridge (the appliance itself).

`make_tasks(split, n, seed, config)` -> n task dicts. Task i has type TASK_TYPES[i % 4] (balanced),
a combination drawn uniformly from the split's combinations of that type, and a layout drawn
from ``random.Random(_seed_of(split, seed, i))``:

- receptacles: fridge 1, microwave 1, sinkbasin 1, one receptacle of the target kind, then
  kinds drawn without replacement from `EXTRA_POOL` until there are `num_receptacles`;
  instances of a kind are numbered 1, 2, ... (e.g. cabinet 1, cabinet 2);
- the task object ('<kind> 1') is hidden in a closed container with probability
  `closed_share` (else put on a surface), never in a receptacle of the target kind;
- `num_distractors` other object kinds (distinct, not the task's kind) lie in uniformly drawn
  receptacles; every container starts closed.

Task dict keys (all JSON types): task_id, split, seed, index, task_type, object, target,
task_description, target_object, receptacles (list), objects ({object: receptacle}),
opened (list of initially open containers; empty here). The dict fully determines the episode.
"""

from __future__ import annotations

import dataclasses
import hashlib
import random
from typing import Any

from seed_jax.envs.household.world import (
    OBJECT_KINDS,
    OBJECT_TASKS,
    RECEPTACLE_KINDS,
    TARGET_KINDS,
    TASK_TYPES,
    Layout,
    WorldState,
    is_openable,
    kind_of,
    task_sentence,
)

SPLITS = ("seen", "unseen")
UNSEEN_PERCENT = 20
ALWAYS_PRESENT = ("fridge", "microwave", "sinkbasin")
EXTRA_POOL = ("cabinet", "cabinet", "cabinet", "drawer", "drawer", "countertop", "countertop", "shelf",
              "shelf", "diningtable", "sidetable", "garbagecan")
TASK_KEYS = ("task_id", "split", "task_type", "object", "target", "task_description", "target_object",
             "receptacles", "objects", "opened")


@dataclasses.dataclass(frozen=True)
class HouseholdConfig:
    """Difficulty knobs of generated tasks."""

    num_receptacles: int = 6  # total receptacles (>= 4: fridge, microwave, sinkbasin, target)
    num_distractors: int = 3  # objects besides the task object
    closed_share: float = 0.5  # probability that the task object starts in a closed container

    def __post_init__(self) -> None:
        if not 4 <= self.num_receptacles <= len(ALWAYS_PRESENT) + len(EXTRA_POOL):
            raise ValueError(f"num_receptacles must be in [4, {len(ALWAYS_PRESENT) + len(EXTRA_POOL)}], "
                             f"got {self.num_receptacles}")
        if not 0 <= self.num_distractors <= len(OBJECT_KINDS) - 1:
            raise ValueError(f"num_distractors must be in [0, {len(OBJECT_KINDS) - 1}], got {self.num_distractors}")
        if not 0.0 <= self.closed_share <= 1.0:
            raise ValueError(f"closed_share must be in [0, 1], got {self.closed_share}")


def _hash_int(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")


def all_combinations() -> list[tuple[str, str, str]]:
    """Every valid (task_type, object kind, target kind), sorted."""
    out = []
    for obj, types in OBJECT_TASKS.items():
        for task_type in types:
            for target in TARGET_KINDS:
                if (task_type, target) in (("heat", "microwave"), ("cool", "fridge")):
                    continue
                out.append((task_type, obj, target))
    return sorted(out)


def split_of(task_type: str, obj: str, target: str) -> str:
    """'unseen' for the held-out combinations, else 'seen' (see module docstring)."""
    h = _hash_int(f"household-split-v1:{task_type}:{obj}:{target}") % 100
    return "unseen" if h < UNSEEN_PERCENT else "seen"


def combinations(split: str, task_type: str | None = None) -> list[tuple[str, str, str]]:
    """The combinations of `split` ('seen' / 'unseen'), optionally of one task type."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    return [c for c in all_combinations()
            if split_of(*c) == split and (task_type is None or c[0] == task_type)]


def _seed_of(split: str, seed: int, index: int) -> int:
    return _hash_int(f"household-task-v1:{split}:{int(seed)}:{int(index)}")


def _receptacles(rng: random.Random, target: str, n: int) -> list[str]:
    kinds = list(ALWAYS_PRESENT)
    pool = list(EXTRA_POOL)
    if target not in kinds:
        kinds.append(target)
        pool.remove(target)
    rng.shuffle(pool)
    kinds += pool[: n - len(kinds)]
    counts: dict[str, int] = {}
    names = []
    for k in kinds:
        counts[k] = counts.get(k, 0) + 1
        names.append(f"{k} {counts[k]}")
    return sorted(names, key=lambda s: (kind_of(s), int(s.rsplit(" ", 1)[1])))


def generate_task(split: str, seed: int, index: int, config: HouseholdConfig = HouseholdConfig()) -> dict[str, Any]:
    """Task `index` of (split, seed); see the module docstring."""
    task_type = TASK_TYPES[index % len(TASK_TYPES)]
    rng = random.Random(_seed_of(split, seed, index))
    combos = combinations(split, task_type)
    _, obj_kind, target = combos[rng.randrange(len(combos))]
    receptacles = _receptacles(rng, target, config.num_receptacles)
    not_target = [r for r in receptacles if kind_of(r) != target]
    closed = [r for r in not_target if is_openable(r)]
    surfaces = [r for r in not_target if not is_openable(r)]
    hide = rng.random() < config.closed_share
    candidates = (closed if hide else surfaces) or (surfaces if hide else closed)
    target_object = f"{obj_kind} 1"
    objects = {target_object: candidates[rng.randrange(len(candidates))]}
    others = [k for k in OBJECT_KINDS if k != obj_kind]
    for kind in rng.sample(others, config.num_distractors):
        objects[f"{kind} 1"] = receptacles[rng.randrange(len(receptacles))]
    return {
        "task_id": f"household-{split}-{int(seed)}-{int(index)}",
        "split": split,
        "seed": int(seed),
        "index": int(index),
        "task_type": task_type,
        "object": obj_kind,
        "target": target,
        "task_description": task_sentence(task_type, obj_kind, target),
        "target_object": target_object,
        "receptacles": receptacles,
        "objects": dict(sorted(objects.items())),
        "opened": [],
    }


def make_tasks(split: str, n: int, seed: int = 0, config: HouseholdConfig = HouseholdConfig()) -> list[dict[str, Any]]:
    """`n` JSON-serialisable task dicts of `split` ('seen' / 'unseen'), deterministic in (split, n, seed, config)."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    return [generate_task(split, seed, i, config) for i in range(n)]


def load_task(task: Any) -> tuple[Layout, WorldState]:
    """Validate a task dict and build (layout, initial state); clear errors on bad input."""
    if not isinstance(task, dict):
        raise TypeError(f"a household task is a dict (see envs.household.tasks), got {type(task).__name__}")
    missing = [k for k in TASK_KEYS if k not in task]
    if missing:
        raise ValueError(f"household task {task.get('task_id', '?')!r} lacks key(s) {missing}")
    tid = task["task_id"]
    if task["task_type"] not in TASK_TYPES:
        raise ValueError(f"task {tid!r}: task_type {task['task_type']!r} not in {TASK_TYPES}")
    receptacles = tuple(str(r) for r in task["receptacles"])
    if len(set(receptacles)) != len(receptacles):
        raise ValueError(f"task {tid!r}: duplicate receptacles in {receptacles}")
    for r in receptacles:
        parts = r.rsplit(" ", 1)
        if len(parts) != 2 or not parts[1].isdigit() or parts[0] not in RECEPTACLE_KINDS:
            raise ValueError(f"task {tid!r}: unknown receptacle {r!r}")
    objects = {str(o): str(r) for o, r in dict(task["objects"]).items()}
    for o, r in objects.items():
        if r not in receptacles:
            raise ValueError(f"task {tid!r}: object {o!r} lies in {r!r}, which is not a receptacle of the task")
        if o.rsplit(" ", 1)[0] not in OBJECT_KINDS or not o.rsplit(" ", 1)[-1].isdigit():
            raise ValueError(f"task {tid!r}: unknown object {o!r}")
    target_object = str(task["target_object"])
    if target_object not in objects:
        raise ValueError(f"task {tid!r}: target_object {target_object!r} is not among the objects")
    if task["target"] not in TARGET_KINDS or not any(kind_of(r) == task["target"] for r in receptacles):
        raise ValueError(f"task {tid!r}: target {task['target']!r} has no receptacle in the layout")
    for needed in ("sinkbasin 1", "microwave 1", "fridge 1"):
        if needed not in receptacles:
            raise ValueError(f"task {tid!r}: layout lacks {needed!r}")
    opened = [str(r) for r in task["opened"]]
    for r in opened:
        if r not in receptacles or not is_openable(r):
            raise ValueError(f"task {tid!r}: opened lists {r!r}, which is not a container of the task")
    layout = Layout(receptacles=receptacles, objects=tuple(sorted(objects)), task_type=task["task_type"],
                    target_object=target_object, target_kind=str(task["target"]))
    return layout, WorldState.initial(objects, opened)
