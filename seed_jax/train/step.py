"""The SEED train step: GRPO + gated on-policy distillation in one jitted, sharded program.

For a batch of step-samples (layout in `seed_jax.train.logprobs`), with ``l`` the student
log-probs of the response tokens under the ordinary prompt (current params, with gradient),
``t`` the teacher log-probs of the same tokens under the skill-augmented prompt, ``m`` the
response mask and ``N = sum(m)`` over the WHOLE batch (docs/METHOD.md §3.8)::

    L = L_pg - c_ent * H + c_kl * KL + lambda_opd * L_opd
    L_pg  = sum(m * ppo_dual_clip(l, old_logp, A)) / N        (losses.grpo_policy_loss)
    H     = sum(m * entropy) / N
    KL    = sum(m * kl(l, ref_logp)) / N                      (losses.kl_penalty, kl_kind)
    L_opd = sum(m_opd * has_skill * g * (sg(t) - l)) / N,  g = sigmoid(beta_opd * sg(t - l))

with ``m_opd = batch.opd_mask`` (``opd.mask``: by default the valid steps' action tokens,
`seed_jax.rollout.batch`; ``m`` when the batch has none).

Every term is a token sum divided by the global count, so micro-batches (``lax.scan``) add up
to the full-batch loss and gradient exactly. The teacher pass runs on
``stop_gradient(params)`` inside the same program: forward work only, no backward.
``lambda_opd == 0`` (static): the teacher pass is not traced (plain GRPO).
``teacher_from_old``: ``t = batch['teacher_logp']`` (precomputed with theta_old).

Batch: a `seed_jax.train.batch.SeedBatch` (rows sharded over ('data', 'fsdp')); the
teacher pass needs ``teacher_ids`` / ``teacher_mask``, ``teacher_from_old`` needs
``teacher_logp``, ``c_kl > 0`` needs ``ref_logp`` (``SeedBatch.validate`` says which is missing).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from seed_jax import losses
from seed_jax.models.config import ModelConfig
from seed_jax.train.batch import SeedBatch
from seed_jax.train.config import TrainConfig
from seed_jax.train.grad_accum import accumulate_gradients
from seed_jax.train.logprobs import response_logprobs
from seed_jax.train.update import build_step


def seed_token_count(batch: SeedBatch) -> jax.Array:
    """N = number of valid response tokens in the (full) batch, float32."""
    return jnp.sum((batch.response_mask != 0).astype(jnp.float32))


def seed_micro_loss(params, mb: SeedBatch, n_tokens, model_cfg: ModelConfig, train_cfg: TrainConfig):
    """``(loss, metrics)`` of one micro-batch; loss terms divided by the global ``n_tokens``.

    ``metrics`` maps names to `losses.TokenSum`s (summed over micro-batches). ``kl`` is
    computed when ``mb.ref_logp`` is given (always when ``c_kl > 0``).
    """
    tc = train_cfg
    R, P = mb.response_len, mb.prompt_len
    rmask = mb.response_mask
    with jax.named_scope("student"):
        logp, ent = response_logprobs(params, model_cfg, mb.student_ids, mb.student_mask,
                                      P, R, tc.logits_chunk, with_entropy=True, temperature=tc.temperature)
    pg = losses.grpo_policy_loss(logp, mb.old_logp, mb.advantages, rmask,
                                 tc.clip_low, tc.clip_high, tc.dual_clip)
    ent_sum = losses.masked_sum(ent, rmask)
    terms = [(1.0, pg.loss), (-tc.c_ent, ent_sum)]
    metrics = {"pg_loss": pg.loss, "entropy": ent_sum, **pg.metrics,
               "logp": losses.masked_sum(logp, rmask)}
    if mb.ref_logp is not None:
        kl_sum = losses.kl_penalty_sum(logp, mb.ref_logp, rmask, tc.kl_kind)
        terms.append((tc.c_kl, kl_sum))
        metrics["kl"] = kl_sum
    if tc.use_teacher:
        if tc.teacher_from_old:
            t_logp = mb.teacher_logp
        else:
            with jax.named_scope("teacher"):
                t_logp, _ = response_logprobs(jax.lax.stop_gradient(params), model_cfg,
                                              mb.teacher_ids, mb.teacher_mask, mb.teacher_prompt_len, R,
                                              tc.logits_chunk, with_entropy=False, temperature=tc.temperature)
        t_logp = jax.lax.stop_gradient(t_logp)
        opd_mask = (rmask if mb.opd_mask is None else mb.opd_mask * rmask) * (mb.has_skill[:, None] != 0)
        opd = losses.opd_loss(logp, t_logp, opd_mask, tc.beta_opd, response_mask=rmask)
        terms.append((tc.lambda_opd, opd.loss))
        metrics["opd_loss"] = opd.loss
        metrics.update({f"opd_{k}": v for k, v in opd.metrics.items()})
    loss = sum(c * s.total for c, s in terms if c != 0) / jnp.maximum(n_tokens, 1.0)
    return loss, metrics


def seed_loss_and_grads(params, batch: SeedBatch, model_cfg: ModelConfig, train_cfg: TrainConfig,
                        mesh=None):
    """``(loss, metrics as means, grads)`` of the SEED loss, micro-batched as configured.

    Pure; the building block of `make_train_step` (exposed for tests and custom loops).
    ``model_cfg`` is used as given (apply ``train_cfg.apply_to`` first if wanted).
    """
    batch.validate(train_cfg)
    n_tok = seed_token_count(batch)
    n_micro = train_cfg.num_micro_batches(batch.num_rows)
    loss, aux, grads = accumulate_gradients(
        lambda p, mb: seed_micro_loss(p, mb, n_tok, model_cfg, train_cfg),
        params, batch, n_micro, mesh)
    return loss, {k: v.mean() for k, v in aux.items()}, grads


@functools.lru_cache(maxsize=16)
def make_train_step(model_cfg: ModelConfig, train_cfg: TrainConfig, mesh):
    """``train_step(state, batch) -> (state, metrics)``: jitted, sharded, state donated.

    Cached on its (hashable) arguments, so equal configs share one compiled program.

    ``model_cfg`` gets ``train_cfg``'s remat / dtypes. Metrics (replicated; token means as
    `losses.TokenSum`, see `seed_jax.train.update.metric_means` / `pool_metrics`):
    ``pg_loss``, ``entropy``, ``kl``, ``clip_frac``, ``dual_clip_frac``, ``approx_kl``,
    ``ratio``, ``logp``; with OPD ``opd_loss``, ``opd_gate_mean``, ``opd_gate_gt_half``,
    ``opd_teacher_gap``, ``opd_active_share``; scalars ``loss``, ``grad_norm``, ``lr``,
    ``skipped``, ``tokens``.
    """
    cfg = train_cfg.apply_to(model_cfg)
    return build_step(
        micro_loss=lambda p, mb, n: seed_micro_loss(p, mb, n, cfg, train_cfg),
        token_count=seed_token_count, model_cfg=model_cfg, train_cfg=train_cfg, mesh=mesh)
