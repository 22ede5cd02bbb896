"""The skill audit: do the OPD gates favour the expert's actions?

Inputs of one RL run directory:

- ``step_gates.jsonl`` (written by `seed_jax.pipeline.rl`): one row per step-sample that had a
  skill, ``{update, traj_id, step, gate_mean, gate_gt_half, n_tokens, delta_mean}``; the gate
  is ``g = sigmoid(beta * Delta)`` with ``Delta = l_skill - l_ord`` per response token under
  theta_old, ``gate_mean`` its token mean over the step's response, ``gate_gt_half`` the share
  of its tokens with ``g > 0.5`` and ``delta_mean`` the token mean of Delta (absent in runs
  recorded before it was: their rows are left out of the Delta audit);
- the sampled commands and outcome of every RL trajectory: ``rl/step_actions.jsonl``
  (``{traj_id, task_id, won, actions}``, written by the RL callback
  `experiments.household.experiment.step_recorder`).

A step is *expert-consistent* iff its command is one of the exact expert's optimal commands
at the state where it was taken (`envs.household.replay`, which re-runs the episode from
the task dict); an invalid response ('' command) is inconsistent.

Summary of a set S of joined rows, token-weighted (w = n_tokens):

    mean_gate(S)  = sum_S w * gate_mean    / sum_S w
    share_gt(S)   = sum_S w * gate_gt_half / sum_S w

reported separately for consistent and inconsistent rows, per window of updates.

Delta audit (`delta_audit`): over the step-samples with a ``delta_mean``, the Pearson
correlation of Delta with (a) the step being expert-consistent and (b) its trajectory's
outcome (won = 1), each a point-biserial correlation,

    r(x, y) = sum_i (x_i - mean x)(y_i - mean y) / sqrt(sum_i (x_i - mean x)^2 sum_i (y_i - mean y)^2),

the mean Delta of each class, and histograms of the step gate per class (fixed bins) for the
gate plot. A skill that is right for the trajectory should give r > 0 in (a).

Group outcomes (`group_outcomes`): a GRPO group is the rollouts of one task in one update
(trajectory ids ``u<k>/<task>#<i>`` sharing ``u<k>/<task>``); a group whose rollouts all fail
(or all win) has zero advantage on every row, so GRPO gets no signal from it while OPD still
weights its tokens. Reported per update: groups, all-fail groups, all-win groups.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np

from seed_jax.envs.household import EpisodeRecord, replay, start_place_seen
from seed_jax.jsonl import read_jsonl
from seed_jax.metrics import SKILLS_FILE
from seed_jax.rollout.trajectory import iter_trajectories
from seed_jax.skills import parse_skill, read_skill_records

GATE_FILE = "step_gates.jsonl"
STEP_ACTIONS_FILE = "rl/step_actions.jsonl"


GATE_BINS = 20  # histogram bins of the step gate over [0, 1]


def read_step_actions(workdir: str | Path) -> dict[str, dict]:
    """traj_id -> {'task_id', 'actions', 'won'} of the RL stage's trajectories ({} when none
    were recorded; 'won' None in records without it)."""
    path = Path(workdir) / STEP_ACTIONS_FILE
    if not path.exists():
        return {}
    return {d["traj_id"]: {"task_id": d["task_id"], "actions": list(d["actions"]), "won": d.get("won")}
            for d in read_jsonl(path)}


def names_start_place(skill: str | None, task: dict) -> bool:
    """The skill names the receptacle the task object starts in ('fridge 1'), as whole words."""
    place = task["objects"][task["target_object"]]
    return bool(skill) and re.search(rf"\b{re.escape(place)}\b", skill) is not None


def skill_accuracy_by_update(workdir: str | Path, tasks_by_id: Mapping[str, dict],
                             actions: Mapping[str, dict] | None = None) -> dict[int, dict]:
    """update -> {'skills', 'parsed', 'names_place', 'seen', 'seen_names_place'} over the RL
    stage's skills (``skills.jsonl``: one row per trajectory, ``{update, traj_id, task_id,
    parse_ok, skill, summary}``; rows without a skill or summary, as GRPO logs them, are no
    analysis and left out): how many were written, parsed, and name the task object's start place
    (`names_start_place`): the analyzer-accuracy measure (an expert skill names it). With the
    run's sampled commands (``actions``, `read_step_actions`): ``seen`` counts the skills whose
    episode showed that place (`envs.household.start_place_seen`) and ``seen_names_place`` those
    of them that name it, the analyzer's reading accuracy (a skill about an episode that never
    showed the place can only guess it); both 0 without ``actions``."""
    path = Path(workdir) / SKILLS_FILE
    out: dict[int, dict] = {}
    if not path.exists():
        return out
    actions = actions or {}
    for r in read_jsonl(path):
        task = tasks_by_id.get(r.get("task_id"))
        if task is None or not (r.get("skill") or r.get("summary")):
            continue  # no analysis written (an arm without skills logs empty rows)
        acc = out.setdefault(int(r["update"]), {"skills": 0, "parsed": 0, "names_place": 0, "seen": 0,
                                                "seen_names_place": 0})
        named = bool(r.get("parse_ok")) and names_start_place(r.get("skill"), task)
        acc["skills"] += 1
        acc["parsed"] += bool(r.get("parse_ok"))
        acc["names_place"] += named
        episode = actions.get(r.get("traj_id"))
        if episode is not None and start_place_seen(task, episode["actions"]):
            acc["seen"] += 1
            acc["seen_names_place"] += named
    return dict(sorted(out.items()))


def analyzer_accuracy(run_dir: str | Path, tasks_by_id: Mapping[str, dict]) -> dict:
    """The analyzer accuracy of a checkpoint, from a stage-1 run whose analyzer was the checkpoint
    itself (``stage1.analyzer = self``; `bench/household_analyzer.py`): over the collected
    trajectories (``stage1/trajectories.jsonl``, env errors left out) and the skill records
    written for them (``stage1/sft.jsonl`` and ``sft_heldout.jsonl``; a trajectory whose skill
    did not parse has none), ``{'all' | 'won' | 'lost': {'trajectories', 'parsed',
    'names_place'}}``: how many trajectories, how many got a parsed skill, and how many a skill
    that names the task object's start place (`names_start_place`); and the reference a
    skill must beat, ``'constant_guess': {'place', 'names_place'}``: the start place most of
    these episodes share, and in how many it is right (a skill that names it every time is that
    accurate without reading the episode). ``'seen' | 'unseen'`` split ``all`` by whether the
    episode showed the start place (`envs.household.start_place_seen`): on ``seen`` the skill
    can copy it (reading accuracy), on ``unseen`` only guess. Trajectories of tasks missing from
    ``tasks_by_id`` are left out."""
    run_dir = Path(run_dir)
    skills: dict[str, str] = {}
    for name in ("sft.jsonl", "sft_heldout.jsonl"):
        path = run_dir / "stage1" / name
        if path.exists():
            skills.update({r.traj_id: parse_skill(r.answer).skill for r in read_skill_records(path)})
    out: dict = {k: {"trajectories": 0, "parsed": 0, "names_place": 0} for k in ("all", "won", "lost", "seen", "unseen")}
    places: dict[str, int] = {}
    for t in iter_trajectories(run_dir / "stage1" / "trajectories.jsonl"):
        task = tasks_by_id.get(t.task_id)
        if t.env_error or not t.steps or task is None:
            continue
        place = task["objects"][task["target_object"]]
        places[place] = places.get(place, 0) + 1
        skill = skills.get(t.traj_id)
        seen = start_place_seen(task, EpisodeRecord.from_trajectory(t, task).actions)
        for key in ("all", "won" if t.won else "lost", "seen" if seen else "unseen"):
            out[key]["trajectories"] += 1
            out[key]["parsed"] += skill is not None
            out[key]["names_place"] += skill is not None and names_start_place(skill, task)
    top = max(sorted(places), key=places.get) if places else None
    out["constant_guess"] = {"place": top, "names_place": places.get(top, 0)}
    return out


def pearson(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """r(x, y) of the module docstring; None under 2 pairs or when either has no variance."""
    x, y = (np.asarray(v, np.float64) for v in (xs, ys))
    if x.size < 2 or x.size != y.size:
        return None
    dx, dy = x - x.mean(), y - y.mean()
    den = math.sqrt(float((dx * dx).sum() * (dy * dy).sum()))
    return float((dx * dy).sum()) / den if den > 0 else None


def step_consistency(task: dict, actions: Sequence[str]) -> list[bool]:
    """Per step: was the command one of the expert's optimal commands at that state?"""
    audits, _, _ = replay(task, list(actions))
    return [a.consistent for a in audits]


