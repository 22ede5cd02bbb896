"""Batch sizes a run may leave to the plan: ``train.micro_batch_size = -1`` and
``analysis.batch_size = -1`` (`AUTO`), as ``rollout.wave_rows = -1`` leaves the rollout waves.

With a plan (``--plan``, on by default on TPU / GPU) `seed_jax.plan.analysis.plan_run` takes the
largest candidate whose programs fit the devices and the launch runs with it. Without one (CPU,
``--plan=no``) `resolve_without_plan` takes the fallback, the smallest candidate (the least
memory), and logs it:

    train.micro_batch_size = lcm(data x fsdp, hosts)   (the smallest of `micro_batch_candidates`)
    analysis.batch_size    = one host's sampler row shards (its devices / sampler.tensor_parallel)
"""

from __future__ import annotations

import math

AUTO = -1


def micro_batch_candidates(mini_batch_size: int, divisor: int, hosts: int = 1) -> list[int]:
    """The micro-batch sizes a run of ``mini_batch_size``-row mini-batches can take on a mesh whose
    batch rows split ``divisor`` (data x fsdp) ways over ``hosts`` hosts, largest first: the
    multiples of ``lcm(divisor, hosts)`` that divide ``mini_batch_size``; empty when none does."""
    step = math.lcm(max(divisor, 1), max(hosts, 1))
    return [m for m in range(mini_batch_size - mini_batch_size % step, 0, -step) if mini_batch_size % m == 0]


def resolve_without_plan(config, divisor: int, hosts: int, host_row_shards: int) -> list[str]:
    """Replace the `AUTO` sizes left in ``config`` by their fallbacks (module docstring); returns one
    line per size replaced, for the log. ``host_row_shards``: one host's devices over
    ``sampler.tensor_parallel``."""
    lines = []
    if config.train.micro_batch_size == AUTO:
        cands = micro_batch_candidates(config.rl.mini_batch_size, divisor, hosts)
        config.train.micro_batch_size = cands[-1]  # `check_mesh` refused an empty list
        lines.append(f"train.micro_batch_size = -1 without a plan: {cands[-1]} rows (lcm of the data x fsdp mesh "
                     f"size {divisor} and {hosts} host(s); --plan chooses the largest that fits)")
    if config.analysis.batch_size == AUTO:
        config.analysis.batch_size = max(1, host_row_shards)
        lines.append(f"analysis.batch_size = -1 without a plan: {config.analysis.batch_size} rows (one per sampler "
                     f"row shard of a host; --plan chooses the largest that fits)")
    return lines
