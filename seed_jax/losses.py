"""SEED losses as pure functions: GRPO policy loss, KL estimators, entropy, OPD, advantages.

Conventions (docs/METHOD.md §3):

- Per-token arrays have shape ``[B, R]`` (batch of step-samples x response tokens); any
  leading shape works as long as all per-token arguments agree.
- ``mask`` is a 0/1 indicator (any non-zero value counts as valid), not a weight. Values at
  masked positions never reach the result or its gradient, even if they are NaN or inf:
  inputs are sanitised with ``jnp.where`` before any arithmetic (the "double where" rule).
- Token-mean losses return a :class:`TokenSum` ``(total, count)`` instead of a mean, so that
  gradient accumulation over micro-batches is exact: the caller adds the TokenSums of all
  micro-batches (``a + b``) and divides once by the global token count (``.mean()``).
  Metrics are TokenSums too, so they also pool exactly.
- Everything is computed in float32.

Functions are registered by name (``POLICY_LOSSES``, ``KL_ESTIMATORS``,
``ADVANTAGE_ESTIMATORS``) so configs can select them by string.

Advantages are host-side (pure numpy) because they are computed by the batch builder from
rollout records before anything is placed on device.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

# verl clamps log-ratios to this range before exponentiating (compute_policy_loss, kl_penalty).
_LOG_RATIO_CLAMP = 20.0
# verl clamps the k3 ("low_var_kl") estimate to this range.
_K3_CLAMP = 10.0


# ---------------------------------------------------------------------------------------------
# Token sums
# ---------------------------------------------------------------------------------------------


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class TokenSum:
    """A token-level sum and the number of tokens it pools over (a pytree of two scalars).

    ``mean() = total / max(count, 1)`` (0 when there are no tokens). Micro-batches combine
    exactly with ``+``: ``(a + b).mean() == full-batch mean``.
    """

    total: jax.Array
    count: jax.Array

    def mean(self) -> jax.Array:
        return self.total / jnp.maximum(self.count, 1.0)

    def __add__(self, other: TokenSum) -> TokenSum:
        if not isinstance(other, TokenSum):
            return NotImplemented
        return TokenSum(self.total + other.total, self.count + other.count)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class LossOutput:
    """Result of a token-mean loss: ``loss`` as a TokenSum plus TokenSum metrics.

    Add two LossOutputs (same metric keys) with ``+`` to pool micro-batches;
    ``summary()`` turns everything into means.
    """

    loss: TokenSum
    metrics: dict[str, TokenSum]

    def __add__(self, other: LossOutput) -> LossOutput:
        if not isinstance(other, LossOutput):
            return NotImplemented
        if set(self.metrics) != set(other.metrics):
            raise ValueError(
                f"cannot add LossOutputs with different metric keys: "
                f"{sorted(self.metrics)} vs {sorted(other.metrics)}"
            )
        return LossOutput(
            self.loss + other.loss, {k: self.metrics[k] + other.metrics[k] for k in self.metrics}
        )

    def summary(self) -> dict[str, jax.Array]:
        """``{"loss": loss.mean(), name: metric.mean(), ...}``."""
        out = {"loss": self.loss.mean()}
        out.update({k: v.mean() for k, v in self.metrics.items()})
        return out


def _valid(mask: jax.Array) -> jax.Array:
    return jnp.asarray(mask) != 0


def _clean(x: jax.Array, valid: jax.Array, fill: float = 0.0) -> jax.Array:
    """float32 copy of ``x`` with masked positions replaced by ``fill`` (NaN/inf-safe)."""
    return jnp.where(valid, jnp.asarray(x, jnp.float32), jnp.float32(fill))


def _check_same_shape(ref_name: str, ref: jax.Array, **others: jax.Array) -> None:
    for name, arr in others.items():
        if jnp.shape(arr) != jnp.shape(ref):
            raise ValueError(
                f"{name} has shape {jnp.shape(arr)} but {ref_name} has shape {jnp.shape(ref)}"
            )


def masked_sum(values: jax.Array, mask: jax.Array) -> TokenSum:
    """``TokenSum(sum_i m_i * x_i, sum_i m_i)`` with m = (mask != 0); NaN at m=0 is ignored."""
    _check_same_shape("values", values, mask=mask)
    valid = _valid(mask)
    return TokenSum(
        total=jnp.sum(_clean(values, valid)), count=jnp.sum(valid.astype(jnp.float32))
    )


def masked_mean(values: jax.Array, mask: jax.Array) -> jax.Array:
    """``sum(m * x) / max(sum(m), 1)`` with m = (mask != 0)."""
    return masked_sum(values, mask).mean()


# ---------------------------------------------------------------------------------------------
# GRPO / PPO policy loss
# ---------------------------------------------------------------------------------------------


def grpo_policy_loss(
    logp: jax.Array,
    old_logp: jax.Array,
    advantages: jax.Array,
    mask: jax.Array,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    dual_clip: float | None = 3.0,
) -> LossOutput:
    """PPO clipped surrogate with dual clip, token-mean (verl ``compute_policy_loss``).

    Per valid token, with ``A`` the advantage (``[B]`` broadcast over tokens, or ``[B, R]``)::

        rho  = exp(clip(logp - old_logp, -20, 20))
        l1   = -A * rho
        l2   = -A * clip(rho, 1 - clip_low, 1 + clip_high)
        l_c  = max(l1, l2)                            # ordinary PPO clip
        l3   = -A * dual_clip
        loss = min(l_c, l3) if A < 0 else l_c         # dual clip caps the loss at -c*A
        L_pg = sum(m * loss) / sum(m)

    ``dual_clip=None`` disables the dual clip (plain PPO); otherwise it must be > 1.

    Metrics (TokenSums over valid tokens):
      ``clip_frac``       share with l2 > l1 (the ratio clip is active),
      ``dual_clip_frac``  share with A < 0 and l_c > l3 (the dual clip is active),
      ``approx_kl``       mean of ``old_logp - logp`` (unclamped),
      ``ratio``           mean of rho.
    """
    _check_same_shape("logp", logp, old_logp=old_logp, mask=mask)
    if dual_clip is not None and not dual_clip > 1.0:
        raise ValueError(f"dual_clip must be > 1.0 (or None), got {dual_clip}")
    if clip_low < 0 or clip_high < 0:
        raise ValueError(f"clip_low/clip_high must be >= 0, got {clip_low}, {clip_high}")
    adv = jnp.asarray(advantages, jnp.float32)
    shape = jnp.shape(logp)
    if adv.shape == shape[:-1]:
        adv = jnp.broadcast_to(adv[..., None], shape)
    elif adv.shape != shape:
        raise ValueError(
            f"advantages has shape {adv.shape}; expected {shape[:-1]} (per sample) "
            f"or {shape} (per token) to match logp"
        )
    valid = _valid(mask)
    logp = _clean(logp, valid)
    old_logp = _clean(old_logp, valid)
    adv = _clean(adv, valid)

    log_ratio = logp - old_logp
    ratio = jnp.exp(jnp.clip(log_ratio, -_LOG_RATIO_CLAMP, _LOG_RATIO_CLAMP))
    l1 = -adv * ratio
    l2 = -adv * jnp.clip(ratio, 1.0 - clip_low, 1.0 + clip_high)
    clipped = jnp.maximum(l1, l2)
    if dual_clip is None:
        per_token = clipped
        dual_active = jnp.zeros_like(valid)
    else:
        l3 = -adv * dual_clip
        per_token = jnp.where(adv < 0, jnp.minimum(clipped, l3), clipped)
        dual_active = (adv < 0) & (clipped > l3)

    f32 = lambda b: b.astype(jnp.float32)  # noqa: E731
    metrics = {
        "clip_frac": masked_sum(f32(l2 > l1), valid),
        "dual_clip_frac": masked_sum(f32(dual_active), valid),
        "approx_kl": masked_sum(-log_ratio, valid),
        "ratio": masked_sum(ratio, valid),
    }
    return LossOutput(loss=masked_sum(per_token, valid), metrics=metrics)


POLICY_LOSSES: dict[str, Callable[..., LossOutput]] = {"grpo": grpo_policy_loss}


# ---------------------------------------------------------------------------------------------
# KL estimators
# ---------------------------------------------------------------------------------------------


def kl_k1(logp: jax.Array, ref_logp: jax.Array) -> jax.Array:
    """k1 = logp - ref_logp (unbiased, high variance, can be negative)."""
    return jnp.asarray(logp, jnp.float32) - jnp.asarray(ref_logp, jnp.float32)


def kl_abs(logp: jax.Array, ref_logp: jax.Array) -> jax.Array:
    """|logp - ref_logp|."""
    return jnp.abs(kl_k1(logp, ref_logp))


def kl_mse(logp: jax.Array, ref_logp: jax.Array) -> jax.Array:
    """k2 = 0.5 * (logp - ref_logp)^2."""
    return 0.5 * jnp.square(kl_k1(logp, ref_logp))


def kl_low_var(logp: jax.Array, ref_logp: jax.Array) -> jax.Array:
    """k3 (Schulman's low-variance estimator), clamped as in verl::

    d = clip(ref_logp - logp, -20, 20);  k3 = clip(exp(d) - d - 1, -10, 10)
    """
    d = jnp.clip(-kl_k1(logp, ref_logp), -_LOG_RATIO_CLAMP, _LOG_RATIO_CLAMP)
    return jnp.clip(jnp.exp(d) - d - 1.0, -_K3_CLAMP, _K3_CLAMP)


KL_ESTIMATORS: dict[str, Callable[[jax.Array, jax.Array], jax.Array]] = {
    "k1": kl_k1,
    "kl": kl_k1,
    "abs": kl_abs,
    "mse": kl_mse,
    "k2": kl_mse,
    "low_var_kl": kl_low_var,
    "k3": kl_low_var,
}


def kl_penalty(logp: jax.Array, ref_logp: jax.Array, kind: str = "low_var_kl") -> jax.Array:
    """Per-token KL estimate of pi_theta from pi_ref; ``kind`` is a key of KL_ESTIMATORS.

    k1: logp - ref;  abs: |logp - ref|;  mse/k2: 0.5 (logp - ref)^2;
    low_var_kl/k3: clip(exp(ref - logp) - (ref - logp) - 1, -10, 10).
    """
    try:
        fn = KL_ESTIMATORS[kind]
    except KeyError:
        raise ValueError(f"unknown KL kind {kind!r}; choose one of {sorted(KL_ESTIMATORS)}") from None
    _check_same_shape("logp", logp, ref_logp=ref_logp)
    return fn(logp, ref_logp)


def kl_penalty_sum(
    logp: jax.Array, ref_logp: jax.Array, mask: jax.Array, kind: str = "low_var_kl"
) -> TokenSum:
    """``masked_sum(kl_penalty(logp, ref_logp, kind), mask)`` (masked inputs zeroed first)."""
    _check_same_shape("logp", logp, ref_logp=ref_logp, mask=mask)
    valid = _valid(mask)
    return masked_sum(kl_penalty(_clean(logp, valid), _clean(ref_logp, valid), kind), valid)


# ---------------------------------------------------------------------------------------------
# Entropy
# ---------------------------------------------------------------------------------------------


def entropy_from_logits(logits: jax.Array) -> jax.Array:
    """Entropy of softmax(logits) over the last axis, float32::

        H = logsumexp(z) - sum_v softmax(z)_v * z_v

    Entries with probability 0 (e.g. logits of -inf) contribute 0.
    """
    z = jnp.asarray(logits, jnp.float32)
    # Shift by the row max (no effect on H) so that lse and sum(p z) stay O(log V) and do
    # not cancel catastrophically for large logits.
    zmax = jax.lax.stop_gradient(jnp.max(z, axis=-1, keepdims=True))
    z = z - jnp.where(jnp.isfinite(zmax), zmax, 0.0)
    lse = jax.nn.logsumexp(z, axis=-1, keepdims=True)
    p = jnp.exp(z - lse)
    pz = jnp.where(p > 0, p * jnp.where(jnp.isfinite(z), z, 0.0), 0.0)
    return lse[..., 0] - jnp.sum(pz, axis=-1)


def entropy_sum(logits: jax.Array, mask: jax.Array) -> TokenSum:
    """``masked_sum(entropy_from_logits(logits), mask)``; logits ``[..., V]``, mask ``[...]``.

    Masked positions' logits are replaced by zeros first, so NaN there does not leak.
    """
    if jnp.shape(logits)[:-1] != jnp.shape(mask):
        raise ValueError(
            f"logits has shape {jnp.shape(logits)}; expected mask shape + [V], "
            f"mask has shape {jnp.shape(mask)}"
        )
    valid = _valid(mask)
    z = jnp.where(valid[..., None], jnp.asarray(logits, jnp.float32), 0.0)
    return masked_sum(entropy_from_logits(z), valid)


# ---------------------------------------------------------------------------------------------
# On-policy distillation from the skill-augmented teacher
# ---------------------------------------------------------------------------------------------


def opd_loss(
    logp: jax.Array,
    teacher_logp: jax.Array,
    mask: jax.Array,
    beta: float = 5.0,
    response_mask: jax.Array | None = None,
) -> LossOutput:
    """Gated on-policy distillation toward the skill-augmented teacher (docs/METHOD.md §3.7).

    With ``l = logp`` (ordinary context, trainable), ``t = teacher_logp`` (skill context) and
    ``m = mask`` (response mask x trajectory-has-skill mask)::

        Delta = sg(t - l),   g = sigmoid(beta * Delta)
        loss_tok = g * (sg(t) - l)
        L_opd = sum(m * loss_tok) / N

    so ``dL_opd/dl = -g / N`` on tokens with m = 1 and 0 elsewhere; no gradient reaches ``t``.

    ``N`` is the token count of the returned TokenSum: ``sum(response_mask)`` when
    ``response_mask`` is given (the masked mean over all valid response tokens of docs/METHOD.md §3.7:
    tokens of skill-less trajectories count in the denominator but contribute 0), otherwise
    ``sum(mask)``. ``mask`` must be a subset of ``response_mask``.

    Metrics (TokenSums): over tokens with m = 1: ``gate_mean``, ``gate_gt_half`` (share with
    g > 0.5), ``teacher_gap`` (mean of t - l); ``active_share`` = sum(m) / sum(response_mask)
    (or over all positions when response_mask is None).
    """
    _check_same_shape("logp", logp, teacher_logp=teacher_logp, mask=mask)
    valid = _valid(mask)
    if response_mask is None:
        denom_valid = valid
        active_count = jnp.float32(valid.size)
    else:
        _check_same_shape("logp", logp, response_mask=response_mask)
        denom_valid = _valid(response_mask)
        active_count = jnp.sum(denom_valid.astype(jnp.float32))
    l = _clean(logp, valid)
    t = jax.lax.stop_gradient(_clean(teacher_logp, valid))
    delta = jax.lax.stop_gradient(t - l)
    gate = jax.nn.sigmoid(beta * delta)
    per_token = gate * (t - l)

    loss = TokenSum(
        total=jnp.sum(jnp.where(valid, per_token, 0.0)),
        count=jnp.sum(denom_valid.astype(jnp.float32)),
    )
    n_active = jnp.sum(valid.astype(jnp.float32))
    metrics = {
        "gate_mean": masked_sum(gate, valid),
        "gate_gt_half": masked_sum((gate > 0.5).astype(jnp.float32), valid),
        "teacher_gap": masked_sum(delta, valid),
        "active_share": TokenSum(total=n_active, count=active_count),
    }
    return LossOutput(loss=loss, metrics=metrics)


# ---------------------------------------------------------------------------------------------
# Group-relative advantages (host side, numpy)
# ---------------------------------------------------------------------------------------------


def _group_stats(
    rewards: np.ndarray, group_ids: Any
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per item: (group mean, unbiased group std, group size)."""
    r = np.asarray(rewards, dtype=np.float64)
    g = np.asarray(group_ids)
    if r.ndim != 1 or g.shape != r.shape:
        raise ValueError(
            f"rewards and group_ids must be 1-D of equal length, got shapes {r.shape} and "
            f"{g.shape}"
        )
    if not np.all(np.isfinite(r)):
        raise ValueError("rewards contain NaN or inf")
    _, inv = np.unique(g, return_inverse=True)
    inv = inv.reshape(-1)
    n_groups = int(inv.max()) + 1 if inv.size else 0
    size = np.bincount(inv, minlength=n_groups).astype(np.float64)
    mean = np.bincount(inv, weights=r, minlength=n_groups) / np.maximum(size, 1)
    sq = np.bincount(inv, weights=(r - mean[inv]) ** 2, minlength=n_groups)
    std = np.sqrt(sq / np.maximum(size - 1, 1))
    return mean[inv], std[inv], size[inv]


def _adv_mean_std(rewards, group_ids, eps):
    mean, std, size = _group_stats(rewards, group_ids)
    denom = std + eps
    ok = (size > 1) & (denom > 0)
    a = np.zeros_like(mean)
    np.divide(np.asarray(rewards, np.float64) - mean, denom, out=a, where=ok)
    return a.astype(np.float32)


def _adv_mean(rewards, group_ids, eps):
    del eps
    mean, _, size = _group_stats(rewards, group_ids)
    a = np.asarray(rewards, np.float64) - mean
    return np.where(size > 1, a, 0.0).astype(np.float32)


# Each maps (rewards [n], group_ids [n], eps) -> advantages [n] float32. "step_pooled" is the
# mean/std normalisation applied to per-step-sample scores (see step_advantages).
ADVANTAGE_ESTIMATORS: dict[str, Callable[[Any, Any, float], np.ndarray]] = {
    "mean_std": _adv_mean_std,
    "mean": _adv_mean,
    "step_pooled": _adv_mean_std,
    "step_pooled_mean": _adv_mean,
}


def group_advantages(
    rewards: Any, group_ids: Any, mode: str = "mean_std", eps: float = 1e-6
) -> np.ndarray:
    """Group-relative advantages (GRPO), pure numpy, float32 ``[n]``.

    ``rewards[i]`` is the score of item i and ``group_ids[i]`` (any sortable ids: ints or
    strings) its task group q. With mean_q and std_q over the items of group q::

        mean_std:          A_i = (r_i - mean_q) / (std_q + eps)      (default, docs/METHOD.md §3.3)
        mean:              A_i = r_i - mean_q                        (authors' WebShop mean_norm)
        step_pooled:       same formula as mean_std, but the items are step-samples
        step_pooled_mean:  same formula as mean, items are step-samples

    For ``mean_std``/``mean`` the items are the N trajectories of each group (episode
    rewards); for the ``step_pooled*`` modes (the authors' code) they are per-step-sample
    scores, so longer trajectories weigh more in mean_q/std_q. ``step_advantages`` builds
    per-step advantages for every mode from trajectory records.

    std_q is the unbiased estimator (ddof=1, like torch.std in verl's GRPO). A group with a
    single item gets advantage 0 (verl instead uses mean 0, std 1 there); a group whose items
    are all equal gets 0 as well.
    """
    try:
        fn = ADVANTAGE_ESTIMATORS[mode]
    except KeyError:
        raise ValueError(
            f"unknown advantage mode {mode!r}; choose one of {sorted(ADVANTAGE_ESTIMATORS)}"
        ) from None
    return fn(rewards, group_ids, eps)


PENALTY_MODES = ("after_norm", "in_score")


def step_scores(episode_reward: Any, invalid_penalties: Any) -> np.ndarray:
    """Per-step score = episode reward - that step's invalid-action penalty (docs/METHOD.md §3.3).

    Both broadcast (e.g. episode reward gathered per step, penalty 0 for valid steps).
    """
    return (np.asarray(episode_reward, np.float64) - np.asarray(invalid_penalties, np.float64)
            ).astype(np.float32)


def step_advantages(
    episode_rewards: Any,
    traj_group_ids: Any,
    step_traj_index: Any,
    step_penalties: Any,
    mode: str = "mean_std",
    eps: float = 1e-6,
    penalty_mode: str = "after_norm",
) -> np.ndarray:
    """Advantage of every step-sample, float32 ``[n_steps]``.

    Inputs: ``episode_rewards[j]`` and ``traj_group_ids[j]`` per trajectory j;
    ``step_traj_index[k]`` (trajectory of step-sample k, an index into the trajectory
    arrays) and ``step_penalties[k]`` (the invalid-action penalty of step k, 0 if valid).
    The result is broadcast over the response tokens of the step by the loss.

    Trajectory-level modes (statistics over the N trajectories of group q)::

        mean_std:  A_k = (R_j - mean_q) / (std_q + eps) - p_k
        mean:      A_k = (R_j - mean_q) - p_k  =  score_k - mean_q

    i.e. the episode reward is normalised over the group and the penalty is then subtracted
    in reward units, unscaled (``penalty_mode="after_norm"``, the default). A trajectory in a
    group of one gets A = -p_k.

    ``penalty_mode="in_score"`` (the literal reading of "score = reward - penalty, then
    normalise") puts the penalty inside the normalised score, with the group statistics of
    the trajectories' rewards::

        mean_std:  A_k = (R_j - p_k - mean_q) / (std_q + eps)      (0 in a group of one)

    which makes a single invalid step weigh -p/eps ~ -1e5 in the frequent groups where every
    trajectory has the same outcome (std_q = 0). For ``mean`` both placements coincide; the
    step-pooled modes always have the penalty in their score.

    Step-pooled modes (authors' code; statistics over all step-samples of group q)::

        step_pooled:       A_k = (s_k - mean_q) / (std_q + eps),  s_k = R_j - p_k
        step_pooled_mean:  A_k = s_k - mean_q
    """
    r = np.asarray(episode_rewards, np.float64)
    g = np.asarray(traj_group_ids)
    idx = np.asarray(step_traj_index)
    pen = np.asarray(step_penalties, np.float64)
    if idx.ndim != 1 or pen.shape != idx.shape:
        raise ValueError(
            f"step_traj_index and step_penalties must be 1-D of equal length, got shapes "
            f"{idx.shape} and {pen.shape}"
        )
    if not np.issubdtype(idx.dtype, np.integer):
        raise ValueError(f"step_traj_index must hold integer indices, got dtype {idx.dtype}")
    if idx.size and (idx.min() < 0 or idx.max() >= r.shape[0]):
        raise ValueError(
            f"step_traj_index out of range [0, {r.shape[0]}): min {idx.min()}, max {idx.max()}"
        )
    if penalty_mode not in PENALTY_MODES:
        raise ValueError(f"unknown penalty mode {penalty_mode!r}; choose one of {PENALTY_MODES}")
    if mode == "mean_std" and penalty_mode == "in_score":
        mean, std, size = _group_stats(r, g)
        a = (r[idx] - pen - mean[idx]) / (std[idx] + eps)
        return np.where(size[idx] > 1, a, 0.0).astype(np.float32)
    if mode in ("mean_std", "mean"):
        a_traj = group_advantages(r, g, mode=mode, eps=eps).astype(np.float64)
        return (a_traj[idx] - pen).astype(np.float32)
    if mode in ("step_pooled", "step_pooled_mean"):
        return group_advantages(step_scores(r[idx], pen), g[idx], mode=mode, eps=eps)
    raise ValueError(
        f"unknown advantage mode {mode!r}; choose one of {sorted(ADVANTAGE_ESTIMATORS)}"
    )
