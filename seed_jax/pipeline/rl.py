"""Stage 2 (spec section 3): self-evolving on-policy distillation, one update at a time.

Per update ``u`` (everything seeded by ``(config.seed, u)``, so a resumed run repeats exactly):

1. tasks: a seeded sample of ``rl.tasks_per_update`` training tasks (each host takes its share);
2. rollouts with the current parameters (temperature ``rollout.temperature``), N per task;
3. analysis: the same parameters write one greedy skill per trajectory (``online``), or skills
   come from the stage-1 bank (``static``), or none (GRPO-type methods);
4. batch: step-samples with teacher twins ``H(h_t, s_tau)``; ``old_logp`` from the current
   parameters and ``ref_logp`` from the frozen reference (the RL start), in jitted passes;
5. PPO epochs over shuffled mini-batches of ``rl.mini_batch_size`` step-samples, one
   optimizer step each (`seed_jax.train.step`);
6. metrics / skills.jsonl / checkpoint every ``rl.checkpoint_every`` updates.

For the skill audit the per-token gate ``sigmoid(beta * (l_skill - l_ord))`` is recorded per
trajectory with both log-probs from the parameters that start the update (``theta_old``).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import random
import time
from typing import Callable, Sequence

import jax
import numpy as np

from seed_jax.metrics import GateSummary, SkillRecord as SkillLogRecord, StageProgress, Timer
from seed_jax.pipeline.multihost import common_max, host_local_params, is_multihost, repad, to_global
from seed_jax.pipeline.run import Run
from seed_jax.pipeline.runtime import load_policy, make_pool, rollout_settings, save_policy, train_config
from seed_jax.pipeline.skill_bank import SkillBank
from seed_jax.pipeline.stage1 import rollout_summary
from seed_jax.rollout.analyzer import analyze_trajectories
from seed_jax.rollout.batch import build_batch
from seed_jax.rollout.loop import make_prompt_encoder, run_rollouts
from seed_jax.train.checkpoint import Checkpointer
from seed_jax.train.logprobs import compute_logprobs
from seed_jax.train.mesh import batch_divisor
from seed_jax.train.state import create_sharded_state
from seed_jax.train.step import make_train_step

log = logging.getLogger("seed_jax")

METRIC_NAMES = {"opd_gate_mean": "gate_mean", "opd_gate_gt_half": "gate_gt_half",
                "opd_teacher_gap": "teacher_gap", "opd_active_share": "active_share"}


@dataclasses.dataclass(frozen=True)
class UpdateRecord:
    """What one RL update produced, handed to every callback of `rl` after the update.

    ``trajectories``: this host's rollouts; ``skills``: traj_id -> the skill used for OPD (None:
    no skill); ``parses``: traj_id -> the self-analysis parse (empty when the policy wrote no
    skills); ``gates``: traj_id -> gate summary under theta_old (audit); ``metrics``: the
    update's row of metrics.jsonl.
    """

    update: int
    trajectories: list
    skills: dict
    parses: dict
    gates: dict
    metrics: dict


RLCallback = Callable[[UpdateRecord], None]


def update_tasks(run: Run, u: int) -> list[dict]:
    c = run.config
    pool = run.bench.tasks(run.bench.train_split)
    rng = random.Random(f"{c.seed}:update:{u}")
    tasks = [pool[i] for i in rng.sample(range(len(pool)), min(c.rl.tasks_per_update, len(pool)))]
    n, i = jax.process_count(), jax.process_index()
    return tasks[i::n]


def shuffle_skills(skills: dict, seed: int, u: int) -> dict:
    """Control: move every parsed skill to another trajectory (seeded permutation, no fixed point
    when there are two or more skills); trajectories without a skill keep none."""
    ids = [k for k, v in skills.items() if v]
    if len(ids) < 2:
        return {k: None for k in skills}
    order = ids[:]
    random.Random(f"{seed}:shuffle:{u}").shuffle(order)
    shifted = order[1:] + order[:1]  # a cyclic shift of a random order: a derangement
    out = {k: None for k in skills}
    for src, dst in zip(order, shifted):
        out[dst] = skills[src]
    return out


def rl_start_dir(run: Run):
    return run.workdir / "sft" / "model" if run.switches.sft else None


def rl(run: Run, mesh, callbacks: Sequence[RLCallback] = ()) -> dict:
    c = run.config
    if not run.switches.train or c.rl.num_updates == 0:
        return {"skipped": f"method {c.method} trains no policy" if not run.switches.train else "num_updates = 0"}
    model, tok = load_policy(c, rl_start_dir(run))
    cfg = model.config
    tc = train_config(c)
    ref_params = model.params  # the frozen KL reference: the RL start (stage-1 checkpoint)
    encode = make_prompt_encoder(tok)
    settings = rollout_settings(c, run.bench)
    thr = run.bench.spec.success_threshold
    bank = None
    if run.switches.skill_source == "static" or run.switches.prompt_skills:
        bank = SkillBank.from_file(run.workdir / "stage1" / "sft.jsonl",
                                   {t["task_id"]: t.get("task_type", "") for t in run.bench.tasks(run.bench.train_split)})
    state = create_sharded_state(model.params, tc, mesh, rng=c.seed)
    ckpt = Checkpointer(run.workdir / "rl" / "ckpt", max_to_keep=c.rl.keep_checkpoints)
    start = 0
    restored = ckpt.restore_latest(state)
    if restored is not None:
        state, host, step = restored
        start = int(host["update"]) + 1
        log.info("RL: resumed from checkpoint %d (next update %d)", step, start)
    train_step = make_train_step(cfg, tc, mesh)
    micro = c.train.micro_batch_size
    div = batch_divisor(mesh)
    if micro % div:
        raise ValueError(f"config.train.micro_batch_size ({micro}) must be a multiple of the data x fsdp mesh "
                         f"size ({div})")
    bar = StageProgress(c.rl.num_updates, "RL updates", unit="update", initial=start)
    last = {}
    with make_pool(c, run.bench) as pool:
        for u in range(start, c.rl.num_updates):
            timer = Timer()
            t0 = time.perf_counter()
            tasks = update_tasks(run, u)
            task_skills = [bank.lookup(t) for t in tasks] if run.switches.prompt_skills else None
            local = host_local_params(state.params)
            with timer("rollout"):
                trajs = run_rollouts(pool, model, tok, tasks, settings, params=local,
                                     seed=c.seed * 1_000_003 + u * 1000, tag=f"u{u}/", encode_prompt=encode,
                                     task_skills=task_skills)
            parses = {}
            with timer("analysis"):
                if run.switches.skill_source in ("online", "shuffled") and c.analysis.analyzer == "heuristic":
                    from seed_jax.pipeline.heuristic_annotator import heuristic_annotator

                    parses, _ = heuristic_annotator([t for t in trajs if not t.env_error and t.steps], thr, 0)
                    skills = {k: (p.skill if p.ok else None) for k, p in parses.items()}
                elif run.switches.skill_source in ("online", "shuffled"):
                    parses, _ = analyze_trajectories(
                        model, tok, trajs, params=local, encode_prompt=encode, success_threshold=thr,
                        max_new_tokens=c.analysis.max_new_tokens, max_prompt_tokens=c.analysis.max_prompt_tokens,
                        batch_size=c.analysis.batch_size)
                    skills = {k: (p.skill if p.ok else None) for k, p in parses.items()}
                elif run.switches.skill_source == "static":
                    by_task = {t["task_id"]: bank.lookup(t) for t in tasks}
                    skills = {t.traj_id: by_task.get(t.task_id) for t in trajs}
                else:
                    skills = {}
                if run.switches.skill_source == "shuffled":
                    skills = shuffle_skills(skills, c.seed, u)
            with timer("train"):
                metrics, gates = train_on(run, state, local, train_step, cfg, tc, trajs, skills, encode, tok,
                                          ref_params, u, mesh)
                state = metrics.pop("_state")
                jax.block_until_ready(state.params)
            roll = rollout_summary(trajs)
            out = {f"rollout/{k}": v for k, v in roll.items()}
            if parses:
                out["analysis/parse_rate"] = sum(p.ok for p in parses.values()) / max(len(parses), 1)
            out.update({f"train/{METRIC_NAMES.get(k, k)}": v for k, v in metrics.items()})
            out.update(timer.metrics(prefix="time"))
            n_tok = sum(len(s.response_ids) for t in trajs for s in t.steps)
            out["perf/tokens_per_s"] = n_tok / max(time.perf_counter() - t0, 1e-9)
            run.metrics.write(u, out)
            run.skill_log.write([
                SkillLogRecord(update=u, traj_id=t.traj_id, task_id=t.task_id, success=t.won,
                               parse_ok=bool(skills.get(t.traj_id)), skill=skills.get(t.traj_id) or "",
                               summary=parses[t.traj_id].summary if t.traj_id in parses else "",
                               gate=gates.get(t.traj_id))
                for t in trajs if not t.env_error])
            record = UpdateRecord(u, trajs, skills, parses, gates, out)
            for callback in callbacks:
                callback(record)
            if (u + 1) % c.rl.checkpoint_every == 0 or u + 1 == c.rl.num_updates:
                ckpt.save(u, state, {"update": u})
            if c.rl.eval_every and (u + 1) % c.rl.eval_every == 0 and u + 1 < c.rl.num_updates:
                from seed_jax.pipeline.evaluate import evaluate_params

                evaluate_params(run, model, tok, state.params, tag=f"rl_{u + 1:06d}", step=u + 1, bank=bank)
            bar.update(1, success=f"{roll['success_rate']:.2f}", loss=f"{metrics.get('loss', float('nan')):.3f}")
            last = out
    bar.close()
    ckpt.close()
    final = type(model)(cfg, jax.device_get(host_local_params(state.params)), "rl")
    if jax.process_index() == 0:
        save_policy(final, tok, run.workdir / "rl" / "final_model")
    return {k: float(v) for k, v in last.items()}


def train_on(run: Run, state, local_params, train_step, cfg, tc, trajs, skills, encode, tok, ref_params, u: int,
             mesh=None):
    """PPO epochs over mini-batches of one update's step-samples -> (mean metrics + '_state', gates).

    ``local_params`` are theta_old as host-local arrays (for the log-prob passes); on several
    hosts each contributes its own rows (after padding to common shapes) to every mini-batch.
    """
    c = run.config
    micro = c.train.micro_batch_size
    batch = build_batch(trajs, skills, encode, pad_id=tok.pad_token_id or 0,
                        max_prompt_tokens=c.rollout.max_prompt_tokens,
                        max_response_tokens=c.rollout.max_response_tokens, advantage_mode=c.rl.advantage_mode,
                        with_teacher=tc.use_teacher or run.switches.skill_source != "none", row_multiple=micro)
    a = batch.arrays
    P, Pt, R = batch.prompt_len, batch.teacher_prompt_len, batch.response_len
    old = local_params
    a["old_logp"] = compute_logprobs(old, cfg, a["student_ids"], a["student_mask"], P, R, micro)
    if tc.c_kl > 0:
        a["ref_logp"] = compute_logprobs(ref_params, cfg, a["student_ids"], a["student_mask"], P, R, micro)
    gates = {}
    if "teacher_ids" in a and a["has_skill"].any() and (c.rl.audit_gates or tc.teacher_from_old):
        teacher_old = compute_logprobs(old, cfg, a["teacher_ids"], a["teacher_mask"], Pt, R, micro)
        if tc.teacher_from_old:
            a["teacher_logp"] = teacher_old
        g = 1.0 / (1.0 + np.exp(-tc.beta_opd * (teacher_old - a["old_logp"])))
        per_traj: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
        for i, row in enumerate(batch.rows):
            if row.has_skill:
                per_traj.setdefault(row.traj_id, []).append((g[i], a["response_mask"][i]))
        for tid, parts in per_traj.items():
            gates[tid] = GateSummary.from_arrays(np.concatenate([p[0] for p in parts]),
                                                 np.concatenate([p[1] for p in parts]))
        if jax.process_index() == 0:
            with open(run.path("step_gates.jsonl"), "a", encoding="utf-8") as f:
                for i, row in enumerate(batch.rows):
                    if row.has_skill:
                        m = a["response_mask"][i] > 0
                        f.write(json.dumps({"update": u, "traj_id": row.traj_id, "step": row.step_index,
                                            "gate_mean": float(g[i][m].mean()), "gate_gt_half": float((g[i][m] > 0.5).mean()),
                                            "n_tokens": int(m.sum())}) + "\n")
    if not tc.use_teacher:
        a.pop("teacher_ids", None)
        a.pop("teacher_mask", None)
    n = a["student_ids"].shape[0]
    if is_multihost():
        n, P2, Pt2, R2 = common_max(n, P, Pt, R)
        a = repad(a, P, Pt, R, P2, Pt2, R2, n)
        P, Pt, R = P2, Pt2, R2
    M = min(c.rl.mini_batch_size // jax.process_count(), n)
    M = -(-M // micro) * micro
    n_mini = -(-n // M)
    total = n_mini * M
    if total > n:  # pad with fully masked rows so every mini-batch has the same static shape
        a = {k: np.concatenate([v, np.zeros((total - n,) + v.shape[1:], v.dtype)]) for k, v in a.items()}
    sums: dict[str, float] = {}
    count = 0
    for epoch in range(c.rl.epochs):
        perm = np.random.default_rng([c.seed, u, epoch]).permutation(total)
        for k in range(n_mini):
            idx = np.sort(perm[k * M:(k + 1) * M])
            mb = {key: v[idx] for key, v in a.items()}
            if not is_multihost() and not mb["response_mask"].any():
                continue
            state, m = train_step(state, to_global(mb, mesh))
            for key, v in jax.device_get(m).items():
                sums[key] = sums.get(key, 0.0) + float(v)
            count += 1
    metrics = {k: v / max(count, 1) for k, v in sums.items()}
    metrics["optimizer_steps"] = float(count)
    metrics["_state"] = state
    return metrics, gates
