"""Stage 2 (SEED, docs/METHOD.md §3): self-evolving on-policy distillation, one
update at a time.

Update numbering: updates are counted from 1 everywhere a person reads them: update ``n`` of
``N`` (``n = u + 1`` for the loop index ``u = 0 .. N-1``) is the log line "RL update n/N", step
``n`` of metrics.jsonl (x = n on every plot), the ``update`` field of skills.jsonl,
step_gates.jsonl and rl/transcripts.jsonl, the trajectory ids ``u<n>/...``, and checkpoint
``rl/ckpt/<n>`` (it holds the parameters after updates 1..n; the learning-rate schedule and the
seeds below use ``u``, the updates made before). A resumed run first drops the metrics rows of the
updates it will redo (`forget_redone_updates`), so no update has two rows.

Per update ``u`` (everything seeded by ``(config.seed, u)``, so a resumed run repeats exactly):

1. tasks: a seeded sample of ``rl.tasks_per_update`` training tasks (each host takes its share);
2. rollouts with the current parameters theta_old (temperature ``rollout.temperature``), N per task;
3. skills: the method's analyzer (`seed_jax.pipeline.analyzers.rl_analyzer`): the policy writes
   one greedy skill per trajectory with theta_old, or the stage-1 bank, or shuffled skills, or none;
4. batch: `seed_jax.pipeline.update_batch.build_update_batch` (step-samples, teacher twins
   ``H(h_t, s_tau)``, old / ref / teacher log-probs, the gate audit);
5. PPO epochs over mini-batches of ``rl.mini_batch_size`` step-samples, one optimizer step
   each (`seed_jax.pipeline.ppo.ppo_epochs`);
6. an `UpdateRecord` for every callback: the run's own writers (metrics.jsonl + TensorBoard,
   skills.jsonl, step_gates.jsonl, rl/transcripts.jsonl) come first, then the caller's; then the checkpoint every
   ``rl.checkpoint_every`` updates and the in-training evaluation every ``rl.eval_every``;
7. one plain log line (`update_log_line`: success, return, OPD gate, KL, entropy, time split, ETA).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import random
from collections.abc import Callable, Sequence

import jax

from seed_jax.jsonl import append_jsonl, repair_torn_tail
from seed_jax.metrics import (
    TRANSCRIPTS_FILE,
    GateSummary,
    SkillLogEntry,
    StageProgress,
    Timer,
    sample_transcripts,
    transcript_json,
)
from seed_jax.pipeline.analyzers import AnalysisContext, Analyzer, rl_analyzer
from seed_jax.pipeline.evaluate import evaluate_params
from seed_jax.pipeline.multihost import host_rollouts
from seed_jax.pipeline.ppo import ppo_epochs
from seed_jax.pipeline.run import Run
from seed_jax.pipeline.runtime import (
    compilation_cache_on,
    drop_compiled,
    load_policy,
    make_pool,
    rollout_settings,
    save_policy,
    train_config,
)
from seed_jax.pipeline.skill_bank import SkillBank
from seed_jax.pipeline.stage1 import rollout_summary
from seed_jax.pipeline.update_batch import StepGate, build_update_batch
from seed_jax.procmem import release_free_memory
from seed_jax.rollout.batch import BatchSettings
from seed_jax.rollout.trajectory import Trajectory
from seed_jax.skills import SkillParse
from seed_jax.train.checkpoint import Checkpointer
from seed_jax.train.logprobs import scoring_params
from seed_jax.train.preemption import Preempted, preemption_requested
from seed_jax.train.state import at_schedule_pos, create_sharded_state
from seed_jax.train.step import make_train_step
from seed_jax.watchdog import beat

log = logging.getLogger("seed_jax")

# step metric -> metrics.jsonl key under train/ (the OPD gate statistics drop their prefix)
METRIC_NAMES = {"opd_gate_mean": "gate_mean", "opd_gate_gt_half": "gate_gt_half",
                "opd_teacher_gap": "teacher_gap", "opd_active_share": "active_share"}


@dataclasses.dataclass(frozen=True)
class UpdateRecord:
    """What one RL update produced, handed to every callback of `rl` after the update.

    ``trajectories``: this host's rollouts; ``skills``: traj_id -> the skill used for OPD (None:
    no skill); ``parses``: traj_id -> the analyzer's parse (empty when it wrote none);
    ``gates``: traj_id -> gate summary under theta_old and ``step_gates`` the same per
    step-sample (the skill audit; empty when not taken); ``metrics``: the update's row of
    metrics.jsonl; ``update``: the update's number, 1-based (module docstring).
    """

    update: int
    trajectories: list[Trajectory]
    skills: dict[str, str | None]
    parses: dict[str, SkillParse]
    gates: dict[str, GateSummary]
    metrics: dict[str, float]
    step_gates: list[StepGate] = dataclasses.field(default_factory=list)


RLCallback = Callable[[UpdateRecord], None]


def update_tasks(run: Run, u: int) -> list[dict]:
    """Update ``u``'s training tasks (all hosts': each rolls out its `host_share`)."""
    c = run.config
    pool = run.bench.tasks(run.bench.train_split)
    rng = random.Random(f"{c.seed}:update:{u}")
    return [pool[i] for i in rng.sample(range(len(pool)), min(c.rl.tasks_per_update, len(pool)))]


def rl_start_dir(run: Run):
    return run.workdir / "sft" / "model" if run.switches.sft else None


# ------------------------------------------------------------------------- the run's writers


def metrics_writer(run: Run) -> RLCallback:
    """metrics.jsonl + TensorBoard: one row per update, at step = the update's number (1-based)."""
    return lambda rec: run.metrics.write(rec.update, rec.metrics)