def update_of(traj_id: str) -> int | None:
    """The RL update of a trajectory id ``u<k>/<task>#<i>`` (None for other ids)."""
    head = traj_id.split("/", 1)[0]
    return int(head[1:]) if head.startswith("u") and head[1:].isdigit() else None


def consistency_by_update(step_actions: Mapping[str, Mapping],
                          tasks_by_id: Mapping[str, dict]) -> dict[int, dict]:
    """update -> {'consistent': c, 'steps': n}: how many of the n sampled commands of that
    update's rollouts (every step of every trajectory, with or without a skill; invalid
    responses count as inconsistent) were optimal commands of the expert at their state.
    The share c / n is a learning measure that needs no evaluation run and exists for every
    arm, GRPO included."""
    out: dict[int, dict] = {}
    for tid, rec in step_actions.items():
        u = update_of(tid)
        task = tasks_by_id.get(rec["task_id"])
        if u is None or task is None:
            continue
        flags = step_consistency(task, rec["actions"])
        acc = out.setdefault(u, {"consistent": 0, "steps": 0})
        acc["consistent"] += sum(flags)
        acc["steps"] += len(flags)
    return dict(sorted(out.items()))


def join_gates(gate_rows: Iterable[Mapping], step_actions: Mapping[str, Mapping],
               tasks_by_id: Mapping[str, dict]) -> list[dict]:
    """Gate rows with ``consistent`` added; rows whose trajectory or step is unknown are dropped."""
    cache: dict[str, list[bool]] = {}
    out = []
    for r in gate_rows:
        tid = r["traj_id"]
        rec = step_actions.get(tid)
        if rec is None or rec["task_id"] not in tasks_by_id:
            continue
        if tid not in cache:
            cache[tid] = step_consistency(tasks_by_id[rec["task_id"]], rec["actions"])
        flags = cache[tid]
        k = int(r["step"])
        if not 0 <= k < len(flags):
            continue
        out.append({**r, "consistent": bool(flags[k]), "won": rec.get("won")})
    return out


