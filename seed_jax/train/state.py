"""`TrainState` (one pytree: params, optimizer state, counters, RNG) and the optimizer.

Optimizer (docs/METHOD.md §3.9): ``clip_by_global_norm(grad_clip)`` then AdamW with decoupled weight
decay (optax's ``adamw``: ``p <- p - lr * (adam_update + wd * p)``, as torch.optim.AdamW),
applied to every parameter (as the authors' verl/FSDP setup does), under a schedule:

    constant:         lr_t = lr
    warmup_constant:  lr_t = lr * min(1, (t + 1) / warmup_steps)
    cosine:           linear warm-up to lr over warmup_steps, then cosine decay to
                      lr * min_lr_ratio at total_steps

``t = TrainState.schedule_pos``, the schedule's position, in the unit of
``TrainConfig.schedule_unit``: ``"step"`` — applied optimizer steps (the step advances it; a
skipped non-finite step does not); ``"update"`` — RL updates (the step leaves it alone and the
RL stage sets it to the update's index with `at_schedule_pos`, so warm-up and decay follow
updates whatever the number of mini-batches an update holds).
"""

from __future__ import annotations

from typing import Any

import flax.struct
import jax
import jax.numpy as jnp
import optax

from seed_jax.models.config import resolve_dtype
from seed_jax.models.decoder import init_params
from seed_jax.train.config import TrainConfig
from seed_jax.train.mesh import tree_shardings


@flax.struct.dataclass
class TrainState:
    """Everything a resumed run needs on device.

    ``step``: number of train-step calls (skipped ones included); ``data_pos``: rows of
    training data consumed (incremented by the batch size in each step); ``rng``: a raw
    ``uint32[2]`` PRNG key for host-side use (the step itself is deterministic);
    ``skipped``: number of steps skipped by the non-finite guard; ``schedule_pos``: the
    learning-rate schedule's position ``t`` (module docstring).
    """

    params: Any
    opt_state: Any
    step: jax.Array
    data_pos: jax.Array
    skipped: jax.Array
    rng: jax.Array
    schedule_pos: jax.Array


def make_schedule(cfg: TrainConfig) -> optax.Schedule:
    """Learning rate as a function of the number of applied updates (module docstring)."""
    if cfg.schedule == "constant":
        return optax.constant_schedule(cfg.lr)
    if cfg.schedule == "warmup_constant":
        w = cfg.warmup_steps
        return lambda t: cfg.lr * jnp.minimum(1.0, (t + 1.0) / w)
    return optax.warmup_cosine_decay_schedule(
        init_value=0.0 if cfg.warmup_steps else cfg.lr, peak_value=cfg.lr,
        warmup_steps=cfg.warmup_steps, decay_steps=cfg.total_steps,
        end_value=cfg.lr * cfg.min_lr_ratio)


def make_optimizer(cfg: TrainConfig) -> optax.GradientTransformation:
    """Global-norm clipping + AdamW without its learning rate: ``u = adam(g) + wd * p``.

    The step applies ``p <- p - lr_t * u`` with ``lr_t = make_schedule(cfg)(schedule_pos)``
    (`seed_jax.train.update.apply_update`), which is optax's ``adamw`` with the schedule read
    from the train state instead of the optimizer's own step count.
    """
    parts = []
    if cfg.grad_clip is not None:
        parts.append(optax.clip_by_global_norm(cfg.grad_clip))
    parts += [optax.scale_by_adam(b1=cfg.adam_b1, b2=cfg.adam_b2, eps=cfg.adam_eps),
              optax.add_decayed_weights(cfg.weight_decay)]
    return optax.chain(*parts)


def at_schedule_pos(state: TrainState, pos: int) -> TrainState:
    """``state`` with the schedule at position ``pos`` (kept on its devices and sharding)."""
    return state.replace(schedule_pos=jax.device_put(jnp.asarray(pos, jnp.int32), state.schedule_pos.sharding))


def init_train_state(params, train_cfg: TrainConfig, rng: jax.Array | int = 0) -> TrainState:
    """A fresh state: params cast to ``train_cfg.param_dtype``, optimizer initialised.

    Pure (jit-able). Use `seed_jax.train.mesh.create_sharded_state` to build it sharded.
    """
    pdtype = resolve_dtype(train_cfg.param_dtype)
    params = jax.tree_util.tree_map(lambda p: jnp.asarray(p, pdtype), params)
    if isinstance(rng, int):
        rng = jax.random.PRNGKey(rng)
    return TrainState(
        params=params,
        opt_state=make_optimizer(train_cfg).init(params),
        step=jnp.zeros((), jnp.int32),
        data_pos=jnp.zeros((), jnp.int32),
        skipped=jnp.zeros((), jnp.int32),
        rng=jnp.asarray(rng, jnp.uint32),
        schedule_pos=jnp.zeros((), jnp.int32),
    )


def state_shardings(abstract_state: TrainState, mesh):
    """NamedShardings of a (possibly abstract) TrainState by `mesh.PARAM_RULES`."""
    return tree_shardings(abstract_state, mesh)


def create_sharded_state(params, train_cfg: TrainConfig, mesh, rng: jax.Array | int = 0) -> TrainState:
    """`init_train_state` run under ``jax.jit`` with the rule-based output shardings."""
    if isinstance(rng, int):
        rng = jax.random.PRNGKey(rng)

    def init(p, r):
        return init_train_state(p, train_cfg, r)

    abstract = jax.eval_shape(init, params, rng)
    return jax.jit(init, out_shardings=state_shardings(abstract, mesh))(params, rng)


def abstract_train_state(model_cfg, train_cfg: TrainConfig) -> TrainState:
    """ShapeDtypeStructs of the TrainState for a model config (no parameters are allocated)."""
    cfg = train_cfg.apply_to(model_cfg)
    return jax.eval_shape(
        lambda: init_train_state(init_params(cfg, jax.random.PRNGKey(0)), train_cfg,
                                 jax.random.PRNGKey(0)))
