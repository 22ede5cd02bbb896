"""One RL update's batch: rollouts + skills -> step-samples -> log-probs -> a `SeedBatch`.

With theta_old the parameters that start the update (they generated the rollouts):

- ``old_logp``: theta_old on the ordinary prompts (the PPO ratio's denominator);
- ``ref_logp``: the frozen reference (the RL start) on the same rows, when ``c_kl > 0``;
- ``teacher_logp``: theta_old on the teacher twins ``H(h, s)`` — taken for the skill audit
  (``rl.audit_gates``) and given to the step when ``teacher_from_old`` (the authors' path);
  without any skill in the update it is ``old_logp`` (every row is masked out of OPD).

Skill audit: per step-sample with a skill, the gate statistics of `seed_jax.losses.opd_loss`
(``gate_mean``, ``gate_gt_half`` over its response tokens, gate ``g = sigmoid(beta_opd *
(t - l))`` with ``t = teacher_logp``, ``l = old_logp``), pooled per trajectory as token sums,
and the skill-induced shift ``delta_mean = mean_tokens (t - l)`` of each step-sample.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from seed_jax import losses
from seed_jax.metrics import GateSummary
from seed_jax.models.config import ModelConfig
from seed_jax.pipeline.multihost import common_max, is_multihost
from seed_jax.rollout.batch import BatchSettings, RowInfo, build_batch
from seed_jax.rollout.trajectory import Trajectory
from seed_jax.train.batch import SeedBatch, grow_sequences
from seed_jax.train.config import TrainConfig
from seed_jax.train.logprobs import compute_logprobs


@dataclasses.dataclass(frozen=True)
class StepGate:
    """The OPD gate of one step-sample under theta_old (a line of ``step_gates.jsonl``)."""

    traj_id: str
    step: int
    gate_mean: float
    gate_gt_half: float
    n_tokens: int
    delta_mean: float  # mean over the response tokens of t - l (nats per token)

    def to_json(self, update: int) -> dict:
        return {"update": int(update), "traj_id": self.traj_id, "step": int(self.step),
                "gate_mean": float(self.gate_mean), "gate_gt_half": float(self.gate_gt_half),
                "n_tokens": int(self.n_tokens), "delta_mean": float(self.delta_mean)}


@dataclasses.dataclass(frozen=True)
class UpdateBatch:
    """``batch`` (host arrays, one row per step-sample, no padding rows), the rows' origins, the
    skill audit (empty when no gate was taken) and the share of teacher prompts of rows with a
    skill that their cap shortened (None without such rows)."""

    batch: SeedBatch
    rows: list[RowInfo]
    step_gates: list[StepGate]
    traj_gates: dict[str, GateSummary]
    teacher_cut_share: float | None = None


@jax.jit
def _row_gate_sums(old_logp, teacher_logp, mask, beta):
    """Per row: the gate TokenSums of `losses.opd_loss` over that row's response tokens."""
    def one(student, teacher, m):
        out = losses.opd_loss(student[None], teacher[None], m[None], beta)
        return out.metrics["gate_mean"], out.metrics["gate_gt_half"]
    return jax.vmap(one)(old_logp, teacher_logp, mask)


def gate_audit(rows: Sequence[RowInfo], old_logp, teacher_logp, response_mask,
               beta: float) -> tuple[list[StepGate], dict[str, GateSummary]]:
    """Gate statistics of the rows with a skill: per step-sample and pooled per trajectory; per
    step-sample also ``delta_mean = sum_k m_k (t_k - l_k) / sum_k m_k`` (m = response mask)."""
    idx = [i for i, r in enumerate(rows) if r.has_skill]
    if not idx:
        return [], {}
    mean, gt = _row_gate_sums(jnp.asarray(old_logp[idx]), jnp.asarray(teacher_logp[idx]),
                              jnp.asarray(response_mask[idx]), jnp.float32(beta))
    mean_t, gt_t, count = (np.asarray(x, np.float64) for x in (mean.total, gt.total, mean.count))
    m = np.asarray(response_mask, np.float64)[idx]
    diff = np.asarray(teacher_logp, np.float64)[idx] - np.asarray(old_logp, np.float64)[idx]
    delta_t = np.where(m > 0, diff * m, 0.0).sum(-1)
    steps, pooled = [], {}
    for k, i in enumerate(idx):
        r = rows[i]
        if count[k] <= 0:
            continue
        steps.append(StepGate(r.traj_id, r.step_index, mean_t[k] / count[k], gt_t[k] / count[k], int(count[k]),
                              delta_t[k] / count[k]))
        acc = pooled.setdefault(r.traj_id, [0.0, 0.0, 0.0])
        acc[0] += mean_t[k]
        acc[1] += gt_t[k]
        acc[2] += count[k]
    return steps, {tid: GateSummary(mean=m / n, share_gt_half=g / n, n_tokens=int(round(n)))
                   for tid, (m, g, n) in pooled.items()}