UPDATE_ROW_KEY = "rollout/success_rate"  # every RL update's row has it; no other row of metrics.jsonl does


def forget_redone_updates(metrics, done: int) -> int:
    """Before a resumed RL stage redoes updates ``done + 1 ..``: drop their rows that an earlier
    launch wrote to metrics.jsonl after its last checkpoint (`seed_jax.metrics.MetricsWriter.drop`),
    and the rows of the in-training evaluations made after it, so that each update has one row.
    Other rows (stage 1, SFT, earlier evaluations, events) stay. Returns the rows dropped."""
    return metrics.drop(lambda r: r["step"] > done and (UPDATE_ROW_KEY in r or any(k.startswith("eval/") for k in r)))


def skill_log_writer(run: Run) -> RLCallback:
    """skills.jsonl: one entry per analysed trajectory (skill, parse, gate)."""

    def write(rec: UpdateRecord) -> None:
        run.skill_log.write([
            SkillLogEntry(update=rec.update, traj_id=t.traj_id, task_id=t.task_id, success=t.won,
                          parse_ok=bool(rec.skills.get(t.traj_id)), skill=rec.skills.get(t.traj_id) or "",
                          summary=rec.parses[t.traj_id].summary if t.traj_id in rec.parses else "",
                          gate=rec.gates.get(t.traj_id))
            for t in rec.trajectories if not t.env_error])

    return write


def update_log_line(rec: UpdateRecord, total: int, eta_s: float | None) -> str:
    """One plain log line per RL update (readable in a log file, no terminal needed)::

        RL update 3/10: success 0.25 return 0.12 invalid 0.30 | OPD gate 0.45 active 0.60 | KL 0.0012
        entropy 1.23 | time rollout 31s analysis 20s batch 9s train 40s | ETA 5m12s

    A figure the update did not produce (no OPD for GRPO, no KL when ``c_kl = 0``) is left out.
    """
    m = rec.metrics
    parts = [f"RL update {rec.update}/{total}:"]
    parts += [f"{name} {m[key]:.2f}" for name, key in (
        ("success", "rollout/success_rate"), ("return", "rollout/return"), ("invalid", "rollout/invalid_rate"))
        if key in m]
    if "analysis/parse_rate" in m:
        parts.append(f"skills parsed {m['analysis/parse_rate']:.2f}")
    if "train/gate_mean" in m:
        parts.append(f"| OPD gate {m['train/gate_mean']:.2f} active {m.get('train/active_share', float('nan')):.2f}")
    parts.append("|")
    parts += [f"{name} {m[key]:.4g}" for name, key in (("KL", "train/kl"), ("entropy", "train/entropy"),
                                                         ("loss", "train/loss")) if key in m]
    times = [f"{k.split('/', 1)[1]} {v:.0f}s" for k, v in m.items() if k.startswith("time/")]
    if times:
        parts.append("| time " + " ".join(times))
    parts.append(f"| ETA {format_seconds(eta_s)}" if eta_s is not None else "| ETA -")
    return " ".join(parts)


