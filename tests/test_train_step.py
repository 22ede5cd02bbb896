"""The SEED / GRPO / SFT train steps against independent references (tiny float32 model)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from seed_jax.models import decoder
from seed_jax.train.config import ConfigError, TrainConfig
from seed_jax.train.logprobs import compute_logprobs
from seed_jax.train.mesh import make_mesh
from seed_jax.train.sft import make_sft_step
from seed_jax.train.state import create_sharded_state, make_schedule
from seed_jax.train.step import make_train_step, seed_loss_and_grads
from seed_jax.train.synthetic import random_params, synthetic_seed_batch, synthetic_sft_batch, tiny_config
from seed_jax.train.update import metric_means, pool_metrics

CFG = tiny_config()
# adam_eps 1e-3 keeps the first Adam step (lr * g / (|g| + eps)) well conditioned, so that
# float summation-order noise in a near-zero gradient entry cannot flip its update.
TC = TrainConfig(lr=1e-3, weight_decay=0.01, grad_clip=1.0, c_ent=0.01, c_kl=0.1,
                 lambda_opd=0.5, beta_opd=5.0, adam_eps=1e-3)
B, P, Pt, R = 8, 6, 7, 8
forward = jax.jit(decoder.forward, static_argnums=1)


@pytest.fixture(scope="module")
def mesh():
    return make_mesh(devices=jax.devices()[:1])


@pytest.fixture(scope="module")
def params():
    return jax.device_get(random_params(CFG, 0))


@pytest.fixture(scope="module")
def batch(params):
    """Old / ref log-probs near the model's own (so ratios and k3 stay in a realistic range,
    with both the PPO clip and the dual clip active on some tokens)."""
    b = synthetic_seed_batch(0, B, P, R, Pt, CFG.vocab_size).replace(teacher_logp=None)
    lp = compute_logprobs(params, CFG, b.student_ids, b.student_mask, P, R, micro_batch=B)
    rng = np.random.default_rng(1)
    m = b.response_mask
    return b.replace(old_logp=((lp + rng.normal(0, 1.0, lp.shape)) * m).astype(np.float32),
                     ref_logp=((lp + rng.normal(0, 0.5, lp.shape)) * m).astype(np.float32),
                     advantages=(rng.normal(0, 1, (B, 1)) * m).astype(np.float32))


def one_step(tc, params, batch, mesh):
    state = create_sharded_state(params, tc, mesh)
    state, metrics = make_train_step(CFG, tc, mesh)(state, batch)
    return jax.device_get(state), metric_means(metrics)


def assert_trees_close(a, b, atol, rtol=0.0):
    fa, ta = jax.tree_util.tree_flatten_with_path(a)
    fb, tb = jax.tree_util.tree_flatten_with_path(b)
    assert ta == tb
    for (path, x), (_, y) in zip(fa, fb):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), atol=atol, rtol=rtol,
                                   err_msg=jax.tree_util.keystr(path))


# ------------------------------------------------------------------------------- micro-batching


def test_micro_batched_step_equals_full_batch(params, batch, mesh):
    full_state, full_m = one_step(TC, params, batch, mesh)
    # Micro-batched AND the LM head chunked over 3 response positions (padded remainder):
    # chunked log-softmax / entropy gradients must match the unchunked full batch.
    micro_state, micro_m = one_step(TC.replace(micro_batch_size=2, logits_chunk=3), params,
                                    batch, mesh)
    assert_trees_close(full_state.params, micro_state.params, atol=1e-5)
    # The step really moved the parameters (lr 1e-3), so the comparison is not vacuous.
    moved = max(float(np.max(np.abs(np.asarray(a) - np.asarray(b)))) for a, b in zip(
        jax.tree_util.tree_leaves(full_state.params), jax.tree_util.tree_leaves(params)))
    assert moved > 5e-4
    for k in ("loss", "pg_loss", "entropy", "kl", "opd_loss", "grad_norm", "clip_frac",
              "opd_gate_mean", "opd_active_share", "tokens"):
        np.testing.assert_allclose(micro_m[k], full_m[k], rtol=1e-5, atol=1e-6, err_msg=k)
    assert full_m["tokens"] == batch.response_mask.sum()
    assert full_m["clip_frac"] > 0 and full_m["skipped"] == 0
    assert int(full_state.step) == 1 and int(full_state.data_pos) == B


def _saved_residuals(cfg, params, tokens, mask) -> int:
    """How many residuals the backward pass of a forward keeps (jax's own report)."""
    import contextlib
    import io

    from jax.ad_checkpoint import print_saved_residuals

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        print_saved_residuals(lambda p: decoder.forward(p, cfg, tokens, mask).sum(), params)
    return len(buf.getvalue().splitlines())


def test_remat_policies_same_gradients_and_keep_what_they_say(params, batch):
    from seed_jax.models.config import REMAT_POLICIES
    from seed_jax.train.logprobs import response_logprobs

    def grads(p, remat):
        cfg = CFG.replace(remat=remat)
        loss = lambda p: jnp.sum(response_logprobs(p, cfg, batch.student_ids, batch.student_mask, P, R)[0]  # noqa: E731
                                 * batch.response_mask)
        return jax.grad(loss)(p)

    every = jax.device_get(jax.jit(lambda p: [grads(p, name) for name in REMAT_POLICIES])(params))
    for g in every[1:]:
        assert_trees_close(g, every[0], atol=1e-6, rtol=1e-5)
    ids, mask = jnp.asarray(batch.student_ids), jnp.asarray(batch.student_mask)
    kept = {name: _saved_residuals(CFG.replace(remat=name), params, ids, mask)
            for name in REMAT_POLICIES + (True, False)}
    # each policy keeps a strict superset of the next one's block tensors
    assert kept["none"] > kept["save_dots"] > kept["save_dots_except_mlp"] > kept["save_qkv_proj"] \
        > kept["full"], kept
    assert kept["offload"] == kept["save_dots_except_mlp"] and kept[True] == kept["full"] \
        and kept[False] == kept["none"], kept
    with pytest.raises(ValueError, match="remat must be"):
        CFG.replace(remat="some")


@pytest.mark.slow
def test_remat_and_bf16_compute_with_f32_master_weights(params, batch, mesh):
    base_state, base_m = one_step(TC, params, batch, mesh)
    remat_state, remat_m = one_step(TC.replace(remat=True), params, batch, mesh)
    assert_trees_close(base_state.params, remat_state.params, atol=1e-5)
    np.testing.assert_allclose(remat_m["loss"], base_m["loss"], rtol=1e-5)
    bf_state, bf_m = one_step(TC.replace(compute_dtype="bfloat16"), params, batch, mesh)
    assert {x.dtype for x in jax.tree_util.tree_leaves(bf_state.params)} == {np.dtype("float32")}
    assert abs(bf_m["loss"] - base_m["loss"]) < 0.05 * abs(base_m["loss"]) + 1e-2
    assert bf_m["skipped"] == 0


# ------------------------------------------------------------- gradient vs hand-written loss


def _row_logp(logits_row, ids_row, start):
    """Hand-written log-softmax + one-hot gather + entropy for one row's response positions."""
    z = logits_row[start - 1:start - 1 + R]
    z = z - jnp.max(z, axis=-1, keepdims=True)
    logq = z - jnp.log(jnp.sum(jnp.exp(z), axis=-1, keepdims=True))
    onehot = jax.nn.one_hot(ids_row[start:start + R], CFG.vocab_size)
    return jnp.sum(onehot * logq, -1), -jnp.sum(jnp.exp(logq) * logq, -1)


def reference_loss(p, b, teacher_params, gate_logp, tc, opd_mask=None):
    """Hand-written per-row loss, vmapped over rows, summed, / N (docs/METHOD.md §3.8):
    per token pg - c_ent H + c_kl k3 + lambda has_skill m_opd g (t - l) (m_opd: ``opd_mask``,
    1 on every token when None)."""

    def row(sid, smask, tid, tmask, a, old, ref, m, skill, gl, om):
        l, ent = _row_logp(decoder.forward(p, CFG, sid[None], smask[None])[0], sid, P)
        t, _ = _row_logp(decoder.forward(teacher_params, CFG, tid[None], tmask[None])[0], tid, Pt)
        rho = jnp.exp(l - old)
        ppo = jnp.maximum(-a * rho, -a * jnp.clip(rho, 1 - tc.clip_low, 1 + tc.clip_high))
        pg = jnp.where(a < 0, jnp.minimum(ppo, -a * tc.dual_clip), ppo)
        d = ref - l
        k3 = jnp.clip(jnp.exp(d) - d - 1, -10, 10)
        gate = 1.0 / (1.0 + jnp.exp(-tc.beta_opd * (jax.lax.stop_gradient(t) - gl)))
        tok = pg - tc.c_ent * ent + tc.c_kl * k3 + tc.lambda_opd * skill * om * gate * (t - l)
        return jnp.sum(jnp.where(m > 0, tok, 0.0))

    keys = ("student_ids", "student_mask", "teacher_ids", "teacher_mask", "advantages",
            "old_logp", "ref_logp", "response_mask", "has_skill")
    om = jnp.ones_like(b.response_mask) if opd_mask is None else opd_mask
    per_row = jax.vmap(row)(*(getattr(b, k) for k in keys), gate_logp, om)
    return jnp.sum(per_row) / b.response_mask.sum()


def test_seed_gradient_equals_handwritten_reference(params, batch):
    """Teacher pass on current params, and precomputed teacher_logp (teacher_from_old) taken
    with the same params, both give the gradient of an independent per-row loss."""
    b = batch
    tc = TC.replace(micro_batch_size=4)
    loss, metrics, grads = jax.jit(lambda p, bb: seed_loss_and_grads(p, bb, CFG, tc))(params, b)
    assert metrics["dual_clip_frac"] > 0 and metrics["clip_frac"] > 0

    # Teacher log-probs and the gate's sg(l) are constants of the reference (computed outside
    # the differentiated function), so only grad l enters: the stop_gradient semantics.
    gate_logp = compute_logprobs(params, CFG, b.student_ids, b.student_mask, P, R, B)
    ref_loss, ref_grads = jax.jit(jax.value_and_grad(
        lambda p: reference_loss(p, b, params, gate_logp, TC)))(params)
    np.testing.assert_allclose(float(loss), float(ref_loss), rtol=1e-5)
    assert_trees_close(grads, ref_grads, atol=2e-6, rtol=1e-4)

    # Authors' path: teacher_logp precomputed (here with the same params), no teacher ids.
    tb = b.replace(teacher_ids=None, teacher_mask=None,
                   teacher_logp=compute_logprobs(params, CFG, b.teacher_ids, b.teacher_mask, Pt, R, B))
    tco = tc.replace(teacher_from_old=True)
    loss_o, _, grads_o = jax.jit(lambda p, bb: seed_loss_and_grads(p, bb, CFG, tco))(params, tb)
    np.testing.assert_allclose(float(loss_o), float(ref_loss), rtol=1e-5)
    assert_trees_close(grads_o, ref_grads, atol=2e-6, rtol=1e-4)


def test_opd_acts_only_on_the_batch_opd_mask(params, batch):
    """``batch.opd_mask`` (opd.mask = action: the valid steps' action tokens) limits the OPD
    term to its tokens; policy gradient, entropy and KL keep every response token and N."""
    b = batch
    rng = np.random.default_rng(3)
    om = (b.response_mask * (rng.random(b.response_mask.shape) < 0.5)).astype(np.float32)
    mb = b.replace(opd_mask=om)
    tc = TC.replace(micro_batch_size=4)
    loss, _, grads = jax.jit(lambda p, bb: seed_loss_and_grads(p, bb, CFG, tc))(params, mb)
    gate_logp = compute_logprobs(params, CFG, b.student_ids, b.student_mask, P, R, B)
    ref_loss, ref_grads = jax.jit(jax.value_and_grad(
        lambda p: reference_loss(p, b, params, gate_logp, TC, opd_mask=om)))(params)
    np.testing.assert_allclose(float(loss), float(ref_loss), rtol=1e-5)
    assert_trees_close(grads, ref_grads, atol=2e-6, rtol=1e-4)
    full = float(reference_loss(params, b, params, gate_logp, TC))
    assert abs(full - float(ref_loss)) > 1e-4  # the mask moves the loss: the check above can fail


@pytest.mark.slow
def test_reference_detects_a_leaking_teacher(params, batch):
    """The gradient test above can fail: letting gradient flow through the teacher branch
    moves the reference gradient by far more than that test's tolerance."""
    b = batch
    gate_logp = compute_logprobs(params, CFG, b.student_ids, b.student_mask, P, R, B)
    grad = lambda teacher: jax.jit(jax.grad(  # noqa: E731
        lambda p: reference_loss(p, b, teacher(p), gate_logp, TC)))(params)
    stopped, leaking = grad(lambda p: params), grad(lambda p: p)
    worst = max(float(np.max(np.abs(np.asarray(a) - np.asarray(c))))
                for a, c in zip(jax.tree_util.tree_leaves(leaking), jax.tree_util.tree_leaves(stopped)))
    assert worst > 100 * 2e-6


# ------------------------------------------------------------ teacher absent from GRPO program


def _compiled(tc, params, batch, mesh):
    state = create_sharded_state(params, tc, mesh)
    lowered = make_train_step(CFG, tc, mesh).lower(state, batch)
    return lowered.as_text(), lowered.compile().cost_analysis()["flops"]


def test_grpo_program_has_no_teacher_pass_and_seed_adds_forward_only(params, batch, mesh):
    # Same shapes as the other tests, so the SEED program is the cached full-batch step.
    # Student rows are P + R = 14 tokens, teacher rows Pt + R = 15.
    seed_text, seed_flops = _compiled(TC, params, batch, mesh)
    grpo_text, grpo_flops = _compiled(TC.replace(lambda_opd=0.0), params, batch, mesh)
    # Each decoder pass is one scan over the layers: student fwd + bwd (2), teacher fwd (1).
    n_seed, n_grpo = seed_text.count("stablehlo.while"), grpo_text.count("stablehlo.while")
    assert n_seed == n_grpo + 1, (n_seed, n_grpo)
    ratio = seed_flops / grpo_flops
    # one extra forward on top of forward + backward: ~4/3 (here a little more: the teacher
    # rows are one token longer); a teacher backward would give ~2.
    assert 1.2 < ratio < 1.45, ratio


# ---------------------------------------------------------------------------- non-finite guard


def test_nan_advantages_skip_the_update(params, batch, mesh):
    adv = batch.advantages.copy()
    adv[0, 0] = np.nan  # a valid token (every row has >= 1 response token)
    bad = batch.replace(advantages=adv)
    state = create_sharded_state(params, TC, mesh)
    before = jax.device_get(state)
    state, m = make_train_step(CFG, TC, mesh)(state, bad)
    after = jax.device_get(state)
    assert float(m["skipped"]) == 1.0 and not np.isfinite(float(m["loss"]))
    for x, y in zip(jax.tree_util.tree_leaves((before.params, before.opt_state)),
                    jax.tree_util.tree_leaves((after.params, after.opt_state))):
        np.testing.assert_array_equal(x, y)
    assert int(after.skipped) == 1 and int(after.step) == 1


# -------------------------------------------------------------------------------------- SFT


def test_sft_loss_is_masked_nll(params, mesh):
    sb = synthetic_sft_batch(5, B, P, R, CFG.vocab_size)
    logits = np.asarray(forward(params, CFG, sb.input_ids, sb.attention_mask), np.float64)
    nll, cnt = 0.0, 0
    for b in range(B):
        for j in range(R):
            if sb.loss_mask[b, j]:
                z = logits[b, P - 1 + j]
                nll -= z[sb.input_ids[b, P + j]] - z.max() - np.log(np.exp(z - z.max()).sum())
                cnt += 1
    tc = TC.replace(micro_batch_size=2)  # the token mean must stay exact when micro-batched
    state = create_sharded_state(params, tc, mesh)
    state, m = make_sft_step(CFG, tc, mesh)(state, sb)
    m = metric_means(m)
    np.testing.assert_allclose(m["loss"], nll / cnt, rtol=1e-5)
    np.testing.assert_allclose(m["nll"], nll / cnt, rtol=1e-5)
    assert m["tokens"] == cnt and m["skipped"] == 0


# ------------------------------------------------------------------- typed batch and pooling


def test_missing_batch_fields_are_named(params, batch, mesh):
    state = create_sharded_state(params, TC, mesh)
    with pytest.raises(ValueError, match="ref_logp"):
        make_train_step(CFG, TC, mesh)(state, batch.replace(ref_logp=None))
    with pytest.raises(ValueError, match="teacher_ids"):
        make_train_step(CFG, TC, mesh)(state, batch.replace(teacher_ids=None, teacher_mask=None))
    # GRPO without KL needs neither: the step runs and reports no KL
    tc = TC.replace(lambda_opd=0.0, c_kl=0.0)
    _, m = one_step(tc, params, batch.replace(ref_logp=None, teacher_ids=None, teacher_mask=None), mesh)
    assert "kl" not in m and "opd_loss" not in m and np.isfinite(m["loss"])


def test_pooled_metrics_of_two_half_steps_equal_one_full_step(params, batch, mesh):
    """Token means pool as sums over all tokens: the metrics of the two halves of a batch,
    pooled, equal the metrics of one step over the whole batch (same parameters, lr 0),
    although the halves hold different token counts (a plain mean of means would differ)."""
    tc = TC.replace(lr=0.0)
    _, full = make_train_step(CFG, tc, mesh)(create_sharded_state(params, tc, mesh), batch)
    halves = []
    for idx in (np.arange(0, B, 2), np.arange(1, B, 2)):
        _, m = make_train_step(CFG, tc, mesh)(create_sharded_state(params, tc, mesh), batch.take(idx))
        halves.append(m)
    pooled, full = pool_metrics(halves), metric_means(full)
    counts = [float(h["tokens"]) for h in halves]
    assert counts[0] != counts[1]
    for k in ("loss", "pg_loss", "entropy", "kl", "opd_loss", "opd_gate_mean", "clip_frac", "tokens"):
        np.testing.assert_allclose(pooled[k], full[k], rtol=1e-5, atol=1e-6, err_msg=k)
    # the naive mean of per-step means is not it
    naive = {k: np.mean([metric_means(h)[k] for h in halves]) for k in ("pg_loss", "kl", "opd_loss")}
    assert max(abs(naive[k] - full[k]) for k in naive) > 1e-3, naive
    assert pooled["optimizer_steps"] == 2 and pooled["skipped"] == 0


# ------------------------------------------------------------------------ config and schedule


@pytest.mark.parametrize("kw,field", [
    (dict(lr=-1.0), "lr"), (dict(schedule="cosine"), "total_steps"),
    (dict(kl_kind="k9"), "kl_kind"), (dict(dual_clip=0.5), "dual_clip"),
    (dict(compute_dtype="float8"), "compute_dtype"), (dict(micro_batch_size=0), "micro_batch_size"),
])
def test_config_errors_name_the_field(kw, field):
    with pytest.raises(ConfigError, match=f"TrainConfig.{field}"):
        TrainConfig(**kw)


def test_schedules():
    w = make_schedule(TrainConfig(lr=1.0, schedule="warmup_constant", warmup_steps=4))
    assert [float(w(t)) for t in range(6)] == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]
    c = make_schedule(TrainConfig(lr=1.0, schedule="cosine", warmup_steps=2, total_steps=10))
    assert float(c(0)) == 0.0 and float(c(2)) == pytest.approx(1.0)
    assert float(c(6)) == pytest.approx(0.5 * (1 + np.cos(np.pi * 4 / 8)), abs=1e-6)
    assert float(c(10)) == pytest.approx(0.0, abs=1e-7)
    assert float(make_schedule(TrainConfig(lr=0.3))(99)) == pytest.approx(0.3)
    with pytest.raises(ConfigError, match="micro_batch_size"):
        TrainConfig(micro_batch_size=3).num_micro_batches(8)
