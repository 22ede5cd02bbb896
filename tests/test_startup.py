"""Start-up on real topologies: the native target of a multi-host TPU slice or a GPU node, the
one-host devices its sampler is planned on, the wave choice on them, and the launch's plan.

The TPU tests pass the devices of compile-only topologies (libtpu, no TPU attached) to
`native_target` as a run on that slice would see them; they skip when libtpu is absent.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest

from configs.search import get_config
from seed_jax.plan.analysis import target_hosts, wave_candidates
from seed_jax.plan.targets import HARDWARE, hardware_key, host_devices_of, native_target

REPO = Path(__file__).resolve().parents[1]
TPU_ENV = {"JAX_PLATFORMS": "", "ALLOW_MULTIPLE_LIBTPU_LOAD": "true"}  # compile only: no chip to share


def _libtpu() -> bool:
    try:
        import libtpu  # noqa: F401
    except ImportError:
        return False
    return True


needs_libtpu = pytest.mark.skipif(not _libtpu(), reason='libtpu is not installed (pip install -e ".[tpu-aot]")')


def _python(code: str, timeout: int = 900) -> subprocess.CompletedProcess:
    """``code`` in a fresh process (libtpu's compile-only client, the repo on the path)."""
    path = os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])
    env = {**os.environ, "PYTHONPATH": path, **TPU_ENV}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, env=env,
                          timeout=timeout)


NATIVE_SLICES = textwrap.dedent("""
    import json
    from jax.experimental import topologies
    from configs.search import get_config
    from seed_jax.plan.analysis import plan_run, target_hosts
    from seed_jax.plan.targets import host_devices_of, native_target

    out = {}
    for name in ("v5e:4x4", "v5p:2x2x2", "v4:2x2x2"):
        devs = topologies.get_topology_desc(platform="tpu", topology_name=name).devices
        t = native_target(devs)  # as the run's jax.devices() on host 0 of that slice
        host = host_devices_of(t)
        c = get_config("tiny")
        c.rl.tasks_per_update, c.rollout.group_size, c.rollout.wave_rows = 8, 2, -1
        plan = plan_run(c, t, {"rollout"})
        out[name] = {"spec": t.spec, "generation": t.generation, "topology": t.topology, "hbm": t.chip.hbm,
                     "hosts": target_hosts(t), "host_ids": [d.id for d in host],
                     "host_processes": sorted({d.process_index for d in host}),
                     "mine": sum(d.process_index == 0 for d in devs), "wave": plan.waves.rows,
                     "programs": [(p.name, p.fits) for p in plan.programs]}
    c.rl.tasks_per_update = 2  # 1 task x 2 rollouts per host: fewer rows than the host's 4 chips
    few = plan_run(c, native_target(topologies.get_topology_desc(platform="tpu", topology_name="v5e:4x4").devices),
                   {"rollout"})
    out["few"] = [few.waves.rows, few.programs[0].note]
    print(json.dumps(out))
""")


@needs_libtpu
def test_native_targets_of_multi_host_tpu_slices_plan_their_rollout_waves():
    """Native devices of a v5e 4x4 (4 hosts of 4 chips), v5p 2x2x2 (2 hosts of 4) and v4 2x2x2
    (2 hosts of 4 chips, 8 compile-only cores): the target names its chip and slice from the device
    kind and coordinates, one host's sampler is planned on a one-host topology of as many devices
    (ids from 0), and the wave choice compiles: 8 tasks x 2 rollouts over H hosts -> 16 / H rows per
    host, all fitting (and a host's 2 rows filled to one per chip). Today's `native_target` labelled them ``tpu:TPU v5 litex16`` and
    `host_devices_of` died splitting that label (ValueError)."""
    r = _python(NATIVE_SLICES)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    want = {"v5e:4x4": ("v5e", "4x4", 4, 4), "v5p:2x2x2": ("v5p", "2x2x2", 2, 4), "v4:2x2x2": ("v4", "2x2x2", 2, 8)}
    for name, (gen, topo, hosts, per_host) in want.items():
        g = got[name]
        assert (g["spec"], g["generation"], g["topology"], g["hosts"]) == (f"tpu:{name}", gen, topo, hosts), g
        assert g["hbm"] == HARDWARE[gen].hbm
        assert g["mine"] == per_host and g["host_ids"] == list(range(per_host)) and g["host_processes"] == [0]
        assert g["wave"] == 16 // hosts
        assert g["programs"] == [["rollout_prefill", True], ["rollout_decode", True]]
    # a wave of 2 rows is sampled as 4, one per chip (`generate` fills rows to its row shards);
    # planned as 2 rows it failed to compile (ZeroDivisionError in the prefill's row chunks)
    assert got["few"][0] == 2 and got["few"][1].startswith("4 rows x 768 prompt")


class FakeGpu:
    """A GPU as jax shows one (the fields the plan reads); ``bytes_limit`` from its memory stats."""

    platform = "gpu"

    def __init__(self, i: int, process: int, kind: str = "NVIDIA H100 80GB HBM3", limit: float = 79.1e9):
        self.id, self.process_index, self.device_kind, self._limit = i, process, kind, limit

    def memory_stats(self):
        return {"bytes_limit": self._limit}


def test_native_target_of_two_gpu_nodes():
    """Two nodes of 8 H100s: the chip from the device kind (its HBM as the devices report it), the
    label a target spelling, each process's sampler on its own 8 GPUs, and the waves from one
    node's share of the rollouts (16 tasks x 8 over 2 hosts = 64 rows, down to 1 per GPU)."""
    devs = [FakeGpu(i, i // 8) for i in range(16)]
    t = native_target(devs, process_index=1)
    assert (t.spec, t.generation, t.topology, t.chip.peak, t.chip.hbm) == ("gpu:h100x16", "h100", None,
                                                                           HARDWARE["h100"].peak, 79.1e9)
    assert [d.id for d in host_devices_of(t)] == list(range(8, 16))
    assert [d.id for d in host_devices_of(native_target(devs, process_index=0))] == list(range(8))
    c = get_config("tiny")
    c.rl.tasks_per_update, c.rollout.group_size = 16, 8
    assert target_hosts(t) == 2 and wave_candidates(c, t) == [64, 32, 16, 8]


@pytest.mark.parametrize("kind, key", [("NVIDIA H100 80GB HBM3", "h100"), ("NVIDIA H100 PCIe", "h100"),
                                       ("NVIDIA H200", "h200"), ("NVIDIA A100-SXM4-40GB", "a100"),
                                       ("TPU v5 lite", "v5e"), ("TPU v5", "v5p"), ("NVIDIA GH200 480GB", None)])
def test_hardware_key_of_device_kinds(kind, key):
    assert hardware_key(kind) == key


def test_native_target_of_an_unknown_gpu_takes_the_memory_it_reports():
    t = native_target([FakeGpu(0, 0, kind="NVIDIA B999", limit=50e9)], process_index=0)
    assert (t.spec, t.generation, t.chip.hbm) == ("gpu:NVIDIA B999x1", None, 50e9)
    assert host_devices_of(t) == tuple(t.devices)


def test_host_devices_of_a_process_without_devices_is_an_error():
    from seed_jax.plan.targets import TargetError

    devs = [types.SimpleNamespace(id=i, process_index=0, platform="gpu", device_kind="NVIDIA L4",
                                  memory_stats=dict) for i in range(2)]
    with pytest.raises(TargetError, match="no device of process 3"):
        host_devices_of(native_target(devs, process_index=3))
