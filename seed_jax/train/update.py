"""The optimizer update with the non-finite guard, the jit wrapper shared by all steps, and
the pooling of step metrics.

Guard: with ``ok = isfinite(loss) & isfinite(||g||_2)``, the new params and optimizer state
are ``where(ok, updated, old)`` leaf by leaf, so a step with a NaN/inf loss or gradient
leaves both untouched (``skipped = 1``; the step / data counters still advance).

Step metrics are of two kinds: token means are returned as `losses.TokenSum` (total, count),
so that several steps pool exactly (`pool_metrics`: ``sum(total) / sum(count)``, the mean over
all their tokens); per-step scalars (``loss``, ``grad_norm``, ``lr``, ``skipped``, ``tokens``)
pool as ``STEP_SCALAR_POOLING`` says.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax

from seed_jax.losses import TokenSum
from seed_jax.models.decoder import activation_sharding, cast_to_compute
from seed_jax.train.config import TrainConfig
from seed_jax.train.grad_accum import accumulate_gradients, constrain_tree
from seed_jax.train.mesh import batch_divisor, batch_sharding, replicated
from seed_jax.train.state import (
    TrainState,
    abstract_train_state,
    make_optimizer,
    make_schedule,
    state_shardings,
)


def apply_update(state: TrainState, grads, loss, train_cfg: TrainConfig, rows: int):
    """``(new_state, metrics)``: one guarded AdamW update (module docstring)."""
    optimizer = make_optimizer(train_cfg)
    gnorm = optax.tree.norm(grads)
    ok = jnp.isfinite(loss) & jnp.isfinite(gnorm)
    lr = jnp.asarray(make_schedule(train_cfg)(state.schedule_pos), jnp.float32)
    updates, new_opt = optimizer.update(grads, state.opt_state, state.params)
    new_params = optax.apply_updates(state.params, jax.tree_util.tree_map(lambda u: -lr * u, updates))
    keep = lambda new, old: jax.tree_util.tree_map(  # noqa: E731
        lambda a, b: jnp.where(ok, a, b), new, old)
    skipped = 1 - ok.astype(jnp.int32)
    advance = ok.astype(jnp.int32) if train_cfg.schedule_unit == "step" else 0
    new_state = state.replace(
        params=keep(new_params, state.params),
        opt_state=keep(new_opt, state.opt_state),
        step=state.step + 1,
        data_pos=state.data_pos + rows,
        skipped=state.skipped + skipped,
        schedule_pos=state.schedule_pos + advance,
    )
    metrics = {"grad_norm": gnorm, "lr": jnp.asarray(lr, jnp.float32),
               "skipped": skipped.astype(jnp.float32)}
    return new_state, metrics


def build_step(micro_loss: Callable, token_count: Callable, model_cfg, train_cfg: TrainConfig, mesh):
    """A jitted ``step(state, batch) -> (state, metrics)``.

    ``batch`` is a typed batch (`seed_jax.train.batch`): ``batch.validate(train_cfg)`` checks
    it (trace time); ``token_count(batch)`` is the global token count N;
    ``micro_loss(params, micro_batch, N) -> (loss, {name: TokenSum})`` with the loss already
    divided by N. State shardings follow `mesh.PARAM_RULES`, the batch is split by rows over
    ('data', 'fsdp'), metrics are replicated; the state is donated. ``micro_loss`` is traced
    under `decoder.activation_sharding(mesh)` (activations split by rows; on meshes of more
    than one device) and receives the
    parameters cast to the compute dtype (`decoder.cast_to_compute`, once per step on the
    sharded master weights, before any all-gather); gradients are accumulated in float32,
    constrained to the parameter shardings and returned in the master dtype. Metrics: the micro-loss's
    TokenSums (summed over micro-batches) and the scalars ``loss`` (the step's loss, a token
    mean over its N tokens), ``tokens`` (N), ``grad_norm``, ``lr``, ``skipped``.
    """
    div = batch_divisor(mesh)
    cfg = train_cfg.apply_to(model_cfg)
    shardings = state_shardings(abstract_train_state(model_cfg, train_cfg), mesh)

    def step(state: TrainState, batch):
        batch.validate(train_cfg)
        rows = batch.num_rows
        n_micro = train_cfg.num_micro_batches(rows)
        if (rows // n_micro) % div:
            raise ValueError(f"micro-batch of {rows // n_micro} rows is not a multiple of the "
                             f"data x fsdp mesh size {div}")
        n_tok = token_count(batch)
        with activation_sharding(mesh if mesh.size > 1 else None):
            # cast once, on the shards: every all-gather in the loops below moves compute-dtype bytes
            params = constrain_tree(cast_to_compute(state.params, cfg), shardings.params)
            loss, aux, grads = accumulate_gradients(
                lambda p, mb: micro_loss(p, mb, n_tok), params, batch, n_micro, mesh,
                grad_shardings=shardings.params, like=state.params)
        new_state, metrics = apply_update(state, grads, loss, train_cfg, rows)
        metrics.update(aux)
        metrics["loss"] = loss
        metrics["tokens"] = n_tok
        return new_state, metrics

    return jax.jit(step, in_shardings=(shardings, batch_sharding(mesh)),
                   out_shardings=(shardings, replicated(mesh)), donate_argnums=0)


# How each per-step scalar pools over several steps (`pool_metrics`): "token_mean" weights each
# step by its token count, "mean" is the plain mean over steps, "sum" adds, "last" keeps the last.
STEP_SCALAR_POOLING = {"loss": "token_mean", "grad_norm": "mean", "lr": "last", "skipped": "sum", "tokens": "sum"}


def metric_means(metrics: Mapping) -> dict[str, float]:
    """One step's metrics as floats: TokenSums -> ``total / max(count, 1)``, scalars as they are."""
    out = {}
    for k, v in jax.device_get(dict(metrics)).items():
        out[k] = float(np.asarray(v.total) / max(float(np.asarray(v.count)), 1.0)) if isinstance(v, TokenSum) \
            else float(np.asarray(v))
    return out


def pool_metrics(steps: Sequence[Mapping]) -> dict[str, float]:
    """Metrics of several steps pooled exactly (module docstring), plus ``optimizer_steps``.

    A TokenSum metric gives ``sum_i total_i / max(sum_i count_i, 1)``: the mean over every
    token of every step, as one step over all their rows would give. Scalars pool as
    ``STEP_SCALAR_POOLING`` says (unknown scalars: plain mean).
    """
    steps = [jax.device_get(dict(m)) for m in steps]
    out: dict[str, float] = {}
    keys = list(dict.fromkeys(k for m in steps for k in m))
    tokens = [float(np.asarray(m.get("tokens", 0.0))) for m in steps]
    for k in keys:
        vals = [m[k] for m in steps if k in m]
        if isinstance(vals[0], TokenSum):
            total = sum(float(np.asarray(v.total)) for v in vals)
            count = sum(float(np.asarray(v.count)) for v in vals)
            out[k] = total / max(count, 1.0)
            continue
        xs = [float(np.asarray(v)) for v in vals]
        how = STEP_SCALAR_POOLING.get(k, "mean")
        if how == "token_mean":
            w = [t for m, t in zip(steps, tokens) if k in m]
            out[k] = sum(x * t for x, t in zip(xs, w)) / max(sum(w), 1.0)
        elif how == "sum":
            out[k] = sum(xs)
        elif how == "last":
            out[k] = xs[-1]
        else:
            out[k] = sum(xs) / len(xs)
    out["optimizer_steps"] = float(len(steps))
    return out
