"""Plan targets: the devices a program is compiled for and the hardware figures its roofline uses.

Spellings (``--target=``):

- ``tpu:<topology>`` (``tpu:v5e:4x4``, ``tpu:v5p:2x2x2``, ``tpu:v4:2x2x1``, ``tpu:v6e:2x4``): real TPU
  devices of that topology from ``jax.experimental.topologies.get_topology_desc``; XLA:TPU
  compiles on this host (needs ``libtpu``: ``pip install -e ".[tpu-aot]"``), no TPU attached.
- ``gpu:<kind>x<n>`` (``gpu:h100x8``, ``gpu:h200x8``, ``gpu:a100x8``, ``gpu:l4x1``): ``n`` CPU
  devices standing in for the GPUs, with the GPU's figures from `HARDWARE`. XLA:CPU compiles, so
  memory figures are approximate (no GPU fusion or memory scheduling).
- ``cpu:<n>``: ``n`` CPU devices, the host's RAM as memory.
- ``native``: the devices this process has (`native_target`), e.g. the run's GPUs or TPU slice; its
  chip, generation and (TPU) topology come from the devices' ``device_kind`` (`hardware_key`) and
  coordinates, never from a spelling.

CPU devices beyond the first come from ``--xla_force_host_platform_device_count`` (XLA_FLAGS),
which must be set before JAX starts its CPU backend: `require_cpu_devices` sets it or says why not.

Figures per chip (vendor data sheets): ``hbm`` bytes, ``peak`` dense bf16 FLOP/s, ``hbm_bw`` and
``link_bw`` bytes/s (link: one direction of the chip's interconnect: ICI for TPU, NVLink for
SXM GPUs, PCIe for L4).
"""

from __future__ import annotations

import dataclasses
import os
import re

import jax

GiB = 1 << 30


@dataclasses.dataclass(frozen=True)
class Chip:
    hbm: float
    peak: float
    hbm_bw: float
    link_bw: float


HARDWARE: dict[str, Chip] = {
    # Cloud TPU system architecture pages: bf16 peak, HBM, HBM bandwidth, ICI (Gbps / 8)
    "v4": Chip(32 * GiB, 275e12, 1228e9, 2400e9 / 8),
    "v5e": Chip(16 * GiB, 197e12, 819e9, 1600e9 / 8),
    "v5p": Chip(95 * GiB, 459e12, 2765e9, 4800e9 / 8),
    "v6e": Chip(32 * GiB, 918e12, 1640e9, 3584e9 / 8),
    # NVIDIA data sheets (SXM; dense bf16; NVLink 900 GB/s bidirectional -> 450 GB/s)
    "h100": Chip(80e9, 989e12, 3.35e12, 450e9),
    "h200": Chip(141e9, 989e12, 4.8e12, 450e9),
    "a100": Chip(80e9, 312e12, 2.039e12, 300e9),
    "l4": Chip(24e9, 121e12, 300e9, 32e9),
}
# jax device_kind -> HARDWARE key, for TPU topologies and native devices
DEVICE_KINDS = {"TPU v4": "v4", "TPU v5 lite": "v5e", "TPU v5e": "v5e", "TPU v5": "v5p", "TPU v5p": "v5p",
                "TPU v6 lite": "v6e", "TPU v6e": "v6e", "NVIDIA H100 80GB HBM3": "h100", "NVIDIA H200": "h200",
                "NVIDIA A100-SXM4-80GB": "a100", "NVIDIA L4": "l4"}
# axes of a TPU generation's topology name (v5e 4x4, v5p 2x2x2); its devices' coords always have 3
TOPOLOGY_AXES = {"v4": 3, "v5p": 3, "v5e": 2, "v6e": 2}
_GPU_NAME = re.compile(r"\b(h100|h200|a100|l4)\b")


class TargetError(ValueError):
    """A target spelling that names no known hardware, or devices this process cannot make."""


