"""PPO epochs over one update's batch: shuffled mini-batches, one optimizer step each.

With ``n`` rows on this host, ``H`` hosts and ``M = ceil_m(min(rl.mini_batch_size / H, n))`` rows
per mini-batch on each host (``ceil_m``: up to a multiple of the per-host micro-batch
``train.micro_batch_size / H``; so ``H * M``, the global mini-batch, is ``rl.mini_batch_size``
or, for a smaller update, the fewest micro-batches that hold it), the batch is padded with fully masked rows to
``ceil(n / M) * M`` rows, so every mini-batch has the same static shape. Each epoch walks a
seeded permutation ``rng([seed, update, epoch])`` of the real rows, followed by the padding
rows, in ``M``-row slices: every mini-batch but the last is full of real rows. On several
hosts every host pads its rows and lengths to the common maximum first (`multihost`), and
each contributes its rows to every global mini-batch. The update's metrics pool the steps'
metrics exactly (`seed_jax.train.update.pool_metrics`).
"""

from __future__ import annotations

import numpy as np

from seed_jax.buckets import round_to_multiple
from seed_jax.pipeline.multihost import common_max, is_multihost, to_global
from seed_jax.train.batch import SeedBatch
from seed_jax.train.update import pool_metrics
from seed_jax.watchdog import beat


def host_split_error(mini_batch_size: int, micro_batch_size: int, hosts: int) -> str | None:
    """Why ``hosts`` hosts cannot split the global mini- and micro-batches evenly (None: they can).

    Each host feeds ``mini / hosts`` rows per optimizer step in micro-batches of ``micro / hosts``
    rows, so both must divide by ``hosts`` (and ``mini`` by ``micro``)."""
    if mini_batch_size % micro_batch_size:
        return f"rl.mini_batch_size ({mini_batch_size}) must be a multiple of train.micro_batch_size ({micro_batch_size})"
    if micro_batch_size % hosts:
        return (f"train.micro_batch_size ({micro_batch_size}) must be a multiple of the host count ({hosts}): "
                "each host feeds micro_batch_size / hosts rows of every micro-batch")
    return None


def mini_batch_rows(rows: int, mini_batch_size: int, micro_batch_size: int, hosts: int = 1) -> int:
    """``M``: rows per mini-batch on one host (module docstring); ``hosts * M`` is the global one."""
    err = host_split_error(mini_batch_size, micro_batch_size, hosts)
    if err:
        raise ValueError(err)
    return round_to_multiple(max(min(mini_batch_size // hosts, rows), 1), micro_batch_size // hosts)


def ppo_epochs(state, batch: SeedBatch, train_step, *, mini_batch_size: int, micro_batch_size: int,
               epochs: int, seed: int, update: int, mesh, hosts: int = 1, before_first_step=None):
    """``(state, metrics)`` after ``epochs`` passes over ``batch`` (module docstring).

    ``before_first_step(state, mini_batch)``: called once with the first step's arguments
    (e.g. to compile the step ahead of time)."""
    n = n_real = batch.num_rows
    if is_multihost():
        Pt = batch.teacher_prompt_len
        n, P, R, Pt_ = common_max(n, batch.prompt_len, batch.response_len, Pt or 0)
        batch = batch.grow(P, Pt_ if Pt is not None else None, R, n)
    M = mini_batch_rows(n, mini_batch_size, micro_batch_size, hosts)
    total = round_to_multiple(n, M)
    if total > n:
        batch = batch.grow(batch.prompt_len, batch.teacher_prompt_len, batch.response_len, total)
    steps = []
    for epoch in range(epochs):
        perm = np.concatenate([np.random.default_rng([seed, update, epoch]).permutation(n_real),
                               np.arange(n_real, total)])
        for k in range(total // M):
            mb = batch.take(np.sort(perm[k * M:(k + 1) * M]))
            if not is_multihost() and not mb.response_mask.any():
                continue
            beat("train", f"epoch {epoch} mini-batch {k + 1}/{total // M} (optimizer step)", update=update)
            mb = to_global(mb, mesh)
            if before_first_step is not None:
                before_first_step(state, mb)
                before_first_step = None
            state, m = train_step(state, mb)
            steps.append(m)
    return state, pool_metrics(steps) if steps else {"optimizer_steps": 0.0}
