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

from seed_jax.configs.search import get_config
from seed_jax.plan.analysis import target_hosts, wave_candidates
from seed_jax.plan.targets import HARDWARE, hardware_key, host_devices_of, native_target

pytestmark = pytest.mark.integration  # whole pipelines / subprocess launches: CONTRIBUTING.md tiers

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
    from seed_jax.configs.search import get_config
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


# ------------------------------------------------------------------ the config against the mesh, before compiling


def _paper_search():
    c = get_config("paper")
    assert (c.train.micro_batch_size, c.analysis.batch_size, c.rollout.wave_rows) == (-1, -1, -1)
    return c


def test_the_config_is_checked_against_the_mesh_naming_the_key():
    """The search paper preset on a 16-chip v5e (4 hosts, one slice: data x fsdp = 16): 8-row
    micro-batches cannot split over 16 row shards; -1 can (512 = 32 x 16); mesh axes that do not
    multiply to the device count and a mini-batch no multiple of 16 divides are named too."""
    from seed_jax.pipeline.validate import ConfigValueError, check_mesh

    c = _paper_search()
    assert check_mesh(c, 16, hosts=4, domain=16) == (1, 16, 1)
    c.train.micro_batch_size = 8
    with pytest.raises(ConfigValueError) as e:
        check_mesh(c, 16, hosts=4, domain=16)
    assert str(e.value) == ("config.train.micro_batch_size: must be a multiple of the data x fsdp mesh size (16) on "
                            "16 devices, or -1 (the largest that fits, chosen by the plan) (got 8)")
    assert check_mesh(c, 8, hosts=2, domain=8) == (1, 8, 1)  # the same config fits a v5e-8
    c.train.micro_batch_size, c.rl.mini_batch_size = -1, 24
    with pytest.raises(ConfigValueError, match=r"^config\.rl\.mini_batch_size: .* multiple of 16 .*\(got 24\)$"):
        check_mesh(c, 16, hosts=4, domain=16)
    c.rl.mini_batch_size, c.mesh.data, c.mesh.fsdp = 512, 3, 1
    with pytest.raises(ConfigValueError, match=r"^config\.mesh: mesh data=3 x fsdp=1 x tensor=1 = 3 does not match"):
        check_mesh(c, 16, hosts=4, domain=16)


