"""Multi-host helpers for the pipeline (one process per host, `jax.distributed`).

Data-parallel layout: every host runs its own environments and sampler for its contiguous share
of the tasks (`host_share`; the sampler's compute-dtype copy gathered device to device,
`seed_jax.rollout.policy.Policy.sampling`, then used on the host's own devices). Stage-1 collection,
annotation and evaluation gather every host's results on every host (`gather_trajectories`,
`gather_lines`) and host 0 writes them; in RL each host keeps its rows: the log-prob passes run
over the global mesh with every host taking part, and a host without rows contributes masked
padding rows. Hosts pad their row count and the static lengths (P, Pt, R) to the common maximum
first (`common_max`, `seed_jax.train.batch.SeedBatch.grow`).
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import numpy as np
from jax.experimental import multihost_utils

from seed_jax.rollout.loop import run_rollouts
from seed_jax.rollout.policy import Policy
from seed_jax.rollout.trajectory import Trajectory
from seed_jax.train.mesh import host_local_batch_to_global
from seed_jax.watchdog import beat


def is_multihost() -> bool:
    return jax.process_count() > 1


def to_global(batch, mesh):
    """Host-local rows of a typed batch -> global arrays (identity on one host: jit places
    numpy arrays itself)."""
    if not is_multihost():
        return batch
    return host_local_batch_to_global(batch, mesh)


def common_max(*values: int) -> list[int]:
    """Element-wise maximum of small integers over all hosts."""
    if not is_multihost():
        return list(values)
    got = multihost_utils.process_allgather(np.asarray(values, np.int64))
    return [int(v) for v in np.asarray(got).reshape(-1, len(values)).max(0)]


def barrier(name: str) -> None:
    if is_multihost():
        beat("barrier", name)  # the stall watchdog names the collective a stuck host waits in
        multihost_utils.sync_global_devices(name)


def host_share(n: int, hosts: int | None = None, host: int | None = None) -> slice:
    """This host's contiguous share of ``n`` items: ``[ceil(i n / H), ceil((i + 1) n / H))`` for
    host ``i`` of ``H`` (the first hosts take the extra items; a host may get none)."""
    H = jax.process_count() if hosts is None else hosts
    i = jax.process_index() if host is None else host
    return slice(-(-i * n // H), -(-(i + 1) * n // H))


GATHER_CHUNK_BYTES = 16 << 20  # bytes per host in one all-gather (bounds the gathered buffer per device)


def gather_lines(lines: Sequence[str], chunk_bytes: int = GATHER_CHUNK_BYTES) -> list[str]:
    """Every host's lines (text without newlines), host 0's first, on every host; every host
    calls it together. The UTF-8 text goes through all-gathers of at most ``chunk_bytes`` per
    host (a host with fewer bytes pads with zeros)."""
    if not is_multihost():
        return list(lines)
    if any("\n" in line for line in lines):
        raise ValueError("gather_lines: a line holds a newline")
    blob = np.frombuffer("\n".join(lines).encode(), np.uint8)
    meta = np.asarray(multihost_utils.process_allgather(np.asarray([len(lines), len(blob)], np.int64)))
    counts, sizes = meta.reshape(-1, 2).T
    size = int(sizes.max())
    parts = [np.zeros((len(sizes), 0), np.uint8)]
    for start in range(0, size, chunk_bytes):
        piece = np.zeros(min(chunk_bytes, size - start), np.uint8)
        mine = blob[start:start + len(piece)]
        piece[:len(mine)] = mine
        parts.append(np.asarray(multihost_utils.process_allgather(piece)).reshape(len(sizes), -1))
    table = np.concatenate(parts, axis=1)
    out = []
    for h, (n, nbytes) in enumerate(zip(counts, sizes)):
        if n:
            out += bytes(table[h, :nbytes]).decode().split("\n")
    return out


def gather_trajectories(trajs: Sequence[Trajectory]) -> list[Trajectory]:
    """Every host's trajectories, host 0's first, on every host (`gather_lines`)."""
    if not is_multihost():
        return list(trajs)
    return [Trajectory.from_json(line) for line in gather_lines([t.to_json() for t in trajs])]


def host_rollouts(backend, policy: Policy, tasks: Sequence[dict], settings, *, gather: bool,
                  task_skills: Sequence[str | None] | None = None, task_offset: int = 0,
                  **kwargs) -> list[Trajectory]:
    """`seed_jax.rollout.loop.run_rollouts` of ``policy`` on this host's share of ``tasks``
    (`host_share`), its episodes numbered as in one run of all tasks (slots, groups and so the
    sampling streams and env seeds), so that any host count samples the same episodes;
    ``gather``: every host returns all hosts' trajectories in task order, else only its own.
    Every host calls it together: it samples inside ``policy.sampling`` (the sampler's copy,
    a collective when the parameters are sharded over hosts; an enclosing block's copy is
    reused), also on a host whose share is empty. ``task_offset``: ``tasks`` are that chunk of a
    larger list, numbered from that task (`seed_jax.pipeline.chunked`)."""
    share = host_share(len(tasks))
    first = task_offset + share.start  # this host's first task, numbered in the whole list
    group = kwargs.get("group_size") or settings.group_size
    with policy.sampling(settings.sampler):
        mine = run_rollouts(backend, policy.model, policy.tokenizer, list(tasks[share]), settings,
                            params=policy.params, encode_prompt=policy.encode_prompt,
                            slot_offset=first * group, group_offset=first,
                            task_skills=None if task_skills is None else task_skills[share], **kwargs)
    return gather_trajectories(mine) if gather else mine