def _stats(rows: Sequence[Mapping]) -> dict:
    w = sum(float(r["n_tokens"]) for r in rows)
    if w <= 0:
        return {"rows": len(rows), "tokens": 0, "gate_mean": None, "gate_gt_half": None}
    return {"rows": len(rows), "tokens": int(w),
            "gate_mean": sum(float(r["n_tokens"]) * float(r["gate_mean"]) for r in rows) / w,
            "gate_gt_half": sum(float(r["n_tokens"]) * float(r["gate_gt_half"]) for r in rows) / w}


def summarize(joined: Sequence[Mapping], num_updates: int, windows: int = 3) -> dict:
    """{'all': {...}, 'w1'..'wK': {...}} each {'consistent': stats, 'inconsistent': stats,
    'updates': [first, last]}; updates are numbered 1..U (`seed_jax.pipeline.rl`), window k
    (0-based) covers updates [1 + k*U/K, 1 + (k+1)*U/K)."""
    out = {}
    bounds = [1 + round(k * num_updates / windows) for k in range(windows + 1)]
    spans = {"all": (1, 1 + max(num_updates, 1))}
    spans.update({f"w{k + 1}": (bounds[k], bounds[k + 1]) for k in range(windows)})
    for name, (lo, hi) in spans.items():
        sel = [r for r in joined if lo <= int(r["update"]) < hi]
        out[name] = {"updates": [lo, hi - 1],
                     "consistent": _stats([r for r in sel if r["consistent"]]),
                     "inconsistent": _stats([r for r in sel if not r["consistent"]])}
    return out