@dataclasses.dataclass(frozen=True)
class Target:
    """Devices to compile for and the chip figures of one device."""

    spec: str  # a label: the --target spelling, or one made for native devices (never parsed)
    devices: tuple
    chip: Chip
    approximate_memory: bool = False  # XLA:CPU stands in for the real compiler
    generation: str | None = None  # HARDWARE key of the chips (v5e, h100), None when unknown
    topology: str | None = None  # TPU: the slice's shape as libtpu names it (4x4, 2x2x2)
    process_index: int = 0  # the host this process plays: its devices run its sampler

    @property
    def num_devices(self) -> int:
        return len(self.devices)


def host_memory_bytes() -> float:
    """Physical RAM of this host (the memory of a ``cpu:`` target's devices, all together)."""
    try:
        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError):
        return 16.0 * GiB


def cpu_chip(num_devices: int) -> Chip:
    """Rough figures of a host CPU split into ``num_devices``: its RAM shared, 1 TFLOP/s, 50 GB/s."""
    return Chip(host_memory_bytes() / max(num_devices, 1), 1e12, 50e9, 50e9)


def backend_started() -> bool:
    from jax._src import xla_bridge
    return bool(getattr(xla_bridge, "_backends", {}))


def require_cpu_devices(n: int) -> list:
    """``n`` CPU devices: asks JAX for them when its CPU backend has not started, else uses what
    it has; `TargetError` when it has fewer (a fresh process is needed)."""
    if not backend_started():
        jax.config.update("jax_num_cpu_devices", max(n, 1))
    devs = jax.devices("cpu")
    if len(devs) < n:
        raise TargetError(f"{n} CPU devices needed but this process has {len(devs)} (its JAX backend "
                          f"started earlier); run in a fresh process, or set XLA_FLAGS="
                          f"--xla_force_host_platform_device_count={n}")
    return devs[:n]


