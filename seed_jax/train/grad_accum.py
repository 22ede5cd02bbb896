"""Exact gradient accumulation over micro-batches (one ``lax.scan``).

``loss_fn(params, micro_batch) -> (loss, aux)`` must already be normalised by the *global*
token count of the full batch (each token-mean written as ``sum_tokens / N_global``), so that

    loss_full = sum_i loss_fn(params, micro_i),   grad_full = sum_i grad loss_fn(params, micro_i)

hold exactly (up to float summation order); ``aux`` is a pytree of additive quantities
(e.g. `losses.TokenSum`) that is summed too. Micro-batch i takes rows ``{j * n + i}``, so
when the rows are sharded contiguously over devices every micro-batch stays evenly spread
and the split is a local reshape (no communication).
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from seed_jax.train.mesh import BATCH_AXES


def split_micro_batches(batch, num_micro: int, mesh=None):
    """``[B, ...]`` leaves -> ``[num_micro, B / num_micro, ...]`` (row ``j*n + i`` -> ``[i, j]``)."""
    def split(x):
        B = x.shape[0]
        if B % num_micro:
            raise ValueError(f"batch of {B} rows cannot be split into {num_micro} micro-batches")
        y = x.reshape(B // num_micro, num_micro, *x.shape[1:]).swapaxes(0, 1)
        if mesh is not None:
            y = jax.lax.with_sharding_constraint(y, NamedSharding(mesh, P(None, BATCH_AXES)))
        return y

    return jax.tree_util.tree_map(split, batch)


def accumulate_gradients(loss_fn: Callable, params, batch, num_micro: int, mesh=None):
    """``(loss, aux, grads)`` summed over ``num_micro`` micro-batches (module docstring).

    Gradients are accumulated in float32 and returned in the parameters' dtypes.
    """
    grad_fn = jax.value_and_grad(loss_fn, has_aux=True)
    if num_micro == 1:
        (loss, aux), grads = grad_fn(params, batch)
        return loss, aux, grads
    micro = split_micro_batches(batch, num_micro, mesh)
    first = jax.tree_util.tree_map(lambda x: x[0], micro)
    (loss_shape, aux_shape), _ = jax.eval_shape(grad_fn, params, first)
    zeros = lambda t: jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, jnp.float32), t)  # noqa: E731
    init = (zeros(loss_shape), zeros(aux_shape),
            jax.tree_util.tree_map(lambda p: jnp.zeros(p.shape, jnp.float32), params))

    def body(carry, mb):
        with jax.named_scope("micro_batch"):
            (loss, aux), grads = grad_fn(params, mb)
        add = lambda a, b: jax.tree_util.tree_map(lambda x, y: x + y.astype(jnp.float32), a, b)  # noqa: E731
        return (carry[0] + loss.astype(jnp.float32), add(carry[1], aux), add(carry[2], grads)), None

    (loss, aux, grads), _ = jax.lax.scan(body, init, micro)
    grads = jax.tree_util.tree_map(lambda g, p: g.astype(p.dtype), grads, params)
    return loss, aux, grads
