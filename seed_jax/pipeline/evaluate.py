"""Evaluation (docs/METHOD.md §6): success per split and per task type, without skills, temperature 0.4.

Each split gives ``eval/<tag>_<split>.json`` in the schema `seed_jax.report` reads::

    {"stage_or_step": tag, "split": split,
     "results": {"overall": {"success_rate", "return", "score", "episode_length", "invalid_rate", "prompt_cut_rate", "n"},
                 "per_type": {task_type: {"success_rate", "n"}}}}

and ``eval/<tag>_<split>.trajectories.jsonl`` the episodes themselves (prompts, responses,
observations, rewards; `seed_jax.rollout.trajectory.read_trajectories`); ``eval/results.md``
gathers every result file as markdown tables, with the paper's aggregates of each evaluation
beside them (`seed_jax.pipeline.aggregates`: ALFWorld's macro average over task types and
success per game per split, Search's equal-weight mean over the QA sets, WebShop's score and
success over the test goals), also written to metrics.jsonl as ``eval/paper/<name>``. Skill-Prompt /
Skill-GRPO methods show their bank skills at inference (their definition); all others never do.
On several hosts each host evaluates its share of the tasks (`seed_jax.pipeline.multihost.host_rollouts`)
and host 0 writes the files of all of them. The eval stage rolls out in chunks that a preemption
keeps (`seed_jax.pipeline.chunked`): its relaunch rolls out only the tasks left.
"""

from __future__ import annotations

import json
from collections import defaultdict

import jax
import numpy as np

from seed_jax.pipeline.aggregates import format_aggregates, paper_aggregates
from seed_jax.pipeline.chunked import chunked_rollouts
from seed_jax.pipeline.run import Run
from seed_jax.pipeline.runtime import load_policy, make_pool, rollout_settings
from seed_jax.pipeline.skill_bank import SkillBank
from seed_jax.pipeline.stage1 import rollout_summary
from seed_jax.rollout.policy import Policy
from seed_jax.rollout.trajectory import write_trajectories


def summarize(trajs) -> dict:
    ok = [t for t in trajs if not t.env_error]
    per = defaultdict(list)
    for t in ok:
        per[t.info.get("task_type") or "all"].append(t.won)
    scores = [t.info["score"] for t in ok if "score" in t.info]
    shares = rollout_summary(trajs)
    overall = {k: shares[k] for k in ("success_rate", "return", "episode_length", "invalid_rate", "prompt_cut_rate")}
    overall.update(n=len(ok), env_errors=len(trajs) - len(ok))
    if scores:
        overall["score"] = float(np.mean(scores))
    return {"overall": overall,
            "per_type": {k: {"success_rate": float(np.mean(v)), "n": len(v)} for k, v in sorted(per.items())}}


def evaluate_params(run: Run, policy: Policy, tag: str, step: int, bank: SkillBank | None = None,
                    mesh=None, stage: str | None = None) -> dict:
    """Rollouts of ``policy`` at ``eval.temperature`` on every evaluation split; every host calls
    it together (each rolls out its share; host 0 writes the files). ``mesh``: the run's mesh
    (the phase record's plan); ``stage``: the run's stage, whose finished chunks of episodes a
    preemption keeps (`seed_jax.pipeline.chunked`; None: one chunk per split, nothing kept)."""
    c = run.config
    settings = rollout_settings(c, run.bench, temperature=c.eval.temperature, group_size=1)
    out = {}
    with make_pool(c, run.bench) as pool, policy.sampling(settings.sampler):
        if mesh is not None:
            run.phases("eval", policy.config, mesh, update=step)
        for split in run.bench.eval_splits:
            tasks = run.bench.tasks(split, limit=c.eval.num_tasks or None, seed=c.seed)
            task_skills = [bank.lookup(t) for t in tasks] if (bank is not None and run.switches.prompt_skills) else None
            trajs = chunked_rollouts(run, pool, policy, tasks, settings, seed=c.seed + 7_000_001,
                                     tag=f"eval_{split}/", task_skills=task_skills, stage=stage, name=f"{tag}_{split}")
            res = summarize(trajs)
            out[split] = res
            if jax.process_index() == 0:
                write_trajectories(run.path("eval", f"{tag}_{split}.trajectories.jsonl"), trajs)  # transcripts
                path = run.path("eval", f"{tag}_{split}.json")
                path.write_text(json.dumps({"stage_or_step": tag, "split": split, "results": res}, indent=1))
            run.metrics.write(step, {f"eval/{split}/success_rate": res["overall"]["success_rate"],
                                     "eval/success_rate": res["overall"]["success_rate"]})
    agg = paper_aggregates(c.env.name, out)
    if agg:
        run.metrics.write(step, agg, prefix="eval/paper")
    if jax.process_index() == 0:
        write_results_md(run)
    return out


def write_results_md(run: Run) -> None:
    lines = ["# Evaluation", "", "| model | split | success | return | score | n |", "|---|---|---|---|---|---|"]
    types = []
    by_model: dict[str, dict[str, dict]] = defaultdict(dict)
    for f in sorted((run.workdir / "eval").glob("*.json")):
        d = json.loads(f.read_text())
        by_model[str(d["stage_or_step"])][d.get("split", "")] = d["results"]
        o = d["results"]["overall"]
        score = f"{o['score']:.3f}" if "score" in o else "-"
        lines.append(f"| {d['stage_or_step']} | {d.get('split', '')} | {o['success_rate']:.3f} | "
                     f"{o['return']:.3f} | {score} | {o['n']} |")
        for k, v in d["results"].get("per_type", {}).items():
            types.append(f"| {d['stage_or_step']} | {d.get('split', '')} | {k} | {v['success_rate']:.3f} | {v['n']} |")
    if types:
        lines += ["", "Per task type:", "", "| model | split | type | success | n |", "|---|---|---|---|---|", *types]
    for model, results in by_model.items():
        table = format_aggregates(run.config.env.name, paper_aggregates(run.config.env.name, results))
        if table:
            lines += ["", f"The paper's aggregates, model {model} (seed_jax/pipeline/aggregates.py):", "", *table]
    run.path("eval", "results.md").write_text("\n".join(lines) + "\n")


def eval_stage(run: Run, mesh) -> dict:
    c = run.config
    src = c.eval.checkpoint or run.policy_dir()
    policy = load_policy(c, src, mesh=mesh)
    bank = SkillBank.for_run(run.workdir, run.bench) if run.switches.prompt_skills else None
    tag = "final" if not c.eval.checkpoint else "checkpoint"
    res = evaluate_params(run, policy, tag=tag, step=c.rl.num_updates if run.switches.train else 0, bank=bank,
                          mesh=mesh, stage="eval")
    agg = paper_aggregates(c.env.name, res)
    return {**{split: r["overall"] for split, r in res.items()}, **({"paper": agg} if agg else {})}