def format_seconds(s: float) -> str:
    """``3h05m``, ``5m12s`` or ``42s``."""
    s = int(round(s))
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


def step_gate_writer(run: Run) -> RLCallback:
    """step_gates.jsonl: the gate of every step-sample with a skill (host 0 only)."""

    def write(rec: UpdateRecord) -> None:
        if rec.step_gates and jax.process_index() == 0:
            append_jsonl(run.path("step_gates.jsonl"), [g.to_json(rec.update) for g in rec.step_gates])

    return write


class TranscriptWriter:
    """rl/transcripts.jsonl (and TensorBoard text, a W&B table: `MetricsWriter.write_transcripts`):
    ``rl.transcripts_per_update`` trajectories of each update read in full
    (steps with observation, prompt, response, reward; the skill and the gates), drawn by
    `seed_jax.metrics.sample_transcripts` seeded by ``(config.seed, update)``; host 0's
    trajectories only. 0 writes nothing."""

    def __init__(self, run: Run):
        self.path = run.workdir / TRANSCRIPTS_FILE
        self.metrics = run.metrics  # the same sample as TensorBoard text and a W&B table
        self.k = int(run.config.rl.transcripts_per_update)
        self.seed = run.config.seed
        self.enabled = self.k > 0 and jax.process_index() == 0
        if self.enabled:
            repair_torn_tail(self.path)

    def __call__(self, rec: UpdateRecord) -> None:
        if not self.enabled:
            return
        picked = sample_transcripts(rec.trajectories, self.k, f"{self.seed}:transcripts:{rec.update}")
        by_traj: dict[str, dict[int, StepGate]] = {}
        for g in rec.step_gates:
            by_traj.setdefault(g.traj_id, {})[g.step] = g
        self.path.parent.mkdir(parents=True, exist_ok=True)
        records = [transcript_json(rec.update, t, rec.skills.get(t.traj_id), rec.gates.get(t.traj_id),
                                   by_traj.get(t.traj_id)) for t in picked]
        append_jsonl(self.path, records)
        self.metrics.write_transcripts(rec.update, records)


def rl_analysis(c, bench, skill_source: str, bank: SkillBank | None = None, sampler=None,
                encode_prompt=None) -> tuple[Analyzer | None, AnalysisContext]:
    """Step 3's analyzer and its context: `rl_analyzer` of the method's ``skill_source`` and
    ``analysis.analyzer`` (None: no skills), with the budgets of ``c.analysis``, the benchmark
    ``bench`` (whose expert analysis the ``scripted`` analyzer reads), the stage-1 ``bank`` and
    the training tasks (``static``), the rollouts' ``sampler`` and the policy's ``encode_prompt``
    (x_tau's token budget). Every update sets the context's ``policy`` (theta_old) and ``update``."""
    train_tasks = {t["task_id"]: t for t in bench.tasks(bench.train_split)}
    ctx = AnalysisContext(success_threshold=bench.spec.success_threshold,
                          max_prompt_tokens=c.analysis.max_prompt_tokens, max_new_tokens=c.analysis.max_new_tokens,
                          batch_size=c.analysis.batch_size, bench=bench, bank=bank, tasks=train_tasks, seed=c.seed,
                          sampler=sampler, encode_prompt=encode_prompt)
    return rl_analyzer(skill_source, c.analysis.analyzer), ctx


# --------------------------------------------------------------------------------- the stage


