"""Tests of seed_jax.losses against independent numpy references and hand-computed values."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from seed_jax import losses as L

B, R = 6, 9


def _rng(seed=0):
    return np.random.default_rng(seed)


def _batch(seed=0, p_mask=0.7):
    rng = _rng(seed)
    logp = -rng.exponential(1.0, (B, R)).astype(np.float32)
    old = (logp + rng.normal(0, 0.8, (B, R))).astype(np.float32)
    ref = (logp + rng.normal(0, 0.6, (B, R))).astype(np.float32)
    teacher = (logp + rng.normal(0, 0.8, (B, R))).astype(np.float32)
    adv = rng.normal(0, 1.5, (B,)).astype(np.float32)
    mask = (rng.random((B, R)) < p_mask).astype(np.float32)
    mask[0, :] = 1.0  # at least some valid tokens
    return logp, old, ref, teacher, adv, mask


# ----------------------------------------------------------------------------- references


def ref_grpo(logp, old, adv, mask, cl=0.2, ch=0.2, c=3.0):
    """Loop-style reference of the verl dual-clip PPO loss."""
    if adv.ndim == 1:
        adv = np.repeat(adv[:, None], logp.shape[1], axis=1)
    tot = cnt = nclip = ndual = kl = 0.0
    for i in range(logp.shape[0]):
        for j in range(logp.shape[1]):
            if mask[i, j] == 0:
                continue
            a = float(adv[i, j])
            rho = math.exp(max(-20.0, min(20.0, float(logp[i, j]) - float(old[i, j]))))
            u = -a * rho
            k = -a * min(max(rho, 1 - cl), 1 + ch)
            v = max(u, k)
            nclip += k > u
            if c is not None and a < 0:
                if v > -a * c:
                    ndual += 1
                v = min(v, -a * c)
            tot += v
            cnt += 1
            kl += float(old[i, j]) - float(logp[i, j])
    return tot / cnt, nclip / cnt, ndual / cnt, kl / cnt


def ref_kl(logp, ref, kind):
    out = np.zeros(logp.shape, np.float64)
    for idx in np.ndindex(logp.shape):
        d = float(logp[idx]) - float(ref[idx])
        if kind == "k1":
            out[idx] = d
        elif kind == "abs":
            out[idx] = abs(d)
        elif kind == "mse":
            out[idx] = 0.5 * d * d
        elif kind == "low_var_kl":
            x = min(20.0, max(-20.0, -d))
            out[idx] = min(10.0, max(-10.0, math.exp(x) - x - 1))
    return out


def ref_entropy(logits):
    z = np.asarray(logits, np.float64)
    out = np.zeros(z.shape[:-1])
    for idx in np.ndindex(z.shape[:-1]):
        row = z[idx]
        p = np.exp(row - row[np.isfinite(row)].max())
        p /= p.sum()
        out[idx] = -sum(pi * math.log(pi) for pi in p if pi > 0)
    return out


def ref_opd(logp, teacher, mask, beta, response_mask=None):
    n = mask.sum() if response_mask is None else response_mask.sum()
    tot = 0.0
    gates = []
    gaps = []
    for idx in np.ndindex(logp.shape):
        if mask[idx] == 0:
            continue
        d = float(teacher[idx]) - float(logp[idx])
        g = 1.0 / (1.0 + math.exp(-beta * d))
        tot += g * d
        gates.append(g)
        gaps.append(d)
    return tot / n, np.mean(gates), np.mean(np.array(gates) > 0.5), np.mean(gaps)


# ----------------------------------------------------------------------------- TokenSum


def test_token_sum_add_and_mean_and_empty():
    a = L.TokenSum(jnp.float32(3.0), jnp.float32(2.0))
    b = L.TokenSum(jnp.float32(5.0), jnp.float32(6.0))
    assert float((a + b).mean()) == pytest.approx(1.0)
    assert float(L.TokenSum(jnp.float32(0.0), jnp.float32(0.0)).mean()) == 0.0
    # pytree: jit round trip and tree arithmetic
    c = jax.jit(lambda x: x)(a)
    assert isinstance(c, L.TokenSum)
    d = jax.tree.map(jnp.add, a, b)
    assert float(d.total) == 8.0 and float(d.count) == 8.0


def test_masked_mean_matches_numpy():
    rng = _rng(1)
    x = rng.normal(size=(B, R)).astype(np.float32)
    m = (rng.random((B, R)) < 0.5).astype(np.float32)
    assert float(L.masked_mean(x, m)) == pytest.approx((x * m).sum() / m.sum(), rel=1e-5)


# ----------------------------------------------------------------------------- GRPO


@pytest.mark.parametrize("per_token_adv", [False, True])
@pytest.mark.parametrize("clips", [(0.2, 0.2, 3.0), (0.1, 0.28, 2.0), (0.2, 0.2, None)])
def test_grpo_matches_reference(per_token_adv, clips):
    logp, old, _, _, adv, mask = _batch(2)
    if per_token_adv:
        adv = _rng(3).normal(0, 2, (B, R)).astype(np.float32)
    old[:, 0] = logp[:, 0] - 2.0  # ratio e^2 > dual clip on every row's first token
    mask[:, 0] = 1.0
    cl, ch, c = clips
    out = L.grpo_policy_loss(logp, old, adv, mask, clip_low=cl, clip_high=ch, dual_clip=c)
    loss, cf, df, kl = ref_grpo(logp, old, adv, mask, cl, ch, c)
    s = out.summary()
    np.testing.assert_allclose(float(s["loss"]), loss, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(float(s["clip_frac"]), cf, atol=1e-6)
    np.testing.assert_allclose(float(s["dual_clip_frac"]), df, atol=1e-6)
    np.testing.assert_allclose(float(s["approx_kl"]), kl, rtol=1e-5, atol=1e-6)
    assert float(out.loss.count) == mask.sum()
    assert 0 < cf < 1  # the random batch exercises both clipped and unclipped tokens
    if c is not None:
        assert df > 0


def test_grpo_dual_clip_branches_by_hand():
    # One token per row: (advantage, ratio) chosen to hit each branch.
    cases = [
        # adv, ratio, expected loss, expected d loss/d logp, clip, dual
        (1.0, 1.5, -1.2, 0.0, 1, 0),    # A>0, ratio above 1+eps: clip high
        (1.0, 0.5, -0.5, -0.5, 0, 0),   # A>0, ratio low: unclipped
        (-1.0, 0.5, 0.8, 0.0, 1, 0),    # A<0, ratio below 1-eps: clip low (below dual bound 3)
        (-1.0, 5.0, 3.0, 0.0, 0, 1),    # A<0, huge ratio: dual clip caps at -c*A = 3
        (-1.0, 1.1, 1.1, 1.1, 0, 0),    # A<0, inside: unclipped, 1.1 < 3
        (2.0, 1.1, -2.2, -2.2, 0, 0),   # A>0 inside: unclipped
        (-2.0, 1.25, 2.5, 2.5, 0, 0),   # A<0, ratio above 1+eps: max picks unclipped -A*rho
    ]
    adv = np.array([c[0] for c in cases], np.float32)
    old = np.full((len(cases), 1), -1.0, np.float32)
    logp = (old[:, 0] + np.log([c[1] for c in cases])).astype(np.float32)[:, None]
    mask = np.ones_like(logp)
    out = L.grpo_policy_loss(logp, old, adv, mask)
    n = len(cases)
    expected = sum(c[2] for c in cases) / n
    np.testing.assert_allclose(float(out.loss.mean()), expected, rtol=1e-5)
    assert float(out.metrics["clip_frac"].total) == sum(c[4] for c in cases)
    assert float(out.metrics["dual_clip_frac"].total) == sum(c[5] for c in cases)
    # per-token values through single-row calls
    single = jax.jit(L.grpo_policy_loss)
    for k, c in enumerate(cases):
        o = single(logp[k:k + 1], old[k:k + 1], adv[k:k + 1], mask[k:k + 1])
        np.testing.assert_allclose(float(o.loss.total), c[2], rtol=1e-5, err_msg=str(c))
    g = jax.grad(lambda lp: L.grpo_policy_loss(lp, old, adv, mask).loss.mean())(logp)
    np.testing.assert_allclose(np.asarray(g)[:, 0], [c[3] / n for c in cases], rtol=1e-5,
                               atol=1e-7)


def test_grpo_bad_inputs():
    logp, old, _, _, adv, mask = _batch()
    with pytest.raises(ValueError, match="advantages"):
        L.grpo_policy_loss(logp, old, adv[:3], mask)
    with pytest.raises(ValueError, match="old_logp"):
        L.grpo_policy_loss(logp, old[:, :3], adv, mask)
    with pytest.raises(ValueError, match="dual_clip"):
        L.grpo_policy_loss(logp, old, adv, mask, dual_clip=0.5)


# ----------------------------------------------------------------------------- KL


@pytest.mark.parametrize("kind", ["k1", "abs", "mse", "low_var_kl"])
def test_kl_kinds_match_reference(kind):
    logp, _, ref, _, _, mask = _batch(4)
    # extreme entries exercise the k3 clamps
    ref = ref.copy()
    ref[1, 0], ref[1, 1], ref[1, 2] = logp[1, 0] + 5.0, logp[1, 1] - 30.0, logp[1, 2] + 30.0
    expect = ref_kl(logp, ref, kind)
    got = np.asarray(L.kl_penalty(logp, ref, kind))
    np.testing.assert_allclose(got, expect, rtol=1e-5, atol=1e-5)
    ts = L.kl_penalty_sum(logp, ref, mask, kind)
    np.testing.assert_allclose(float(ts.total), (expect * mask).sum(), rtol=1e-5, atol=1e-5)
    assert float(ts.count) == mask.sum()


def test_kl_k3_hand_values_and_aliases():
    lp = jnp.array([0.0, 0.0, 0.0])
    rf = jnp.array([0.0, math.log(2.0), 5.0])
    # exp(d) - d - 1 for d = 0, ln 2, 5 (clamped to 10)
    np.testing.assert_allclose(np.asarray(L.kl_penalty(lp, rf, "low_var_kl")),
                               [0.0, 1.0 - math.log(2.0), 10.0], rtol=1e-6, atol=1e-7)
    assert L.KL_ESTIMATORS["k3"] is L.KL_ESTIMATORS["low_var_kl"]
    assert L.KL_ESTIMATORS["k2"] is L.KL_ESTIMATORS["mse"]
    with pytest.raises(ValueError, match="unknown KL kind"):
        L.kl_penalty(lp, rf, "k9")


# ----------------------------------------------------------------------------- entropy


def test_entropy_matches_numpy():
    rng = _rng(5)
    logits = (rng.normal(0, 3, (B, R, 17))).astype(np.float32)
    logits[0, 0, :5] = -np.inf  # masked vocabulary entries
    logits[0, 1] = 0.0  # uniform: log 17
    logits[0, 2] = -1e4
    logits[0, 2, 3] = 50.0  # near one-hot: ~0
    got = np.asarray(L.entropy_from_logits(logits))
    np.testing.assert_allclose(got, ref_entropy(logits), rtol=1e-5, atol=1e-5)
    assert got[0, 1] == pytest.approx(math.log(17), rel=1e-6)
    mask = (rng.random((B, R)) < 0.6).astype(np.float32)
    ts = L.entropy_sum(logits, mask)
    np.testing.assert_allclose(float(ts.total), (ref_entropy(logits) * mask).sum(), rtol=1e-5)
    # large shifts: still stable
    shifted = logits[1:] + np.float32(1e4)
    np.testing.assert_allclose(np.asarray(L.entropy_from_logits(shifted)),
                               ref_entropy(shifted), rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------- OPD


@pytest.mark.parametrize("beta", [5.0, 1.0])
def test_opd_matches_reference(beta):
    logp, _, _, teacher, _, mask = _batch(6)
    out = L.opd_loss(logp, teacher, mask, beta=beta)
    loss, gm, gh, gap = ref_opd(logp, teacher, mask, beta)
    s = out.summary()
    np.testing.assert_allclose(float(s["loss"]), loss, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(float(s["gate_mean"]), gm, rtol=1e-5)
    np.testing.assert_allclose(float(s["gate_gt_half"]), gh, atol=1e-6)
    np.testing.assert_allclose(float(s["teacher_gap"]), gap, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(float(s["active_share"]), mask.mean(), rtol=1e-6)
    assert 0 < gh < 1


def test_opd_response_mask_denominator():
    logp, _, _, teacher, _, resp = _batch(7)
    has_skill = np.array([1, 0, 1, 1, 0, 1], np.float32)[:, None]
    m = resp * has_skill
    out = L.opd_loss(logp, teacher, m, response_mask=resp)
    loss, *_ = ref_opd(logp, teacher, m, 5.0, response_mask=resp)
    np.testing.assert_allclose(float(out.loss.mean()), loss, rtol=1e-5)
    assert float(out.loss.count) == resp.sum()
    np.testing.assert_allclose(float(out.metrics["active_share"].mean()), m.sum() / resp.sum(),
                               rtol=1e-6)


def test_opd_gradient_is_minus_gate_over_n_and_none_to_teacher():
    logp, _, _, teacher, _, mask = _batch(8)
    beta = 5.0
    fn = lambda lp, t: L.opd_loss(lp, t, mask, beta=beta).loss.mean()  # noqa: E731
    g_l, g_t = jax.grad(fn, argnums=(0, 1))(logp, teacher)
    gate = 1.0 / (1.0 + np.exp(-beta * (teacher.astype(np.float64) - logp)))
    expect = np.where(mask != 0, -gate / mask.sum(), 0.0)
    np.testing.assert_allclose(np.asarray(g_l), expect, rtol=1e-5, atol=1e-9)
    assert np.all(np.asarray(g_t) == 0.0)
    # the pushes are only upward on sampled tokens
    assert np.all(np.asarray(g_l) <= 0.0)


# ----------------------------------------------------------------------------- micro-batching


@jax.jit
def _all_losses(logp, old, ref, teacher, adv, mask, logits):
    return {
        "pg": L.grpo_policy_loss(logp, old, adv, mask),
        "opd": L.opd_loss(logp, teacher, mask),
        "kl": L.kl_penalty_sum(logp, ref, mask, "low_var_kl"),
        "ent": L.entropy_sum(logits, mask),
    }


def test_microbatch_sums_equal_full_batch():
    logp, old, ref, teacher, adv, mask = _batch(9)
    mask[4:] = 0.0  # one micro-batch nearly empty -> unequal token counts
    mask[5, 0] = 1.0
    logits = _rng(9).normal(size=(B, R, 11)).astype(np.float32)
    args = (logp, old, ref, teacher, adv, mask, logits)
    full = _all_losses(*args)
    parts = [_all_losses(*(a[s] for a in args)) for s in (slice(0, 4), slice(4, B))]
    pooled = jax.tree.map(jnp.add, parts[0], parts[1])
    for name in full:
        f, p = full[name], pooled[name]
        if isinstance(f, L.LossOutput):
            for k, v in f.summary().items():
                np.testing.assert_allclose(float(p.summary()[k]), float(v), rtol=1e-6,
                                           atol=1e-6, err_msg=f"{name}.{k}")
            assert isinstance(parts[0][name] + parts[1][name], L.LossOutput)
        else:
            np.testing.assert_allclose(float(p.mean()), float(f.mean()), rtol=1e-6, atol=1e-6)
    # naive mean of micro-batch means is NOT the same (the test can fail)
    naive = 0.5 * (float(parts[0]["pg"].loss.mean()) + float(parts[1]["pg"].loss.mean()))
    assert abs(naive - float(full["pg"].loss.mean())) > 1e-3


def test_microbatch_gradient_accumulation_exact():
    logp, old, ref, teacher, adv, mask = _batch(10)

    def total(lp, bounds):
        sl = slice(*bounds)
        pg = L.grpo_policy_loss(lp, old[sl], adv[sl], mask[sl]).loss
        opd = L.opd_loss(lp, teacher[sl], mask[sl]).loss
        kl = L.kl_penalty_sum(lp, ref[sl], mask[sl])
        return pg.total + 0.01 * opd.total + 0.01 * kl.total

    n = mask.sum()
    grad = jax.jit(jax.grad(lambda lp, sl: total(lp, sl) / n), static_argnums=1)
    full = grad(logp, (0, B))
    acc = np.concatenate([np.asarray(grad(logp[a:b], (a, b))) for a, b in ((0, 2), (2, B))])
    np.testing.assert_allclose(acc, np.asarray(full), rtol=1e-6, atol=1e-8)


# ----------------------------------------------------------------------------- masks and NaN


def test_masked_nan_does_not_leak():
    logp, old, ref, teacher, adv, mask = _batch(11)
    logits = _rng(11).normal(size=(B, R, 7)).astype(np.float32)
    adv_tok = np.repeat(adv[:, None], R, axis=1)
    clean = _all_losses(logp, old, ref, teacher, adv_tok, mask, logits)
    bad = [x.copy() for x in (logp, old, ref, teacher, adv_tok)]
    hole = mask == 0
    assert hole.any()
    for k, x in enumerate(bad):
        x[hole] = [np.nan, np.inf, -np.inf, np.nan, np.inf][k]
    bad_logits = logits.copy()
    bad_logits[hole] = np.nan
    dirty = _all_losses(*bad, mask, bad_logits)
    for a, b in zip(jax.tree.leaves(clean), jax.tree.leaves(dirty)):
        np.testing.assert_allclose(float(b), float(a), rtol=1e-6)

    def f(lp, lg):
        o = _all_losses(lp, bad[1], bad[2], bad[3], bad[4], mask, lg)
        return o["pg"].loss.total + o["opd"].loss.total + o["kl"].total + o["ent"].total

    g_lp, g_lg = jax.jit(jax.grad(f, argnums=(0, 1)))(bad[0], bad_logits)
    assert np.all(np.isfinite(g_lp)) and np.all(np.asarray(g_lp)[hole] == 0)
    assert np.all(np.isfinite(g_lg)) and np.all(np.asarray(g_lg)[hole] == 0)


def test_registered_losses_under_jit_match_the_references():
    """The functions behind the registries' names (what configs select), run under `jax.jit`,
    against the loop-style references of this file (`ref_grpo`, `ref_opd`, `ref_kl`) and, for the
    advantage estimators, hand-computed values; not against an eager call of the same function."""
    logp, old, ref, teacher, adv, mask = _batch(12)
    old[:, 0] = logp[:, 0] - 2.0  # ratio e^2: clipped tokens, and the dual clip on A < 0 rows
    mask[:, 0] = 1.0
    s = jax.jit(L.POLICY_LOSSES["grpo"])(logp, old, adv, mask).summary()
    loss, cf, df, kl = ref_grpo(logp, old, adv, mask)
    np.testing.assert_allclose([float(s[k]) for k in ("loss", "clip_frac", "dual_clip_frac", "approx_kl")],
                               [loss, cf, df, kl], rtol=1e-5, atol=1e-6)
    assert cf > 0 and df > 0
    o = jax.jit(L.opd_loss, static_argnames="beta")(logp, teacher, mask, beta=5.0).summary()
    loss, gm, gh, gap = ref_opd(logp, teacher, mask, 5.0)
    np.testing.assert_allclose([float(o[k]) for k in ("loss", "gate_mean", "gate_gt_half", "teacher_gap")],
                               [loss, gm, gh, gap], rtol=1e-5, atol=1e-6)
    for name, kind in {"k1": "k1", "abs": "abs", "mse": "mse", "k2": "mse", "low_var_kl": "low_var_kl",
                       "k3": "low_var_kl"}.items():
        np.testing.assert_allclose(np.asarray(jax.jit(L.KL_ESTIMATORS[name])(logp, ref)), ref_kl(logp, ref, kind),
                                   rtol=1e-5, atol=1e-5, err_msg=name)
    # R = 10, 0, 0, 10 in one group: mean 5, unbiased std sqrt(100 / 3)
    r, g = [10.0, 0.0, 0.0, 10.0], [0, 0, 0, 0]
    z = 5.0 / math.sqrt(100.0 / 3.0)
    for name, want in {"mean_std": [z, -z, -z, z], "step_pooled": [z, -z, -z, z], "mean": [5.0, -5.0, -5.0, 5.0],
                       "step_pooled_mean": [5.0, -5.0, -5.0, 5.0]}.items():
        np.testing.assert_allclose(L.ADVANTAGE_ESTIMATORS[name](r, g, 0.0), want, rtol=1e-6, err_msg=name)


# ----------------------------------------------------------------------------- advantages


def test_group_advantages_hand_values():
    r = [10.0, 0.0, 0.0, 10.0, 5.0, 1.0, 1.0]
    g = ["a", "a", "a", "a", "b", "c", "c"]
    s = math.sqrt(100.0 / 3.0)  # unbiased std of [10, 0, 0, 10]
    a = L.group_advantages(r, g)
    assert a.dtype == np.float32
    np.testing.assert_allclose(a, [5 / s, -5 / s, -5 / s, 5 / s, 0, 0, 0], rtol=1e-5)
    np.testing.assert_allclose(L.group_advantages(r, g, mode="mean"),
                               [5, -5, -5, 5, 0, 0, 0], rtol=1e-6)
    # unequal-size groups and integer ids, [3, 0] -> mean 1.5, unbiased std 3/sqrt(2)
    a2 = L.group_advantages([3.0, 0.0, 2.0, 4.0, 9.0], [7, 7, 1, 1, 1], eps=0.0)
    s3 = math.sqrt(13.0)  # [2, 4, 9] -> mean 5, deviations -3, -1, 4, unbiased var 26/2
    np.testing.assert_allclose(a2, [1.5 / (3 / math.sqrt(2)), -1.5 / (3 / math.sqrt(2)),
                                    -3 / s3, -1 / s3, 4 / s3], rtol=1e-5)
    # eps = 0 with degenerate groups: 0, not NaN
    np.testing.assert_array_equal(L.group_advantages([1.0, 1.0, 2.0], [0, 0, 1], eps=0.0),
                                  [0.0, 0.0, 0.0])
    with pytest.raises(ValueError, match="unknown advantage mode"):
        L.group_advantages(r, g, mode="gae")
    with pytest.raises(ValueError, match="equal length"):
        L.group_advantages(r, g[:3])


def test_group_advantages_random_vs_loop():
    rng = _rng(13)
    r = rng.normal(size=40)
    g = rng.integers(0, 6, size=40)
    got = L.group_advantages(r, g, eps=1e-6)
    for i in range(40):
        members = [r[j] for j in range(40) if g[j] == g[i]]
        if len(members) == 1:
            assert got[i] == 0.0
            continue
        mu = sum(members) / len(members)
        sd = math.sqrt(sum((x - mu) ** 2 for x in members) / (len(members) - 1))
        assert got[i] == pytest.approx((r[i] - mu) / (sd + 1e-6), rel=1e-5, abs=1e-6)


def test_step_scores_and_step_advantages():
    np.testing.assert_allclose(L.step_scores([10.0, 10.0, 0.0], [0.0, 0.1, 0.1]),
                               [10.0, 9.9, -0.1], rtol=1e-6)
    # trajectories: group q0 = {t0: R=1, t1: R=0}, group q1 = {t2: R=3} (singleton)
    rewards = [1.0, 0.0, 3.0]
    groups = ["q0", "q0", "q1"]
    # steps: t0 has 2 steps (second invalid, penalty 0.5), t1 has 1 step, t2 has 2 steps
    traj = [0, 0, 1, 2, 2]
    pen = [0.0, 0.5, 0.0, 0.0, 0.25]
    sd = math.sqrt(0.5)  # unbiased std of [1, 0]
    np.testing.assert_allclose(
        L.step_advantages(rewards, groups, traj, pen, mode="mean_std", eps=0.0),
        [0.5 / sd, 0.5 / sd - 0.5, -0.5 / sd, 0.0, -0.25], rtol=1e-5)
    np.testing.assert_allclose(
        L.step_advantages(rewards, groups, traj, pen, mode="mean"),
        [0.5, 0.0, -0.5, 0.0, -0.25], rtol=1e-6, atol=1e-7)
    # pooled over step-samples: q0 scores [1, 0.5, 0] -> mean 0.5, unbiased std 0.5;
    # q1 scores [3, 2.75] -> mean 2.875, unbiased std 0.125*sqrt(2)
    s1 = 0.125 * math.sqrt(2)
    np.testing.assert_allclose(
        L.step_advantages(rewards, groups, traj, pen, mode="step_pooled", eps=0.0),
        [1.0, 0.0, -1.0, 0.125 / s1, -0.125 / s1], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(
        L.step_advantages(rewards, groups, traj, pen, mode="step_pooled_mean"),
        [0.5, 0.0, -0.5, 0.125, -0.125], rtol=1e-5, atol=1e-6)
    # all-equal outcomes: no blow-up from the penalty
    a = L.step_advantages([0.0, 0.0], ["q", "q"], [0, 1], [0.1, 0.0])
    np.testing.assert_allclose(a, [-0.1, 0.0], atol=1e-6)
    with pytest.raises(ValueError, match="out of range"):
        L.step_advantages(rewards, groups, [0, 3], [0.0, 0.0])
    with pytest.raises(ValueError, match="integer"):
        L.step_advantages(rewards, groups, [0.0, 1.0], [0.0, 0.0])