@pytest.mark.parametrize("target", ["cpu:16", pytest.param("tpu:v5e:4x4", marks=needs_libtpu)])
def test_a_micro_batch_the_mesh_cannot_split_stops_the_launch_before_any_compile(tmp_path, target):
    """Planned for a 16-device target, the paper preset with 8-row micro-batches stopped only after
    compiling its samplers (32 s at full size), at the train step; now the launch stops at once,
    exit 2, one line naming the key, before the plan compiles anything."""
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text(json.dumps(
        {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "vocab_size": 256, "hidden_size": 64,
         "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2}))
    path = os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])
    env = {**os.environ, "PYTHONPATH": path, **(TPU_ENV if target.startswith("tpu") else {"JAX_PLATFORMS": "cpu"})}
    for name in ("model.safetensors", "tokenizer.json"):  # present for the preflight; the plan reads neither
        (tmp_path / "m" / name).write_text("")
    r = subprocess.run([sys.executable, "-m", "seed_jax.launch", "--config=configs/alfworld.py:paper",
                        "--config.stage1.analyzer=self",  # the paper's annotator endpoint is not what is tested
                        f"--config.model.path={tmp_path / 'm'}", "--config.train.micro_batch_size=8",
                        "--config.env.vendored_data=True",  # the games are not what this test is about
                        f"--workdir={tmp_path / 'w'}", "--dry_run", f"--plan={target}"],
                       capture_output=True, text=True, cwd=REPO, env=env, timeout=600)
    assert r.returncode == 2, r.stderr[-3000:]
    assert r.stderr.strip().splitlines()[-1] == (
        "error: config.train.micro_batch_size: must be a multiple of the data x fsdp mesh size (16) on 16 devices, "
        "or -1 (the largest that fits, chosen by the plan) (got 8)")
    assert "plan: compiling" not in r.stderr


# ------------------------------------------------------------------ sizes the plan chooses (-1)


def test_the_plan_chooses_the_largest_micro_batch_that_fits():
    """Reference: the train step planned at explicit micro-batches of 8 and 4 rows (one
    device: every size divides). On a device whose memory lies between their totals,
    ``train.micro_batch_size = -1`` tries the whole mini-batch (8), then bisects 4, 2, 1 to 4."""
    import dataclasses

    from seed_jax.plan.analysis import HEADROOM, format_plan, plan_run, with_key
    from seed_jax.plan.targets import parse_target

    c = get_config("tiny")  # rl.mini_batch_size = 8
    target = parse_target("cpu:1")
    step = {"train_step"}  # (the log-prob passes are sized and chosen with it in a run's plan: `MICRO_PROGRAMS`)
    explicit = {m: plan_run(with_key(c, "train.micro_batch_size", m), target, step).programs for m in (8, 4)}
    total = {m: max(p.total for p in ps) for m, ps in explicit.items()}
    assert total[8] > total[4]
    c.train.micro_batch_size = -1
    on = dataclasses.replace(target, chip=dataclasses.replace(target.chip, hbm=(total[8] + total[4]) / 2 / (1 - HEADROOM)))
    plan = plan_run(c, on, step)
    assert plan.micro_batch.rows == 4 and plan.micro_batch.tried == {8: False, 4: True, 2: True}
    assert [(p.name, p.total) for p in plan.programs] == [(p.name, p.total) for p in explicit[4]]
    assert "train.micro_batch_size = -1: the plan's micro-batch is 4 rows (tried: 8 does not, 4 fits, 2 fits)" \
        in format_plan(plan)


def test_sizes_left_at_minus_one_without_a_plan_take_the_documented_fallback():
    """No plan (CPU, --plan=no): the micro-batch is lcm(data x fsdp, hosts) rows, the analysis batch
    one row per sampler row shard of a host; each replacement is logged."""
    from seed_jax.pipeline.auto_sizes import micro_batch_candidates, resolve_without_plan

    assert micro_batch_candidates(48, 8, 1) == [48, 24, 16, 8]
    assert micro_batch_candidates(48, 4, 3) == [48, 24, 12]
    assert micro_batch_candidates(24, 16, 4) == []
    c = _paper_search()
    lines = resolve_without_plan(c, divisor=8, hosts=2, host_row_shards=4)
    assert (c.train.micro_batch_size, c.analysis.batch_size) == (8, 4) and len(lines) == 2
    assert lines[0].startswith("train.micro_batch_size = -1 without a plan: 8 rows")
    assert resolve_without_plan(c, divisor=8, hosts=2, host_row_shards=4) == []  # nothing left at -1


MICRO_ON_TPU = textwrap.dedent("""
    import json
    from jax.experimental import topologies
    from seed_jax.configs.search import get_config
    from seed_jax.plan.analysis import plan_run
    from seed_jax.plan.targets import native_target

    out = {}
    for name in ("v5e:2x4", "v5e:2x2"):
        t = native_target(topologies.get_topology_desc(platform="tpu", topology_name=name).devices)
        c = get_config("tiny")
        c.rl.mini_batch_size, c.train.micro_batch_size = 32, -1
        plan = plan_run(c, t, {"train_step"})
        (p,) = plan.programs
        out[name] = {"mesh": plan.mesh, "hosts": plan.hosts, "rows": plan.micro_batch.rows,
                     "tried": plan.micro_batch.tried, "fits": p.fits, "note": p.note}
    print(json.dumps(out))
""")


@pytest.mark.slow
@needs_libtpu
def test_the_plan_chooses_a_micro_batch_per_slice():
    """The same tiny config (32-row mini-batches, micro-batch -1) on a v5e 2x4 (8 chips, 2 hosts)
    and a v5e 2x2 (4 chips): the chosen micro-batch is a multiple of the slice's data x fsdp
    size, divides the mini-batch and its train step fits (the whole mini-batch, at this size)."""
    r = _python(MICRO_ON_TPU)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    for name, devices in (("v5e:2x4", 8), ("v5e:2x2", 4)):
        g = got[name]
        div = g["mesh"]["data"] * g["mesh"]["fsdp"]
        assert div == devices and g["rows"] % div == 0 and 32 % g["rows"] == 0 and g["fits"], g
        assert g["note"].endswith(f"micro-batches of {g['rows']}") and g["tried"][str(g["rows"])] is True


CHECK_PLAN_ON_A_SLICE = textwrap.dedent("""
    import json
    from jax.experimental import topologies
    from seed_jax.configs.search import get_config
    from seed_jax import launch
    from seed_jax.plan import targets

    devs = topologies.get_topology_desc(platform="tpu", topology_name="v5e:4x4").devices
    native = targets.native_target
    targets.native_target = lambda: native(devs)  # this process as host 0 of a v5e 4x4 slice
    c = get_config("tiny")
    c.unlock()
    c.analysis.analyzer = "self"
    c.rl.tasks_per_update, c.rl.mini_batch_size = 8, 32
    c.train.micro_batch_size = c.analysis.batch_size = c.rollout.wave_rows = -1
    launch.check_plan(c, "yes")
    print(json.dumps([c.train.micro_batch_size, c.analysis.batch_size, c.rollout.wave_rows]))
""")


@pytest.mark.slow
@needs_libtpu
def test_the_launch_plans_a_native_multi_host_slice_and_takes_its_choices():
    """`launch.check_plan` as it runs on host 0 of a v5e 4x4 slice (``--plan=yes``, the native
    devices): every program of the tiny run compiles, and the run takes the plan's sizes: the
    micro-batch a multiple of 16 (data x fsdp) dividing 32, waves and analysis calls of the host's
    8 tasks x 2 / 4 hosts = 4 rows."""
    r = _python(CHECK_PLAN_ON_A_SLICE)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "fits: yes" in r.stdout
    micro, analysis, wave = json.loads(r.stdout.strip().splitlines()[-1])
    assert micro in (16, 32) and (analysis, wave) == (4, 4)


def test_the_plan_chooses_a_micro_batch_that_fits_beside_what_stays_resident():
    """A device on which the 8-row train step fits alone but not beside the KL reference the RL
    train phase keeps resident: ``-1`` takes 4 rows (the 8-row step plus the reference would not fit)."""
    import dataclasses

    from seed_jax.plan.analysis import HEADROOM, plan_run, with_key
    from seed_jax.plan.targets import parse_target

    c = get_config("tiny")  # rl.mini_batch_size = 8
    target = parse_target("cpu:1")
    step = {"train_step"}
    explicit = {m: plan_run(with_key(c, "train.micro_batch_size", m), target, step) for m in (8, 4)}
    total = {m: max(p.total for p in plan.programs) for m, plan in explicit.items()}
    ref = explicit[8].trees["reference"]
    assert total[4] + ref < total[8] + ref / 2 < total[8] + ref  # 4 rows fit beside it, 8 rows alone only
    c.train.micro_batch_size = -1
    hbm = (total[8] + ref / 2) / (1 - HEADROOM)
    plan = plan_run(c, dataclasses.replace(target, chip=dataclasses.replace(target.chip, hbm=hbm)), step)
    assert plan.micro_batch.rows == 4 and plan.micro_batch.tried[8] is False
    assert next(p for p in plan.programs if p.name == "train_step").total == total[4] and plan.fits