def rl(run: Run, mesh, callbacks: Sequence[RLCallback] = ()) -> dict:
    """The RL stage: the loop of its phases (module docstring), each with what `Residency` says
    lives on the devices: rollouts and self-analysis inside one scoped sampler copy of
    theta_old (released before the log-prob passes), the KL reference resident or read back for
    the passes alone, then the PPO steps on the sharded train state."""
    c = run.config
    if not run.switches.train or c.rl.num_updates == 0:
        return {"skipped": f"method {c.method} trains no policy" if not run.switches.train else "num_updates = 0"}
    residency = run.phases.residency
    policy = load_policy(c, rl_start_dir(run), mesh=mesh)
    cfg = policy.config
    tc = train_config(c)

    def reference():
        """The frozen KL reference (the RL start) in the compute dtype, sharded like the policy;
        None without a KL term; read again from disk when it is not resident."""
        if residency.reference == "none":
            return None
        start = policy.params if policy.params is not None else load_policy(c, rl_start_dir(run), mesh=mesh).params
        return scoring_params(start, cfg, mesh)

    ref_params = reference() if residency.reference == "resident" else None
    settings = rollout_settings(c, run.bench)
    bank = None
    if run.switches.skill_source == "static" or run.switches.prompt_skills:
        bank = SkillBank.for_run(run.workdir, run.bench)
    analyzer, ctx = rl_analysis(c, run.bench, run.switches.skill_source, bank=bank, sampler=settings.sampler,
                                encode_prompt=policy.encode_prompt)
    batch_settings = BatchSettings(
        max_prompt_tokens=c.rollout.max_prompt_tokens, max_response_tokens=c.rollout.max_response_tokens,
        max_teacher_prompt_tokens=c.rollout.max_teacher_prompt_tokens, advantage_mode=c.rl.advantage_mode,
        penalty_mode=c.rl.penalty_mode, opd_mask=c.opd.mask)
    micro = c.train.micro_batch_size
    state = create_sharded_state(policy.params, tc, mesh, rng=c.seed)
    # the state holds its own copy and ref_params what the KL needs (often these very buffers)
    policy = policy.with_params(None)
    ckpt = Checkpointer(run.workdir / "rl" / "ckpt", max_to_keep=c.rl.keep_checkpoints,
                        save_concurrent_gb=1 if residency.lean else None)
    start = 0  # updates made (the loop index of the next one)
    restored = ckpt.restore_latest(state)
    if restored is not None:
        state, host, step = restored
        # "updates_done": checkpoint n after update n; older checkpoints held the 0-based index in "update"
        start = int(host["updates_done"]) if "updates_done" in host else int(host["update"]) + 1
        log.info("RL: resumed from checkpoint %d (next update %d)", step, start + 1)
    dropped = forget_redone_updates(run.metrics, start)
    if dropped:
        log.info("RL: dropped %d metrics rows of updates after %d (redone from the checkpoint)", dropped, start)
    train_step = make_train_step(cfg, tc, mesh)

    def compile_apart(state, mini_batch):
        """The train step compiled ahead of its first call (into the persistent cache), then every
        compiled program dropped and freed memory returned: the compiler's working memory and
        the sampler's programs are gone before the step's own temporaries exist."""
        if not compilation_cache_on():
            return  # nowhere to read it back from: the first call compiles it
        train_step.lower(state, mini_batch).compile()
        drop_compiled()
        release_free_memory()

    callbacks = [metrics_writer(run), skill_log_writer(run), step_gate_writer(run), TranscriptWriter(run), *callbacks]
    bar = StageProgress(c.rl.num_updates, "RL updates", unit="update", initial=start)
    first, last = {}, {}
    with make_pool(c, run.bench) as pool:
        for u in range(start, c.rl.num_updates):
            n = u + 1  # the update's number (module docstring); u: the updates made before it
            beat("rl", "update start", update=n)
            timer = Timer()
            tasks = update_tasks(run, u)
            old = policy.with_params(state.params, version=u)  # theta_old, sharded as the state holds it
            with old.sampling(settings.sampler):  # one sampler copy for the rollouts and the skills
                with timer("rollout"):
                    run.phases("rl_rollout", cfg, mesh, update=n)
                    trajs = host_rollouts(pool, old, tasks, settings, gather=False, seed=c.seed * 1_000_003 + u * 1000,
                                          tag=f"u{n}/", task_skills=[bank.lookup(t) for t in tasks]
                                          if run.switches.prompt_skills else None)
                with timer("analysis"):
                    analysis = None
                    if analyzer is not None:
                        run.phases("rl_analysis", cfg, mesh, update=n)
                        analysis = analyzer(trajs, dataclasses.replace(ctx, policy=old, update=u))
                    skills = analysis.skills if analysis is not None else {}
            release_free_memory()  # the sampler copy is gone: its memory is free for the passes and the step
            with timer("batch"):
                ref = ref_params if residency.reference != "reread" else reference()
                run.phases("rl_logprobs", cfg, mesh, update=n)
                ub = build_update_batch(
                    trajs, skills, batch_settings, encode_prompt=old.encode_prompt, pad_id=old.pad_id,
                    model_cfg=cfg, train_cfg=tc, old_params=old.params, ref_params=ref,
                    with_teacher=run.switches.skill_source != "none", audit_gates=c.rl.audit_gates,
                    micro_batch_size=micro, mesh=mesh, allow_empty=jax.process_count() > 1,
                    decode=functools.partial(old.tokenizer.decode, skip_special_tokens=True))
                del ref
            release_free_memory()  # the scoring passes' buffers (and a reference read for them)
            with timer("train"):
                run.phases("rl_train", cfg, mesh, update=n)
                state = at_schedule_pos(state, u)  # the learning-rate schedule counts updates
                del old  # theta_old's buffers are the state's: the donating step reuses them
                state, metrics = ppo_epochs(state, ub.batch, train_step, mini_batch_size=c.rl.mini_batch_size,
                                            micro_batch_size=micro, epochs=c.rl.epochs, seed=c.seed, update=u,
                                            mesh=mesh, hosts=jax.process_count(),
                                            before_first_step=compile_apart if residency.lean else None)
                jax.block_until_ready(state.params)
            out = update_metrics(trajs, analysis, metrics, timer)
            if ub.teacher_cut_share is not None:
                out["batch/teacher_prompt_cut_share"] = ub.teacher_cut_share
            record = UpdateRecord(n, trajs, skills, analysis.parses if analysis else {}, ub.traj_gates, out,
                                  ub.step_gates)
            for callback in callbacks:
                callback(record)
            if n % c.rl.checkpoint_every == 0 or n == c.rl.num_updates:
                if residency.lean:
                    release_free_memory()  # the save copies the state: onto a trimmed heap
                ckpt.save(n, state, {"update": n, "updates_done": n})
                if residency.lean:
                    ckpt.wait()  # the write's host copy of the state is gone before the next rollouts
                    release_free_memory()
            if preemption_requested(n):  # SIGTERM on any host: every host saves this update and stops
                if ckpt.latest_step() != n:
                    ckpt.save(n, state, {"update": n, "updates_done": n})
                ckpt.wait()
                raise Preempted(n)
            if c.rl.eval_every and n % c.rl.eval_every == 0 and n < c.rl.num_updates:
                evaluate_params(run, policy.with_params(state.params, version=n), tag=f"rl_{n:06d}",
                                step=n, bank=bank)
            bar.update(1, success=f"{out['rollout/success_rate']:.2f}", loss=f"{metrics.get('loss', float('nan')):.3f}")
            log.info("%s", update_log_line(record, c.rl.num_updates, bar.eta_seconds()))
            first = first or out
            last = out
    bar.close()
    ckpt.close()
    save_policy(policy.with_params(state.params, version=c.rl.num_updates, source="rl"),
                run.workdir / "rl" / "final_model")
    # the last update's row, and the rollout figures of this launch's first update (``first/``)
    return {**{k: float(v) for k, v in last.items()},
            **{f"first/{k}": float(v) for k, v in first.items() if k.startswith("rollout/")}}