def empty_seed_batch(train_cfg: TrainConfig) -> SeedBatch:
    """A `SeedBatch` of no rows (one-token prompt and response layout) with the fields a
    non-empty update batch has under ``train_cfg`` (`build_update_batch`), for `SeedBatch.grow`."""
    tc = train_cfg
    ids, zeros = np.zeros((0, 2), np.int32), np.zeros((0, 1), np.float32)
    twin = tc.use_teacher and not tc.teacher_from_old
    return SeedBatch(student_ids=ids, student_mask=ids, response_mask=zeros, advantages=zeros,
                     has_skill=np.zeros((0,), np.float32), old_logp=zeros,
                     ref_logp=zeros if tc.c_kl > 0 else None, teacher_ids=ids if twin else None,
                     teacher_mask=ids if twin else None,
                     teacher_logp=zeros if tc.use_teacher and tc.teacher_from_old else None,
                     opd_mask=zeros if tc.use_teacher else None)


def build_update_batch(
    trajectories: Sequence[Trajectory],
    skills: dict[str, str | None],
    settings: BatchSettings,
    *,
    encode_prompt: Callable[[str], list[int]],
    pad_id: int,
    model_cfg: ModelConfig,
    train_cfg: TrainConfig,
    old_params,
    ref_params,
    with_teacher: bool,
    audit_gates: bool,
    micro_batch_size: int,
    mesh=None,
    allow_empty: bool = False,
    decode: Callable[[list[int]], str] | None = None,
) -> UpdateBatch:
    """The update's `UpdateBatch` (module docstring). ``with_teacher``: build the teacher twins
    (a method with skills); the step gets ``teacher_ids`` only when it runs a teacher pass.
    With a ``mesh`` the log-prob passes run sharded (rows over ('data', 'fsdp'), parameters by
    the rules, `seed_jax.train.logprobs.make_logprob_pass`). ``allow_empty`` (several hosts):
    without any trajectory to train on, the batch has no rows (`empty_seed_batch`) and the host
    contributes masked padding rows to every step. ``decode`` (response ids -> text, as the
    rollout decodes) finds the action tokens of ``settings.opd_mask == "action"``.

    Several hosts sharing ``mesh`` run every pass together (`compute_logprobs`): each widens its
    rows to the common prompt / response lengths (`common_max`), a host without rows takes part
    with none, and the teacher pass runs when any host has a skill."""
    tc = train_cfg
    empty = allow_empty and not any(not t.env_error and t.steps for t in trajectories)
    together = mesh is not None and is_multihost()
    if empty and not together:
        return UpdateBatch(empty_seed_batch(tc), [], [], {})
    samples = None if empty else build_batch(trajectories, skills, encode_prompt, settings, pad_id=pad_id,
                                             with_teacher=with_teacher or tc.use_teacher, decode=decode)
    P, Pt, R = (1, 1, 1) if empty else (samples.prompt_len, samples.teacher_prompt_len or 1, samples.response_len)
    n_skill = 0 if empty else int(samples.has_skill.sum())
    twins = not empty and samples.teacher_ids is not None
    Pw, Ptw, Rw, any_skill, any_twins = (common_max(P, Pt, R, n_skill, int(twins)) if together
                                         else (P, Pt, R, n_skill, int(twins)))

    def logprobs(params, ids, mask, prompt_len, wide_prompt):
        if empty:
            ids = mask = np.zeros((0, wide_prompt + Rw), np.int32)
        elif together:  # one host alone keeps its own lengths: nothing to widen
            ids, mask = (grow_sequences(np.asarray(x), prompt_len, wide_prompt, Rw) for x in (ids, mask))
        out = compute_logprobs(params, model_cfg, ids, mask, wide_prompt, Rw, micro_batch_size, mesh=mesh,
                               temperature=tc.temperature)
        return out[:, :R]

    student = (None, None) if empty else (samples.student_ids, samples.student_mask)
    old = logprobs(old_params, *student, P, Pw)
    ref = logprobs(ref_params, *student, P, Pw) if tc.c_kl > 0 else None
    teacher = None
    if any_twins and any_skill and (audit_gates or tc.teacher_from_old):
        twin = (samples.teacher_ids, samples.teacher_mask) if twins else (None, None)
        teacher = logprobs(old_params, *twin, Pt, Ptw)
    if empty:
        return UpdateBatch(empty_seed_batch(tc), [], [], {})
    if not twins or not n_skill:
        teacher = None  # this host's rows have no skill: the pass ran for the other hosts
    steps, traj_gates = ([], {}) if teacher is None else gate_audit(samples.rows, old, teacher,
                                                                    samples.response_mask, tc.beta_opd)
    if tc.use_teacher and tc.teacher_from_old and teacher is None:
        teacher = old  # no skill in this update: OPD is masked out on every row
    batch = samples.to_seed_batch(old, ref, teacher if tc.use_teacher and tc.teacher_from_old else None,
                                  with_teacher_ids=tc.use_teacher and not tc.teacher_from_old)
    return UpdateBatch(batch, samples.rows, steps, traj_gates,
                       samples.teacher_cut / n_skill if n_skill and samples.teacher_ids is not None else None)