def per_update(joined: Sequence[Mapping]) -> dict[int, dict]:
    """update -> {'consistent': stats, 'inconsistent': stats} (for the curves)."""
    ups = sorted({int(r["update"]) for r in joined})
    return {u: {"consistent": _stats([r for r in joined if int(r["update"]) == u and r["consistent"]]),
                "inconsistent": _stats([r for r in joined if int(r["update"]) == u and not r["consistent"]])}
            for u in ups}


def _mean(xs: Sequence[float]) -> float | None:
    return float(np.mean(xs)) if len(xs) else None


def delta_audit(joined: Sequence[Mapping]) -> dict:
    """The Delta audit of the module docstring over the joined rows that carry ``delta_mean``
    (the gate histograms over all joined rows):
    ``{'steps', 'r_expert', 'r_outcome', 'delta_consistent', 'delta_inconsistent', 'delta_won',
    'delta_lost', 'gate_hist': {'consistent': counts, 'inconsistent': counts}}`` (``r_outcome``
    over the rows whose trajectory outcome is known)."""
    rows = [r for r in joined if r.get("delta_mean") is not None]
    delta = [float(r["delta_mean"]) for r in rows]
    known = [r for r in rows if r.get("won") is not None]
    edges = np.linspace(0.0, 1.0, GATE_BINS + 1)

    def hist(kind: bool) -> list[int]:  # over every joined row: gates were recorded before Deltas were
        return np.histogram([float(r["gate_mean"]) for r in joined if r["consistent"] == kind], edges)[0].tolist()

    return {"steps": len(rows),
            "r_expert": pearson(delta, [float(r["consistent"]) for r in rows]),
            "r_outcome": pearson([float(r["delta_mean"]) for r in known], [float(bool(r["won"])) for r in known]),
            "delta_consistent": _mean([float(r["delta_mean"]) for r in rows if r["consistent"]]),
            "delta_inconsistent": _mean([float(r["delta_mean"]) for r in rows if not r["consistent"]]),
            "delta_won": _mean([float(r["delta_mean"]) for r in known if r["won"]]),
            "delta_lost": _mean([float(r["delta_mean"]) for r in known if not r["won"]]),
            "gate_hist": {"consistent": hist(True), "inconsistent": hist(False)}}


def group_outcomes(step_actions: Mapping[str, Mapping]) -> dict[int, dict]:
    """update -> {'groups', 'all_fail', 'all_win'} over the GRPO groups of the module docstring
    (trajectories without a recorded outcome are left out)."""
    groups: dict[tuple[int, str], list[bool]] = {}
    for tid, rec in step_actions.items():
        u = update_of(tid)
        if u is None or rec.get("won") is None:
            continue
        groups.setdefault((u, tid.split("#", 1)[0]), []).append(bool(rec["won"]))
    out: dict[int, dict] = {}
    for (u, _), wins in sorted(groups.items()):
        acc = out.setdefault(u, {"groups": 0, "all_fail": 0, "all_win": 0})
        acc["groups"] += 1
        acc["all_fail"] += not any(wins)
        acc["all_win"] += all(wins)
    return out


def audit_run(workdir: str | Path, tasks_by_id: Mapping[str, dict], num_updates: int,
              actions: Mapping[str, Mapping] | None = None) -> dict | None:
    """The audit of one RL run directory; None when it has no gate rows (e.g. GRPO).
    ``actions``: the run's `read_step_actions` when the caller has read them already."""
    workdir = Path(workdir)
    gates_path = workdir / GATE_FILE
    if not gates_path.exists():
        return None
    gates = read_jsonl(gates_path)
    actions = read_step_actions(workdir) if actions is None else actions
    joined = join_gates(gates, actions, tasks_by_id)
    return {"gate_rows": len(gates), "joined_rows": len(joined), "summary": summarize(joined, num_updates),
            "per_update": per_update(joined), "delta": delta_audit(joined)}
