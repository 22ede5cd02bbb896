"""Device mesh, sharding rules and multi-host helpers.

Mesh axes: ``('data', 'fsdp', 'tensor')``. Batch rows are split over ``('data', 'fsdp')``;
parameters (and the optimizer moments, which mirror their paths) follow `PARAM_RULES`:
the first regex that *searches* successfully in the leaf's path string (``a/b/c`` built from
the pytree keys of the whole TrainState, e.g. ``opt_state/1/0/mu/layers/mlp/up_proj/kernel``)
gives its PartitionSpec. A dimension whose size is not divisible by the mesh axes named for
it is replicated instead (so a 3-kv-head projection stays whole on a 2-way tensor axis).
Layer parameters carry a leading ``[num_layers]`` axis, never sharded.

The same code runs on one CPU device, on fake CPU devices
(``XLA_FLAGS=--xla_force_host_platform_device_count=8``) and on TPU / GPU meshes.
"""

from __future__ import annotations

import logging
import math
import os
import re
from collections.abc import Sequence

import jax
import numpy as np
from jax.experimental import mesh_utils
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

log = logging.getLogger(__name__)

AXES = ("data", "fsdp", "tensor")
BATCH_AXES = ("data", "fsdp")

# (regex searched in the leaf path, spec). Kernels are [in, out] (Flax), stacked [L, in, out].
PARAM_RULES: tuple[tuple[str, P], ...] = (
    (r"embed_tokens/embedding$", P("tensor", "fsdp")),
    (r"lm_head$", P("fsdp", "tensor")),
    (r"layers/self_attn/(q|k|v)_proj/kernel$", P(None, "fsdp", "tensor")),
    (r"layers/self_attn/(q|k|v)_proj/bias$", P(None, "tensor")),
    (r"layers/self_attn/o_proj/kernel$", P(None, "tensor", "fsdp")),
    (r"layers/mlp/(gate|up)_proj/kernel$", P(None, "fsdp", "tensor")),
    (r"layers/mlp/down_proj/kernel$", P(None, "tensor", "fsdp")),
    (r".*", P()),  # norms, scalars, counters, RNG: replicated
)


def interconnect_devices(devices: Sequence[jax.Device], hosts: int) -> int:
    """The devices one fast interconnect joins: TPU, a whole slice (ICI spans the slice's hosts;
    several slices, i.e. DCN between them, count the devices of one ``slice_index``); GPU / CPU,
    one host's devices (NVLink within a node, data parallel across nodes)."""
    n = len(devices)
    if devices and devices[0].platform == "tpu":
        return n // slice_groups(devices)
    return n // max(1, hosts)


