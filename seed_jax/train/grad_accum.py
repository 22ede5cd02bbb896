"""Exact gradient accumulation over micro-batches (one ``lax.scan``).

``loss_fn(params, micro_batch) -> (loss, aux)`` must already be normalised by the *global*
token count of the full batch (each token-mean written as ``sum_tokens / N_global``), so that

    loss_full = sum_i loss_fn(params, micro_i),   grad_full = sum_i grad loss_fn(params, micro_i)

hold exactly (up to float summation order); ``aux`` is a pytree of additive quantities
(e.g. `losses.TokenSum`) that is summed too. Micro-batch i takes rows ``{j * n + i}``, so
when the rows are sharded contiguously over devices every micro-batch stays evenly spread
and the split is a local reshape (no communication). With ``grad_shardings`` (the parameters'
NamedShardings) the float32 accumulators and each micro-batch's gradients are constrained to
them, so every micro-batch reduce-scatters its gradients into the sharded accumulator instead
of all-reducing whole ones (the ZeRO-3 pattern).
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


def constrain_tree(tree, shardings):
    """``tree`` with each leaf constrained to its sharding (identity for ``shardings=None``)."""
    if shardings is None:
        return tree
    return jax.tree_util.tree_map(jax.lax.with_sharding_constraint, tree, shardings)


def accumulate_gradients(loss_fn: Callable, params, batch, num_micro: int, mesh=None,
                         grad_shardings=None, like=None):
    """``(loss, aux, grads)`` summed over ``num_micro`` micro-batches (module docstring).

    Gradients are accumulated in float32 and returned in the dtypes of ``like`` (default:
    ``params``; e.g. the float32 master weights when ``params`` is their bfloat16 cast); with
    ``grad_shardings`` they are constrained to those shardings.
    """
    grad_fn = jax.value_and_grad(loss_fn, has_aux=True)
    like = params if like is None else like

    def finish(grads):
        grads = jax.tree_util.tree_map(lambda g, p: g.astype(p.dtype), grads, like)
        return constrain_tree(grads, grad_shardings)

    if num_micro == 1:
        (loss, aux), grads = grad_fn(params, batch)
        return loss, aux, finish(grads)
    micro = split_micro_batches(batch, num_micro, mesh)
    first = jax.tree_util.tree_map(lambda x: x[0], micro)
    (loss_shape, aux_shape), _ = jax.eval_shape(grad_fn, params, first)
    zeros = lambda t: jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, jnp.float32), t)  # noqa: E731
    init = (zeros(loss_shape), zeros(aux_shape),
            constrain_tree(jax.tree_util.tree_map(lambda p: jnp.zeros(p.shape, jnp.float32), params),
                           grad_shardings))

    def body(carry, mb):
        with jax.named_scope("micro_batch"):
            (loss, aux), grads = grad_fn(params, mb)
        grads = constrain_tree(grads, grad_shardings)
        add = lambda a, b: jax.tree_util.tree_map(lambda x, y: x + y.astype(jnp.float32), a, b)  # noqa: E731
        acc = constrain_tree(add(carry[2], grads), grad_shardings)
        return (carry[0] + loss.astype(jnp.float32), add(carry[1], aux), acc), None

    (loss, aux, grads), _ = jax.lax.scan(body, init, micro)
    return loss, aux, finish(grads)
