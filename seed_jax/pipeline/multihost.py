"""Multi-host helpers for the pipeline (one process per host, `jax.distributed`).

Data-parallel layout: every host runs its own environments and sampler for its share of the
tasks (the sampler's compute-dtype copy gathered device to device, `seed_jax.sampling.prepare_sampler`,
then used on the host's own devices), computes its rows' old/ref log-probs locally with a
host-local copy of the parameters, and contributes those rows to the global batch of the one
jitted train step; a host without rows contributes masked padding rows. Hosts pad their
row count and the static lengths (P, Pt, R) to the common maximum first (`common_max`,
`seed_jax.train.batch.SeedBatch.grow`).
"""

from __future__ import annotations

import jax
import numpy as np
from jax.experimental import multihost_utils

from seed_jax.sampling import local_replica
from seed_jax.train.mesh import host_local_batch_to_global


def is_multihost() -> bool:
    return jax.process_count() > 1


def host_local_params(params):
    """Parameters usable by host-local jitted code (the log-prob passes): every host calls it
    together; `seed_jax.sampling.local_replica` (a device-to-device gather, never through host
    memory, kept on each host's first device)."""
    return local_replica(params)


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
        multihost_utils.sync_global_devices(name)