def auto_fsdp(devices: Sequence[jax.Device], tensor: int, hosts: int) -> int:
    """The 'fsdp' size of ``mesh.fsdp = -1``: the `interconnect_devices` over ``tensor``."""
    return max(1, interconnect_devices(devices, hosts) // tensor)


def mesh_shape(num_devices: int, data: int | None, fsdp: int, tensor: int, domain: int) -> tuple[int, int, int]:
    """``(data, fsdp, tensor)`` of a mesh over ``num_devices`` devices (`make_mesh`'s arithmetic, no
    devices needed): ``fsdp = -1`` is ``max(1, domain // tensor)`` (``domain``: `interconnect_devices`),
    ``data = None`` (or -1) the rest; `ValueError` when the axes do not multiply to the device count."""
    if fsdp == -1:
        fsdp = max(1, domain // tensor)
    if data == -1:
        data = None
    if fsdp < 1 or tensor < 1 or num_devices % (fsdp * tensor):
        raise ValueError(f"fsdp={fsdp} x tensor={tensor} must divide the device count {num_devices}")
    if data is None:
        data = num_devices // (fsdp * tensor)
    if data < 1 or data * fsdp * tensor != num_devices:
        raise ValueError(f"mesh data={data} x fsdp={fsdp} x tensor={tensor} = "
                         f"{data * fsdp * tensor} does not match the device count {num_devices}")
    return data, fsdp, tensor


def make_mesh(data: int | None = None, fsdp: int = 1, tensor: int = 1,
              devices: Sequence[jax.Device] | None = None) -> Mesh:
    """A ``(data, fsdp, tensor)`` mesh; ``data=None`` (or -1) puts all remaining devices on
    'data'; ``fsdp=-1`` puts the devices of one fast-interconnect domain (over ``tensor``) on
    'fsdp' (`auto_fsdp`: ZeRO-3 within it, data parallel across them). TPU devices of several
    slices make a hybrid mesh (`slice_groups`): 'data' split first across the slices (DCN), so
    'fsdp' and 'tensor' stay within one slice's ICI."""
    devices = list(devices if devices is not None else jax.devices())
    if fsdp == -1:
        fsdp = auto_fsdp(devices, tensor, jax.process_count())
    data, fsdp, tensor = mesh_shape(len(devices), data, fsdp, tensor, len(devices))
    slices = slice_groups(devices)
    if slices > 1:
        if data % slices:
            raise ValueError(f"mesh data={data} must be a multiple of the {slices} TPU slices (fsdp and tensor "
                             f"stay within a slice)")
        arr = mesh_utils.create_hybrid_device_mesh((data // slices, fsdp, tensor), (slices, 1, 1), devices)
        return Mesh(arr, AXES)
    try:
        arr = mesh_utils.create_device_mesh((data, fsdp, tensor), devices)
    except Exception:
        arr = np.asarray(devices, dtype=object).reshape(data, fsdp, tensor)
    return Mesh(arr, AXES)


def slice_groups(devices: Sequence[jax.Device]) -> int:
    """How many TPU slices (``slice_index``: joined by the data-center network, not ICI) the
    devices span; 1 off TPU."""
    if not devices or devices[0].platform != "tpu":
        return 1
    return len({getattr(d, "slice_index", 0) for d in devices})


def path_string(path) -> str:
    """``a/b/0/c`` from a jax key path."""
    parts = []
    for k in path:
        for attr in ("key", "name", "idx"):
            if hasattr(k, attr):
                parts.append(str(getattr(k, attr)))
                break
        else:
            parts.append(str(k))
    return "/".join(parts)


def fit_spec(spec: P, shape: Sequence[int], mesh: Mesh) -> P:
    """``spec`` padded/cut to ``len(shape)``; dims not divisible by their mesh axes -> None."""
    if len(spec) > len(shape):
        return P()
    out = []
    for dim, axes in zip(shape, tuple(spec) + (None,) * (len(shape) - len(spec))):
        if axes is None:
            out.append(None)
            continue
        names = (axes,) if isinstance(axes, str) else tuple(axes)
        size = math.prod(mesh.shape[a] for a in names)
        out.append(axes if dim % size == 0 else None)
    return P(*out)


def spec_for(path: str, shape: Sequence[int], mesh: Mesh,
             rules: Sequence[tuple[str, P]] = PARAM_RULES) -> P:
    """The fitted PartitionSpec of the first rule whose regex is found in ``path``."""
    for pattern, spec in rules:
        if re.search(pattern, path):
            return fit_spec(spec, shape, mesh)
    return P()


def tree_shardings(tree, mesh: Mesh, rules: Sequence[tuple[str, P]] = PARAM_RULES):
    """NamedShardings for every leaf of ``tree`` (arrays or ShapeDtypeStructs) by path rules."""
    def one(path, leaf):
        return NamedSharding(mesh, spec_for(path_string(path), np.shape(leaf), mesh, rules))

    return jax.tree_util.tree_map_with_path(one, tree)


def batch_sharding(mesh: Mesh) -> NamedSharding:
    """Rows over ('data', 'fsdp'), everything else replicated (a prefix for any batch dict)."""
    return NamedSharding(mesh, P(BATCH_AXES))


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, P())


def batch_divisor(mesh: Mesh) -> int:
    """Rows of a batch (and of each micro-batch) must be a multiple of this."""
    return math.prod(mesh.shape[a] for a in BATCH_AXES)


def shard_params(params, mesh: Mesh, rules: Sequence[tuple[str, P]] = PARAM_RULES):
    """Place a parameter tree on the mesh according to the rules."""
    return jax.device_put(params, tree_shardings(params, mesh, rules))


def maybe_initialize_distributed() -> bool:
    """Call ``jax.distributed.initialize`` when the environment describes a multi-host job.

    Triggers on ``JAX_COORDINATOR_ADDRESS`` (with optional ``JAX_NUM_PROCESSES`` /
    ``JAX_PROCESS_COUNT`` and ``JAX_PROCESS_ID``; missing ones are auto-detected by JAX, e.g.
    on TPU pods or SLURM), or on ``JAX_NUM_PROCESSES`` > 1 alone. Must run before any other
    JAX call. Returns True when it initialised.
    """
    addr = os.environ.get("JAX_COORDINATOR_ADDRESS")
    nproc = os.environ.get("JAX_NUM_PROCESSES") or os.environ.get("JAX_PROCESS_COUNT")
    pid = os.environ.get("JAX_PROCESS_ID")
    if not addr and not (nproc and int(nproc) > 1):
        return False
    kwargs = {}
    if addr:
        kwargs["coordinator_address"] = addr
    if nproc:
        kwargs["num_processes"] = int(nproc)
    if pid is not None:
        kwargs["process_id"] = int(pid)
    log.info("jax.distributed.initialize(%s)", kwargs)
    jax.distributed.initialize(**kwargs)
    return True


def host_local_batch_to_global(batch, mesh: Mesh):
    """Each host's rows -> global arrays sharded by rows (``make_array_from_process_local_data``).

    ``batch`` is any pytree of ``[B_local, ...]`` arrays (a typed batch); every host passes
    its own slice and the global batch has ``B_local * process_count`` rows. On one host this
    is a sharded ``device_put``.
    """
    sharding = batch_sharding(mesh)
    return jax.tree_util.tree_map(lambda v: jax.make_array_from_process_local_data(sharding, np.asarray(v)), batch)