def _tpu_devices(topology: str) -> tuple:
    from jax.experimental import topologies
    try:
        import libtpu  # noqa: F401
    except ImportError:
        raise TargetError('tpu targets need libtpu (pip install -e ".[tpu-aot]")') from None
    try:
        topo = topologies.get_topology_desc(platform="tpu", topology_name=topology)
    except Exception as e:  # libtpu rejects the name: its message is one line worth showing
        raise TargetError(f"tpu:{topology}: {str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
    return tuple(topo.devices)


def parse_target(spec: str) -> Target:
    """The `Target` of a ``--target`` spelling (module docstring); `TargetError` when it is wrong."""
    spec = spec.strip()
    if spec == "native":
        return native_target()
    kind, _, rest = spec.partition(":")
    if kind == "tpu":
        gen = rest.split(":", 1)[0]
        if gen not in HARDWARE or not re.fullmatch(r"v\w+:\d+(x\d+)*", rest):
            raise TargetError(f"--target={spec}: expected tpu:<generation>:<topology> with generation one of "
                              f"{[k for k in HARDWARE if k.startswith('v')]}, e.g. tpu:v5e:4x4")
        devices = _tpu_devices(rest)
        return Target(spec, devices, HARDWARE[gen], generation=gen, topology=rest.split(":", 1)[1])
    if kind == "gpu":
        m = re.fullmatch(r"([a-z0-9]+)x(\d+)", rest)
        gpus = [k for k in HARDWARE if not k.startswith("v")]
        if not m or m.group(1) not in gpus or int(m.group(2)) < 1:
            raise TargetError(f"--target={spec}: expected gpu:<kind>x<n> with kind one of {gpus}, e.g. gpu:h100x8")
        n = int(m.group(2))
        return Target(spec, tuple(require_cpu_devices(n)), HARDWARE[m.group(1)], approximate_memory=True,
                      generation=m.group(1))
    if kind == "cpu":
        if not re.fullmatch(r"\d+", rest) or int(rest) < 1:
            raise TargetError(f"--target={spec}: expected cpu:<n> with n >= 1, e.g. cpu:8")
        n = int(rest)
        return Target(spec, tuple(require_cpu_devices(n)), cpu_chip(n), approximate_memory=True)
    raise TargetError(f"--target={spec}: expected tpu:<topology>, gpu:<kind>x<n>, cpu:<n> or native")


def hardware_key(device_kind: str) -> str | None:
    """The `HARDWARE` key of a jax ``device_kind``: `DEVICE_KINDS`, else a GPU's model name in it
    (``NVIDIA H100 PCIe`` -> ``h100``); None for a chip without figures."""
    if device_kind in DEVICE_KINDS:
        return DEVICE_KINDS[device_kind]
    m = _GPU_NAME.search(device_kind.lower())
    return m.group(1) if m else None


def compile_only(device) -> bool:
    """Whether ``device`` is one of a compile-only topology's (`_tpu_devices`), not attached to this process."""
    return getattr(getattr(device, "client", None), "runtime_type", "") == "compile_only_runtime"


def topology_of(devices, generation: str | None) -> str | None:
    """The TPU slice shape of ``devices`` as libtpu names it (``4x4`` for v5e, ``2x2x2`` for v5p):
    the extent of their chip coordinates over the generation's `TOPOLOGY_AXES`; None off TPU or
    for a generation without an entry."""
    axes = TOPOLOGY_AXES.get(generation or "")
    coords = [tuple(getattr(d, "coords", ())) for d in devices]
    if axes is None or not coords or any(len(c) < axes for c in coords):
        return None
    return "x".join(str(max(c[i] for c in coords) - min(c[i] for c in coords) + 1) for i in range(axes))


def host_devices_of(target: Target) -> tuple:
    """Devices standing for one host of ``target`` (where a host's sampler runs): the devices of
    ``target.process_index``; when those are compile-only TPU devices of a slice of several hosts,
    the devices of a one-host topology of the same chips and shape instead (XLA:TPU compiles a
    program only for devices numbered from 0, and a host of a larger slice holds others, e.g.
    0, 1, 4, 5 of v5e 4x4). A run's own devices (native, attached) are that host's devices."""
    mine = tuple(d for d in target.devices if getattr(d, "process_index", 0) == target.process_index)
    if not mine:
        raise TargetError(f"{target.spec}: no device of process {target.process_index}")
    if len(mine) == len(target.devices) or target.topology is None or not compile_only(mine[0]):
        return mine
    return _tpu_devices(f"{target.generation}:{topology_of(mine, target.generation)}")


def native_target(devices=None, process_index: int | None = None) -> Target:
    """The devices of this process (default ``jax.devices()``), with the memory each reports: chip
    figures of their ``device_kind`` (`hardware_key`), on TPU the slice's `topology_of` their
    coordinates; the label is a target spelling (``tpu:v5e:4x4``, ``gpu:h100x8``) when the chip is
    known. ``process_index``: the host this process plays (default ``jax.process_index()``)."""
    devices = tuple(devices if devices is not None else jax.devices())
    d = devices[0]
    if process_index is None:
        process_index = jax.process_index()
    if d.platform == "cpu":
        return Target(f"cpu:{len(devices)}", devices, cpu_chip(len(devices)), approximate_memory=True,
                      process_index=process_index)
    key = hardware_key(d.device_kind)
    chip = HARDWARE.get(key) if key else None
    try:
        limit = (d.memory_stats() or {}).get("bytes_limit")
    except Exception:  # some backends (and compile-only devices) report no memory statistics
        limit = None
    if chip is None:
        chip = Chip(float(limit or 16 * GiB), 100e12, 1e12, 100e9)
    elif limit:
        chip = dataclasses.replace(chip, hbm=float(limit))
    topology = topology_of(devices, key) if d.platform == "tpu" else None
    if d.platform == "tpu" and topology:
        spec = f"tpu:{key}:{topology}"
    elif key and d.platform != "tpu":
        spec = f"{d.platform}:{key}x{len(devices)}"
    else:
        spec = f"{d.platform}:{d.device_kind}x{len(devices)}"
    return Target(spec, devices, chip, generation=key, topology=topology, process_index=process_index)