def update_metrics(trajs, analysis, train_metrics: dict, timer: Timer) -> dict[str, float]:
    """One update's row of metrics.jsonl.

    ``rollout/*``: `rollout_summary`; ``analysis/parse_rate``: share of parsed skills (when the
    analyzer wrote any); ``analysis/truncated_share``: share of analyzer prompts x_tau that the
    budget shortened (when it wrote prompts); ``train/*``: the PPO steps' metrics pooled exactly (token means over
    every trained token; ``optimizer_steps``, ``tokens`` summed); ``time/*``: wall seconds per
    phase; ``perf/rollout_tokens_per_s``: generated response tokens / rollout seconds;
    ``perf/train_tokens_per_s``: trained response tokens (all epochs) / train seconds.
    """
    out = {f"rollout/{k}": v for k, v in rollout_summary(trajs).items()}
    if analysis is not None and analysis.parse_rate is not None:
        out["analysis/parse_rate"] = analysis.parse_rate
    if analysis is not None and analysis.truncated_share is not None:
        out["analysis/truncated_share"] = analysis.truncated_share
    out.update({f"train/{METRIC_NAMES.get(k, k)}": v for k, v in train_metrics.items()})
    times = timer.metrics(prefix="time")
    out.update(times)
    generated = sum(len(s.response_ids) for t in trajs for s in t.steps)
    out["perf/rollout_tokens_per_s"] = generated / max(times.get("time/rollout", 0.0), 1e-9)
    out["perf/train_tokens_per_s"] = train_metrics.get("tokens", 0.0) / max(times.get("time/train", 0.0), 1e-9)
    return out
