"""The ahead-of-time plan (`seed_jax.plan`): HLO figures against hand counts, the plan's memory
against a direct compile, the launcher's --dry_run refusing a config that cannot fit, a TPU plan."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

from seed_jax.plan import hlo

pytestmark = pytest.mark.integration  # whole pipelines / subprocess launches: CONTRIBUTING.md tiers

REPO = Path(__file__).resolve().parents[1]

# Two nested loops: the outer one has no known_trip_count (j = 2; j <= 4: 3 trips, as XLA:TPU
# writes loops), the inner one runs i = 0; i < 3 (3 trips), so the inner body runs 9 times.
HLO = """\
HloModule plan_test, entry_computation_layout={(f32[1024]{0})->f32[1024]{0}}

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

%fused_dot (p0: bf16[4,64], p1: bf16[64,32]) -> f32[4,32] {
  %p0 = bf16[4,64]{1,0} parameter(0)
  %p1 = bf16[64,32]{1,0} parameter(1)
  ROOT %d = f32[4,32]{1,0} dot(%p0, %p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}

%inner_body (ip: (s32[], f32[1024])) -> (s32[], f32[1024]) {
  %ip = (s32[], f32[1024]{0}) parameter(0)
  %i = s32[] get-tuple-element(%ip), index=0
  %x = f32[1024]{0} get-tuple-element(%ip), index=1
  %rs = f32[256]{0} reduce-scatter(%x), channel_id=1, replica_groups={{0,1,2,3},{4,5,6,7}}, dimensions={0}, to_apply=%add
  %ag = f32[1024]{0} all-gather(%rs), channel_id=2, replica_groups=[2,4]<=[8], dimensions={0}
  %one = s32[] constant(1)
  %n = s32[] add(%i, %one)
  ROOT %t = (s32[], f32[1024]{0}) tuple(%n, %ag)
}

%inner_cond (cp: (s32[], f32[1024])) -> pred[] {
  %cp = (s32[], f32[1024]{0}) parameter(0)
  %ci = s32[] get-tuple-element(%cp), index=0
  %lim = s32[] constant(3)
  ROOT %lt = pred[] compare(%ci, %lim), direction=LT
}

%outer_body (op: (s32[], f32[1024], bf16[4,64], bf16[64,32])) -> (s32[], f32[1024], bf16[4,64], bf16[64,32]) {
  %op = (s32[], f32[1024]{0}, bf16[4,64]{1,0}, bf16[64,32]{1,0}) parameter(0)
  %j = s32[] get-tuple-element(%op), index=0
  %y = f32[1024]{0} get-tuple-element(%op), index=1
  %a = bf16[4,64]{1,0} get-tuple-element(%op), index=2
  %w = bf16[64,32]{1,0} get-tuple-element(%op), index=3
  %zero = s32[] constant(0)
  %it = (s32[], f32[1024]{0}) tuple(%zero, %y)
  %inner = (s32[], f32[1024]{0}) while(%it), condition=%inner_cond, body=%inner_body
  %y2 = f32[1024]{0} get-tuple-element(%inner), index=1
  %ar = f32[1024]{0} all-reduce(%y2), channel_id=3, replica_groups=mesh['x'=2,'y'=4] {'y'}, to_apply=%add
  %cpm = f32[1024]{0} collective-permute(%ar), channel_id=4, source_target_pairs={{0,1},{1,0}}
  %f = f32[4,32]{1,0} fusion(%a, %w), kind=kOutput, calls=%fused_dot
  %one = s32[] constant(1)
  %jn = s32[] add(%j, %one)
  ROOT %r = (s32[], f32[1024]{0}, bf16[4,64]{1,0}, bf16[64,32]{1,0}) tuple(%jn, %cpm, %a, %w)
}

%outer_cond (oc: (s32[], f32[1024], bf16[4,64], bf16[64,32])) -> pred[] {
  %oc = (s32[], f32[1024]{0}, bf16[4,64]{1,0}, bf16[64,32]{1,0}) parameter(0)
  %oj = s32[] get-tuple-element(%oc), index=0
  %four = s32[] constant(4)
  ROOT %le = pred[] compare(%oj, %four), direction=LE
}

ENTRY %main (x: f32[1024], a: bf16[4,64], w: bf16[64,32]) -> f32[1024] {
  %x = f32[1024]{0} parameter(0)
  %a = bf16[4,64]{1,0} parameter(1)
  %w = bf16[64,32]{1,0} parameter(2)
  %two = s32[] constant(2)
  %start = (s32[], f32[1024]{0}, bf16[4,64]{1,0}, bf16[64,32]{1,0}) tuple(%two, %x, %a, %w)
  %loop = (s32[], f32[1024]{0}, bf16[4,64]{1,0}, bf16[64,32]{1,0}) while(%start), condition=%outer_cond, body=%outer_body
  %out = f32[1024]{0} get-tuple-element(%loop), index=1
  %sq = f32[8,8]{1,0} reshape(%w)
  %a2a = f32[8,8]{1,0} all-to-all(%sq), channel_id=5, replica_groups={}, dimensions={0}
  ROOT %res = f32[1024]{0} copy(%out)
}
"""


def test_hlo_collectives_flops_and_trip_counts_of_nested_loops():
    st = hlo.analyze(HLO, num_devices=8)
    assert sorted(n for _, n in st.loops) == [3, 3]
    kb = 4096  # f32[1024]
    # inner body 3 x 3 = 9 times: reduce-scatter of its 4 KiB input, all-gather of its 4 KiB result
    assert st.collective_bytes["reduce-scatter"] == 9 * kb
    assert st.collective_bytes["all-gather"] == 9 * kb
    # outer body 3 times: all-reduce and permute of 4 KiB; entry: all-to-all of f32[8,8] once
    assert st.collective_bytes["all-reduce"] == 3 * kb
    assert st.collective_bytes["collective-permute"] == 3 * kb
    assert st.collective_bytes["all-to-all"] == 256
    # link bytes: groups of 4 ((n-1)/n = 3/4, all-reduce twice that), the all-to-all over all 8
    assert st.link_bytes == pytest.approx(9 * kb * 0.75 * 2 + 3 * kb * 1.5 + 3 * kb + 256 * 7 / 8)
    # the fused dot [4,64] x [64,32] in the outer body: 2 * 4 * 32 * 64 FLOPs, 3 times
    assert st.flops == 3 * 2 * 4 * 32 * 64


# XLA:TPU's async collective fusion, as it writes a layer's weight all-gather inside a loop of 5
# trips: the gather in the start fusion, again in a fusion of compute overlapping it and in the
# done fusion (one channel_id); a reduce-scatter as an all-reduce inside an all-reduce-scatter fusion.
ASYNC_FUSION_HLO = """\
HloModule async_fusions

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

%start_body (s0: bf16[16,64]) -> (bf16[16,64], bf16[64,64], u32[]) {
  %s0 = bf16[16,64]{1,0} parameter(0)
  %ag1 = bf16[64,64]{1,0} all-gather(%s0), channel_id=7, replica_groups=[1,4]<=[4], dimensions={0}
  ROOT %cs = (bf16[16,64]{1,0}, bf16[64,64]{1,0}, u32[]) custom-call(%ag1), custom_call_target="AsyncCollectiveStart"
}

%overlap_body (o0: bf16[16,64], o1: bf16[64,64], o2: u32[], o3: f32[8,64]) -> (f32[8,64], bf16[16,64], bf16[64,64], u32[]) {
  %o0 = bf16[16,64]{1,0} parameter(0)
  %o1 = bf16[64,64]{1,0} parameter(1)
  %o2 = u32[] parameter(2)
  %o3 = f32[8,64]{1,0} parameter(3)
  %ag2 = bf16[64,64]{1,0:S(1)} all-gather(%o0), channel_id=7, replica_groups=[1,4]<=[4], dimensions={0}
  %t = f32[8,64]{1,0} tanh(%o3)
  ROOT %ot = (f32[8,64]{1,0}, bf16[16,64]{1,0}, bf16[64,64]{1,0}, u32[]) tuple(%t, %o0, %ag2, %o2)
}

%done_body (d0: bf16[16,64], d1: bf16[64,64], d2: u32[]) -> bf16[64,64] {
  %d0 = bf16[16,64]{1,0} parameter(0)
  %d1 = bf16[64,64]{1,0} parameter(1)
  %d2 = u32[] parameter(2)
  %ag3 = bf16[64,64]{1,0} all-gather(%d0), channel_id=7, replica_groups=[1,4]<=[4], dimensions={0}
  ROOT %cd = bf16[64,64]{1,0} custom-call(%d0, %d1, %ag3, %d2), custom_call_target="AsyncCollectiveDone"
}

%all-reduce-scatter.3 (r0: f32[64,64]) -> f32[16,64] {
  %r0 = f32[64,64]{1,0} parameter(0)
  %ar = f32[64,64]{1,0} all-reduce(%r0), channel_id=7, replica_groups={{0,1,2,3}}, to_apply=%add
  %pid = u32[] partition-id()
  %z = u32[] constant(0)
  ROOT %sl = f32[16,64]{1,0} dynamic-slice(%ar, %pid, %z), dynamic_slice_sizes={16,64}
}

%body (bp: (s32[], bf16[16,64], f32[8,64], f32[64,64])) -> (s32[], bf16[16,64], f32[8,64], f32[64,64]) {
  %bp = (s32[], bf16[16,64]{1,0}, f32[8,64]{1,0}, f32[64,64]{1,0}) parameter(0)
  %i = s32[] get-tuple-element(%bp), index=0
  %w = bf16[16,64]{1,0} get-tuple-element(%bp), index=1
  %x = f32[8,64]{1,0} get-tuple-element(%bp), index=2
  %g = f32[64,64]{1,0} get-tuple-element(%bp), index=3
  %st = (bf16[16,64]{1,0}, bf16[64,64]{1,0}, u32[]) fusion(%w), kind=kCustom, calls=%start_body
  %st0 = bf16[16,64]{1,0} get-tuple-element(%st), index=0
  %st1 = bf16[64,64]{1,0} get-tuple-element(%st), index=1
  %st2 = u32[] get-tuple-element(%st), index=2
  %ov = (f32[8,64]{1,0}, bf16[16,64]{1,0}, bf16[64,64]{1,0}, u32[]) fusion(%st0, %st1, %st2, %x), kind=kOutput, calls=%overlap_body
  %ov1 = bf16[16,64]{1,0} get-tuple-element(%ov), index=1
  %ov2 = bf16[64,64]{1,0} get-tuple-element(%ov), index=2
  %ov3 = u32[] get-tuple-element(%ov), index=3
  %x2 = f32[8,64]{1,0} get-tuple-element(%ov), index=0
  %gathered = bf16[64,64]{1,0} fusion(%ov1, %ov2, %ov3), kind=kCustom, calls=%done_body
  %rs = f32[16,64]{1,0} fusion(%g), kind=kCustom, calls=%all-reduce-scatter.3
  %one = s32[] constant(1)
  %n = s32[] add(%i, %one)
  ROOT %r = (s32[], bf16[16,64]{1,0}, f32[8,64]{1,0}, f32[64,64]{1,0}) tuple(%n, %w, %x2, %g)
}

%cond (cp: (s32[], bf16[16,64], f32[8,64], f32[64,64])) -> pred[] {
  %cp = (s32[], bf16[16,64]{1,0}, f32[8,64]{1,0}, f32[64,64]{1,0}) parameter(0)
  %ci = s32[] get-tuple-element(%cp), index=0
  %lim = s32[] constant(5)
  ROOT %lt = pred[] compare(%ci, %lim), direction=LT
}

ENTRY %main (w: bf16[16,64], x: f32[8,64], g: f32[64,64]) -> f32[8,64] {
  %w = bf16[16,64]{1,0} parameter(0)
  %x = f32[8,64]{1,0} parameter(1)
  %g = f32[64,64]{1,0} parameter(2)
  %zero = s32[] constant(0)
  %t0 = (s32[], bf16[16,64]{1,0}, f32[8,64]{1,0}, f32[64,64]{1,0}) tuple(%zero, %w, %x, %g)
  %loop = (s32[], bf16[16,64]{1,0}, f32[8,64]{1,0}, f32[64,64]{1,0}) while(%t0), condition=%cond, body=%body
  ROOT %out = f32[8,64]{1,0} get-tuple-element(%loop), index=2
}
"""


def test_hlo_async_collective_fusion_counts_its_collective_once_per_trip():
    """The gather written three times (start, overlap, done fusions) is one 64 x 64 bf16 all-gather
    per trip; the all-reduce-scatter fusion one reduce-scatter of its 64 x 64 f32 input (reusing
    channel 7 with another shape: a different collective); 5 trips, groups of 4."""
    st = hlo.analyze(ASYNC_FUSION_HLO, num_devices=4)
    assert st.collective_bytes["all-gather"] == 5 * 64 * 64 * 2
    assert st.collective_bytes["reduce-scatter"] == 5 * 64 * 64 * 4
    assert st.collective_bytes["all-reduce"] == 0
    assert st.link_bytes == pytest.approx(0.75 * 5 * (64 * 64 * 2 + 64 * 64 * 4))


def test_hlo_kernel_flops_from_their_declared_cost_estimates():
    """A Pallas kernel (custom call) adds the FLOPs its backend config declares, once per trip; one
    declaring none is listed, so the plan can say its MFU is a floor."""
    kernels = ('  %k1 = f32[4,32]{1,0} custom-call(%a, %w), custom_call_target="tpu_custom_call", '
               'backend_config={"custom_call_config": {"body": "AAA"}, "cost_estimate":{"flops":"1000",'
               '"transcendentals":"0","bytes_accessed":"64"}}\n'
               '  %k2 = f32[4,32]{1,0} custom-call(%a, %w), custom_call_target="tpu_custom_call", '
               'backend_config={"custom_call_config": {"body": "BBB"}}\n'
               '  %f = f32[4,32]{1,0} fusion(%a, %w), kind=kOutput, calls=%fused_dot')
    text = HLO.replace("  %f = f32[4,32]{1,0} fusion(%a, %w), kind=kOutput, calls=%fused_dot", kernels)
    st = hlo.analyze(text, 8)
    assert st.flops == 3 * (2 * 4 * 32 * 64 + 1000)
    assert st.uncosted_kernels == ["k2"]
    assert hlo.analyze(HLO, 8).uncosted_kernels == []


def test_hlo_loop_of_unknown_trip_count_counts_as_told():
    text = HLO.replace("ROOT %le = pred[] compare(%oj, %four), direction=LE",
                       "%d = pred[] compare(%oj, %four), direction=LE\n  ROOT %nd = pred[] not(%d)")
    assert hlo.analyze(text, 8).unknown_loops == ["loop"]
    assert hlo.analyze(text, 8, unknown_trips=5).collective_bytes["all-reduce"] == 5 * 4096


def test_hlo_flops_of_a_compiled_loop_count_every_trip():
    """XLA's cost_analysis counts a loop body once; the HLO walk counts all 7 trips."""
    x = jax.ShapeDtypeStruct((32, 64), jnp.float32)
    w = jax.ShapeDtypeStruct((64, 64), jnp.float32)
    compiled = jax.jit(lambda a, w: jax.lax.fori_loop(0, 7, lambda i, a: jnp.tanh(a @ w), a)).lower(x, w).compile()
    st = hlo.analyze(compiled.as_text(), 1)
    assert st.flops == 7 * 2 * 32 * 64 * 64
    assert [n for _, n in st.loops] == [7]


def _run(args, env=None, timeout=600):
    path = os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])
    env = {**os.environ, "PYTHONPATH": path, "JAX_PLATFORMS": "cpu", **(env or {})}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=REPO, env=env, timeout=timeout)


DIRECT = textwrap.dedent("""
    import json, sys
    import jax, jax.numpy as jnp
    from seed_jax.configs.alfworld import get_config
    from seed_jax.models.tokenizer import load_tokenizer
    from seed_jax.pipeline.runtime import random_model_config, train_config
    from seed_jax.plan.analysis import plan_run
    from seed_jax.plan.targets import parse_target
    from seed_jax.train.batch import SeedBatch
    from seed_jax.train.mesh import make_mesh
    from seed_jax.train.state import abstract_train_state
    from seed_jax.train.step import make_train_step

    # the direct compile below builds the same program: the persistent cache spares a second compile
    jax.config.update("jax_compilation_cache_dir", sys.argv[1])
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    c = get_config("tiny")
    c.train.micro_batch_size = 8
    c.rl.mini_batch_size = 16
    c.train.lambda_opd = 0.0  # no teacher pass: a smaller program, a faster compile
    plan = plan_run(c, parse_target("cpu:8"), {"train_step"})
    (p,) = plan.programs
    # the same step compiled directly, its batch written out by hand: P=768, R=16, 16 rows
    cfg = random_model_config(c, load_tokenizer(None))
    tc = train_config(c)
    step = make_train_step(cfg, tc, make_mesh(devices=jax.devices()[:8]))
    i32 = lambda n: jax.ShapeDtypeStruct((16, n), jnp.int32)
    f32 = jax.ShapeDtypeStruct((16, 16), jnp.float32)
    batch = SeedBatch(i32(784), i32(784), f32, f32, jax.ShapeDtypeStruct((16,), jnp.float32), f32, f32)
    m = step.lower(abstract_train_state(cfg, tc), batch).compile().memory_analysis()
    json.dump({"plan": [p.argument, p.output, p.alias, p.temp], "mesh": plan.mesh,
               "direct": [m.argument_size_in_bytes, m.output_size_in_bytes, m.alias_size_in_bytes,
                          m.temp_size_in_bytes],
               "vocab": cfg.vocab_size, "fits": plan.fits}, sys.stdout)
""")


def test_plan_on_8_cpu_devices_agrees_with_a_direct_compile(tmp_path):
    r = _run(["-c", DIRECT, str(tmp_path / "cache")])
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["mesh"] == {"data": 8, "fsdp": 1, "tensor": 1}
    assert out["plan"] == out["direct"]
    # arguments by hand: data parallelism keeps the whole state on each device (params, Adam mu
    # and nu in float32; 4 int32 counters, the rng, Adam's count) and 16 / 8 = 2 batch rows (ids,
    # mask, 4 per-token arrays; has_skill is unused without OPD, and jit drops unused inputs)
    V, h, L = out["vocab"], 64, 2
    n_params = V * h + L * (h * h + 2 * h * (h // 2) + h * h + 3 * h * 2 * h + 2 * h) + h
    state = 3 * 4 * n_params + 4 * 4 + 8 + 4
    batch = 2 * (2 * 784 * 4 + 4 * 16 * 4)
    assert out["plan"][0] == state + batch
    assert out["fits"] is True


BIG = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "vocab_size": 151936, "hidden_size": 4096,
       "intermediate_size": 11008, "num_hidden_layers": 2, "num_attention_heads": 32, "num_key_value_heads": 8,
       "tie_word_embeddings": False}


def test_sft_step_of_fewer_rows_than_devices_is_planned_with_fill_rows():
    """The paper's 8-row SFT batch on a 16-chip slice was refused (rows not a multiple of the mesh);
    the run now fills each batch with masked rows to the mesh's row shards, and the plan with it."""
    r = _run(["-m", "seed_jax.plan", "--config=configs/alfworld.py:tiny", "--target=cpu:8", "--programs=sft_step",
              "--config.stage1.sft_batch_size=2", "--config.stage1.sft_micro_batch_size=2"])
    assert r.returncode == 0, r.stderr[-3000:]
    assert "sft_step: 8 rows (2 examples) x " in r.stdout and "micro-batches of 8" in r.stdout


def test_dry_run_of_a_config_that_cannot_fit_exits_nonzero_naming_the_program(tmp_path):
    """2 layers of width 4096 and a 152k vocabulary in float32: 1.9B parameters, 30 GB of state
    with Adam, on one 24 GB L4."""
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text(json.dumps(BIG))
    for name in ("model.safetensors", "tokenizer.json"):  # present for the preflight; the plan reads neither
        (tmp_path / "m" / name).write_text("")
    r = _run(["-m", "seed_jax.launch", "--config=configs/alfworld.py:paper", f"--config.model.path={tmp_path / 'm'}",
              "--config.stage1.analyzer=self",  # the paper's annotator endpoint is not what is tested
              "--config.env.vendored_data=True",  # the games are not what this test is about
              "--config.train.micro_batch_size=16",  # the preset's -1 would bisect the sizes, none fitting
              f"--workdir={tmp_path / 'w'}", "--dry_run", "--plan=gpu:l4x1"])
    assert r.returncode == 2, r.stderr[-2000:]
    err = r.stderr.strip().splitlines()[-1]
    assert err.startswith("error: train_step does not fit gpu:l4x1:") and "GB per device of 24.00 GB" in err
    assert "turn train.micro_batch_size, model.remat" in err and "sft_micro_batch_size" not in err
    assert "fits: no" in r.stdout
    assert not (tmp_path / "w").exists()


def test_plan_rejects_a_bad_target_with_one_line():
    r = _run(["-m", "seed_jax.plan", "--config=configs/alfworld.py:tiny", "--target=gpu:x100x8"])
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        "error: --target=gpu:x100x8: expected gpu:<kind>x<n> with kind one of ['h100', 'h200', 'a100', 'l4'], "
        "e.g. gpu:h100x8"]


def _libtpu() -> bool:
    try:
        import libtpu  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.mark.skipif(not _libtpu(), reason='libtpu is not installed (pip install -e ".[tpu-aot]")')
def test_tpu_plan_of_a_tiny_config(tmp_path):
    """XLA:TPU compiles the tiny train step for a v5e 2x2 slice (no TPU attached): it fits 16 GiB,
    does matmul work and splits the batch over the 4 chips."""
    r = _run(["-m", "seed_jax.plan", "--config=configs/alfworld.py:tiny", "--target=tpu:v5e:2x2",
              "--programs=train_step", "--config.train.lambda_opd=0", f"--json={tmp_path / 'p.json'}"],
             env={"JAX_PLATFORMS": ""})
    assert r.returncode == 0, r.stderr[-3000:]
    plan = json.loads((tmp_path / "p.json").read_text())
    (p,) = plan["programs"]
    assert plan["devices"] == 4 and plan["mesh"]["data"] == 4 and plan["fits"] is True
    assert p["hbm"] == 16 * 2**30 and 0 < p["total"] < p["hbm"]
    assert p["flops"] > 0 and p["unknown_loops"] == []
    assert r.stdout.strip().splitlines()[-1] == "fits: yes"


@pytest.mark.skipif(not _libtpu(), reason='libtpu is not installed (pip install -e ".[tpu-aot]")')
def test_the_runs_tpu_flags_are_known_to_libtpu():
    """libtpu refuses to start on a flag it does not know (an earlier flag set held one, so a TPU
    run would have died at start-up); the plan of a tpu: target compiles with the same flags."""
    from seed_jax.train.xla_setup import TPU_FLAGS

    code = ("from jax.experimental import topologies\n"
            "print(len(topologies.get_topology_desc(platform='tpu', topology_name='v5e:2x2').devices))\n")
    env = {"JAX_PLATFORMS": "", "ALLOW_MULTIPLE_LIBTPU_LOAD": "true"}  # no chip to share: compile only
    ok = _run(["-c", code], env={**env, "LIBTPU_INIT_ARGS": " ".join(TPU_FLAGS)})
    assert ok.returncode == 0 and ok.stdout.strip() == "4", ok.stderr[-3000:]
    assert "Unknown command line flag" not in ok.stderr
    bad = _run(["-c", code], env={**env, "LIBTPU_INIT_ARGS": "--xla_enable_async_reduce_scatter=true"})
    assert "Unknown command line flag 'xla_enable_async_reduce_scatter'" in bad.stdout + bad.stderr


FLASH_ON_TPU = """
import jax, jax.numpy as jnp
from jax.experimental import topologies
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from seed_jax.models import decoder
from seed_jax.train.synthetic import random_params, tiny_config
devs = topologies.get_topology_desc(platform="tpu", topology_name="v5e:2x2").devices
mesh = Mesh(devs, ("fsdp",))
cfg = tiny_config(dtype="bfloat16", attention="dot_product", head_dim=128, max_position_embeddings=1024)
params = jax.eval_shape(lambda: random_params(cfg, 0))
rows = NamedSharding(mesh, P("fsdp"))
whole = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=NamedSharding(mesh, P())), params)
def loss(p, ids, mask):
    with decoder.activation_sharding(mesh, row_axes=("fsdp",)):
        return decoder.forward(p, cfg, ids, mask).astype(jnp.float32).sum()
for T in (384, 200):
    ids = jax.ShapeDtypeStruct((8, T), jnp.int32, sharding=rows)
    text = jax.jit(jax.grad(loss)).lower(whole, ids, ids).compile().as_text()
    print(T, text.count('custom_call_target="tpu_custom_call"'), f",{T},{T}]" in text)
"""


@pytest.mark.skipif(not _libtpu(), reason='libtpu is not installed (pip install -e ".[tpu-aot]")')
def test_dot_product_attention_compiles_to_the_flash_kernel_for_tpu():
    """Compiled for TPU chips, the scanned decoder's attention is the Pallas flash kernel
    (forward, dq and dkv kernels; no T x T score array) when 128-token blocks divide the length,
    and XLA's attention (score arrays, no kernel) when they do not."""
    r = _run(["-c", FLASH_ON_TPU], env={"JAX_PLATFORMS": "", "ALLOW_MULTIPLE_LIBTPU_LOAD": "true"})
    assert r.returncode == 0, r.stderr[-3000:]
    got = {int(t): (int(n), s == "True") for t, n, s in (line.split() for line in r.stdout.strip().splitlines())}
    assert got[384][0] >= 3 and got[384][1] is False
    assert got[200] == (0, True)


FUSED_COLLECTIVES_ON_TPU = """
import json
import jax, jax.numpy as jnp
from jax.experimental import topologies
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from seed_jax.plan import hlo
from seed_jax.train.xla_setup import configure
configure(None, gpu=False, tpu=True)  # the run's libtpu flags: async collective fusions on
mesh = Mesh(topologies.get_topology_desc(platform="tpu", topology_name="v5e:2x2").devices, ("fsdp",))
L, H = 6, 512
whole, rows = NamedSharding(mesh, P()), NamedSharding(mesh, P("fsdp"))
ws = NamedSharding(mesh, P(None, "fsdp", None))
def three(w1, w2, w3, x):  # each layer gathers its three weights
    def body(x, w):
        a, b, c = (jax.lax.with_sharding_constraint(v, whole) for v in w)
        return jnp.tanh(jnp.tanh(jnp.tanh(x @ a) @ b) @ c), None
    return jax.lax.scan(body, x, (w1, w2, w3))[0]
def loss(w, x):
    return jax.lax.scan(lambda x, wl: (jnp.tanh(x @ jax.lax.with_sharding_constraint(wl, whole)), None), x, w)[0].sum()
w = jax.ShapeDtypeStruct((L, H, H), jnp.bfloat16, sharding=ws)
x = jax.ShapeDtypeStruct((256, H), jnp.bfloat16, sharding=rows)
fwd = jax.jit(three).lower(w, w, w, x).compile().as_text()
w32 = jax.ShapeDtypeStruct((L, H, H), jnp.float32, sharding=ws)
x32 = jax.ShapeDtypeStruct((256, H), jnp.float32, sharding=rows)
grad = jax.jit(jax.grad(loss), out_shardings=ws).lower(w32, x32).compile().as_text()
out = {}
for name, text in (("fwd", fwd), ("grad", grad)):
    st = hlo.analyze(text, 4)
    out[name] = {"bytes": st.collective_bytes, "link": st.link_bytes, "async_fusions": text.count("AsyncCollectiveStart"),
                 "rs_fusions": text.count("calls=%all-reduce-scatter")}
print(json.dumps(out))
"""


@pytest.mark.skipif(not _libtpu(), reason='libtpu is not installed (pip install -e ".[tpu-aot]")')
def test_collectives_inside_tpu_fusions_are_counted_once_each():
    """Hand count, L = 6 layers of H x H = 512 x 512 weights sharded over 4 v5e chips. Forward of
    three weights per layer (bf16): each is gathered whole once per layer, 3 L H^2 2 bytes; XLA:TPU
    puts at least one in an async collective fusion (the same all-gather written in its start,
    overlap and done fusions: one collective). The gradient of one f32 weight per layer, sharded
    like the weight: L H^2 4 bytes reduce-scattered (XLA:TPU: an all-reduce inside an
    all-reduce-scatter fusion), no all-reduce. Link bytes: (n-1)/n = 3/4 of each."""
    r = _run(["-c", FUSED_COLLECTIVES_ON_TPU], env={"JAX_PLATFORMS": "", "ALLOW_MULTIPLE_LIBTPU_LOAD": "true"})
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    L, H = 6, 512
    fwd, grad = out["fwd"], out["grad"]
    assert fwd["async_fusions"] >= 1 and grad["rs_fusions"] >= 1  # the layouts this test is about
    assert fwd["bytes"]["all-gather"] == 3 * L * H * H * 2
    assert fwd["bytes"]["all-reduce"] == fwd["bytes"]["reduce-scatter"] == 0
    assert fwd["link"] == pytest.approx(0.75 * 3 * L * H * H * 2)
    assert grad["bytes"]["reduce-scatter"] == L * H * H * 4
    assert grad["bytes"]["all-reduce"] == 0


TENSOR_ON_TPU = """
import json
import jax, jax.numpy as jnp
from jax.experimental import topologies
from jax.sharding import NamedSharding, PartitionSpec as P
from seed_jax.models import decoder
from seed_jax.plan import hlo
from seed_jax.train.logprobs import param_shardings, response_logprobs
from seed_jax.train.mesh import make_mesh
from seed_jax.train.synthetic import random_params, tiny_config
devs = topologies.get_topology_desc(platform="tpu", topology_name="v5e:2x2").devices
cfg = tiny_config(dtype="bfloat16", attention="dot_product", head_dim=128, max_position_embeddings=1024,
                  vocab_size=4096, hidden_size=256, intermediate_size=512)
params = jax.eval_shape(lambda: random_params(cfg, 0))
out = {}
for f, t in ((4, 1), (2, 2)):
    mesh = make_mesh(data=1, fsdp=f, tensor=t, devices=devs)
    sp = param_shardings(cfg, mesh)
    p = jax.tree.map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), params, sp)
    ids = jax.ShapeDtypeStruct((8, 384), jnp.int32, sharding=NamedSharding(mesh, P(("data", "fsdp"))))
    def loss(p, ids):
        with decoder.activation_sharding(mesh):
            return response_logprobs(p, cfg, ids, ids, 256, 128, with_entropy=False)[0].sum()
    text = jax.jit(jax.grad(loss), out_shardings=sp).lower(p, ids).compile().as_text()
    kernels = [hlo.arrays(line.split("=", 1)[1].split("custom-call(")[0]) for line in text.splitlines()
               if 'custom_call_target="tpu_custom_call"' in line]
    out[f"tensor{t}"] = {"flops": hlo.analyze(text, 4).flops, "heads": sorted({a[0][1][1] for a in kernels})}
print(json.dumps(out))
"""


@pytest.mark.skipif(not _libtpu(), reason='libtpu is not installed (pip install -e ".[tpu-aot]")')
def test_tensor_axis_splits_flash_attention_heads_and_lm_head_positions():
    """The gradient of the scanned decoder's log-probs (flash attention: 4 query / 2 kv heads,
    384 tokens, 128 response positions through the LM head) compiled for 4 v5e chips as fsdp=2 x
    tensor=2: each chip's flash kernels hold 4 / 2 = 2 heads (no tensor shard attends all 4
    again), and its FLOPs are those of fsdp=4 (the same work split 4 ways), not more."""
    r = _run(["-c", TENSOR_ON_TPU], env={"JAX_PLATFORMS": "", "ALLOW_MULTIPLE_LIBTPU_LOAD": "true"})
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["tensor1"]["heads"] == [4] and out["tensor2"]["heads"] == [2]
    assert out["tensor2"]["flops"] <= 1.01 * out["tensor1"]["flops"]


@pytest.mark.skipif(not _libtpu(), reason='libtpu is not installed (pip install -e ".[tpu-aot]")')
def test_lm_head_gradient_is_reduce_scattered_in_the_train_step(tmp_path):
    """The tiny train step (tied embedding, 2 micro-batches) on 4 v5e chips as fsdp=4: the head's
    gradient reaches each chip as its reduce-scattered shard; no all-reduce as large as one
    vocab x hidden matrix (before: one f32 head all-reduce per micro-batch, and the lookup's)."""
    r = _run(["-m", "seed_jax.plan", "--config=configs/alfworld.py:tiny", "--target=tpu:v5e:2x2",
              "--programs=train_step", "--config.train.lambda_opd=0", "--config.mesh.data=1",
              "--config.mesh.fsdp=4", f"--json={tmp_path / 'p.json'}"],
             env={"JAX_PLATFORMS": "", "ALLOW_MULTIPLE_LIBTPU_LOAD": "true"})
    assert r.returncode == 0, r.stderr[-3000:]
    plan = json.loads((tmp_path / "p.json").read_text())
    (p,) = plan["programs"]
    head = plan["model"]["vocab"] * plan["model"]["hidden"]
    assert plan["mesh"] == {"data": 1, "fsdp": 4, "tensor": 1}
    assert p["collective_bytes"]["all-reduce"] < head * 2
    assert p["collective_bytes"]["reduce-scatter"] >= 2 * head * 4  # f32, once per micro-batch


HYBRID = """
from jax.experimental import topologies
from seed_jax.train.mesh import make_mesh
devs = topologies.get_topology_desc(platform="tpu", topology_name="v5e:2x2", num_slices=2).devices
m = make_mesh(data=-1, fsdp=-1, devices=devs)
print(dict(m.shape))
for row in m.devices:
    print(sorted({d.slice_index for d in row.reshape(-1)}))
try:
    make_mesh(data=1, fsdp=8, devices=devs)
except ValueError as e:
    print("refused:", e)
"""


@pytest.mark.skipif(not _libtpu(), reason='libtpu is not installed (pip install -e ".[tpu-aot]")')
def test_two_tpu_slices_make_a_hybrid_mesh():
    """Two v5e 2x2 slices: ZeRO-3 over one slice's 4 chips, data parallel across the slices; each
    'data' row of the mesh is one slice; a mesh that would stretch 'fsdp' over both is refused."""
    r = _run(["-c", HYBRID], env={"JAX_PLATFORMS": "", "ALLOW_MULTIPLE_LIBTPU_LOAD": "true"})
    assert r.returncode == 0, r.stderr[-3000:]
    lines = r.stdout.strip().splitlines()
    assert lines[0] == "{'data': 2, 'fsdp': 4, 'tensor': 1}"
    assert lines[1:3] == ["[0]", "[1]"]
    assert lines[3].startswith("refused: mesh data=1 must be a multiple of the 2 TPU slices")


@pytest.mark.parametrize("spec, says", [
    ("tpu:v9:2x2", "expected tpu:<generation>:<topology>"),
    ("tpu:v5e", "expected tpu:<generation>:<topology>"),
    ("gpu:h100x0", "expected gpu:<kind>x<n>"),
    ("cpu:0", "expected cpu:<n> with n >= 1"),
    ("fpga:4", "expected tpu:<topology>, gpu:<kind>x<n>, cpu:<n> or native"),
])
def test_bad_target_spellings_name_what_is_expected(spec, says):
    from seed_jax.plan.targets import TargetError, parse_target

    with pytest.raises(TargetError, match=f"--target={spec}: {says}".replace("(", r"\(").replace(")", r"\)")):
        parse_target(spec)


def test_hlo_flops_of_a_batched_matmul_written_as_a_dilated_convolution():
    """XLA:TPU writes ``q k^T`` per (batch, head) as a convolution whose window covers the batch and
    head dims over an input dilated by the window: one input element per output and tap dim."""
    text = """\
ENTRY %main (a: bf16[2,512,8,128], b: bf16[2,512,8,128]) -> bf16[2,8,512,512] {
  %a = bf16[2,512,8,128]{3,2,1,0} parameter(0)
  %b = bf16[2,512,8,128]{3,2,1,0} parameter(1)
  ROOT %c = bf16[2,8,512,512]{3,2,1,0} convolution(%a, %b), window={size=2x8 stride=1x7 lhs_dilate=2x8}, dim_labels=0b1f_0o1i->01bf
}
"""
    B, H, T, D = 2, 8, 512, 128
    assert hlo.analyze(text, 1).flops == 2 * B * H * T * T * D


# A fusion whose stacked-weight operand is dynamic-sliced one layer at a time inside a nested
# fusion (as XLA:TPU writes a scanned layer's matmul), beside one that reads its operand whole.
NESTED_SLICE_HLO = """
HloModule nested

%slice_layer (p0: bf16[8,64,32], p1: s32[]) -> bf16[64,32] {
  %p0 = bf16[8,64,32]{2,1,0} parameter(0)
  %p1 = s32[] parameter(1)
  %z = s32[] constant(0)
  %ds = bf16[1,64,32]{2,1,0} dynamic-slice(%p0, %p1, %z, %z), dynamic_slice_sizes={1,64,32}
  ROOT %b = bf16[64,32]{1,0} bitcast(%ds)
}

%layer_dot (q0: bf16[8,64,32], q1: s32[], q2: bf16[4,64]) -> bf16[4,32] {
  %q0 = bf16[8,64,32]{2,1,0} parameter(0)
  %q1 = s32[] parameter(1)
  %q2 = bf16[4,64]{1,0} parameter(2)
  %w = bf16[64,32]{1,0} fusion(%q0, %q1), kind=kLoop, calls=%slice_layer
  ROOT %d = bf16[4,32]{1,0} dot(%q2, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}

%whole_sum (r0: bf16[8,64,32]) -> bf16[8,64,32] {
  %r0 = bf16[8,64,32]{2,1,0} parameter(0)
  ROOT %n = bf16[8,64,32]{2,1,0} negate(%r0)
}

%wrap (s0: bf16[8,64,32]) -> bf16[8,64,32] {
  %s0 = bf16[8,64,32]{2,1,0} parameter(0)
  ROOT %inner = bf16[8,64,32]{2,1,0} fusion(%s0), kind=kLoop, calls=%whole_sum
}

ENTRY %main (ws: bf16[8,64,32], i: s32[], x: bf16[4,64]) -> bf16[4,32] {
  %ws = bf16[8,64,32]{2,1,0} parameter(0)
  %i = s32[] parameter(1)
  %x = bf16[4,64]{1,0} parameter(2)
  %neg = bf16[8,64,32]{2,1,0} fusion(%ws), kind=kLoop, calls=%wrap
  ROOT %y = bf16[4,32]{1,0} fusion(%ws, %i, %x), kind=kOutput, calls=%layer_dot
}
"""


def test_hlo_bytes_of_an_operand_sliced_inside_a_nested_fusion():
    st = hlo.analyze(NESTED_SLICE_HLO, num_devices=1)
    layer, stack, x, y = 64 * 32 * 2, 8 * 64 * 32 * 2, 4 * 64 * 2, 4 * 32 * 2
    # %y reads one layer's slice, the index and x, writes y; %neg reads and writes the whole stack
    assert st.hbm_bytes == (layer + 4 + x + y) + 2 * stack


def test_the_plan_chooses_the_largest_rollout_wave_that_fits():
    """Reference: the rollout programs planned at explicit waves of 16 and 8 rows. On a device
    whose memory lies between their totals, ``rollout.wave_rows = -1`` makes the plan try all 16
    rows, then bisect 8, 4, 2, 1 to 8 (2, 4 and 8 fit) and show the 8-row programs; with room for 16
    it takes 16 at the first try, with none it takes none and says so."""
    import dataclasses

    from seed_jax.configs.search import get_config
    from seed_jax.pipeline.environments import make_benchmark
    from seed_jax.pipeline.runtime import rollout_settings
    from seed_jax.plan.analysis import HEADROOM, format_plan, plan_run, with_wave_rows
    from seed_jax.plan.targets import parse_target

    c = get_config("tiny")
    c.rl.tasks_per_update, c.rollout.group_size = 8, 2
    target = parse_target("cpu:1")
    explicit = {rows: plan_run(with_wave_rows(c, rows), target, {"rollout"}).programs for rows in (16, 8)}
    total = {rows: max(p.total for p in ps) for rows, ps in explicit.items()}
    assert total[16] > total[8]
    c.rollout.wave_rows = -1

    def on(hbm):
        return dataclasses.replace(target, chip=dataclasses.replace(target.chip, hbm=hbm / (1 - HEADROOM)))

    plan = plan_run(c, on((total[16] + total[8]) / 2), {"rollout"})
    assert plan.waves.rows == 8 and plan.waves.tried == {16: False, 8: True, 4: True, 2: True}
    assert [(p.name, p.total) for p in plan.programs] == [(p.name, p.total) for p in explicit[8]]
    assert "the plan's wave is 8 rows (tried: 16 does not, 8 fits, 4 fits, 2 fits)" in format_plan(plan)
    assert plan_run(c, on(total[16] * 2), {"rollout"}).waves.tried == {16: True}
    none = plan_run(c, on(total[8] / 100), {"rollout"})
    assert none.waves.rows is None and min(none.waves.tried) == 1 and not none.fits
    # a run that plans nothing (CPU) samples every live episode in one call
    assert rollout_settings(c, make_benchmark(c.env)).wave_rows == 0


def test_the_plan_lists_the_sampler_buckets_a_run_may_compile():
    """Hand-computed: 3 tasks x 2 rollouts = 6 rows -> row buckets 1, 2, 4, 8 (powers of two up to
    the one holding 6); prompts of at most 100 tokens -> lengths 16 .. 128 of the bucket list (7);
    with waves of 2 rows only 1 and 2 rows remain."""
    from seed_jax.configs.search import get_config
    from seed_jax.plan.analysis import compile_estimate, format_plan, plan_run
    from seed_jax.plan.targets import parse_target

    c = get_config("tiny")
    c.rl.tasks_per_update, c.rollout.group_size, c.rollout.max_prompt_tokens = 3, 2, 100
    lens = [16, 24, 32, 48, 64, 96, 128]
    plan = plan_run(c, parse_target("cpu:1"), {"rollout_decode"})
    assert plan.buckets["rollout"] == [(r, n) for r in (1, 2, 4, 8) for n in lens]
    assert "rollout sampler buckets the run may compile: rows [1, 2, 4, 8] x prompt lengths 16..128 (7) = 28" \
        in format_plan(plan)
    # 28 buckets of one decode program each, timed as the plan's own compile of the largest
    (decode,) = plan.programs
    assert compile_estimate(plan) == (28, pytest.approx(28 * decode.compile_s))
    assert f"the run compiles about 28 programs, about {28 * decode.compile_s / 60:.1f} min" in format_plan(plan)
    c.rollout.wave_rows = 2
    assert plan_run(c, parse_target("cpu:1"), {"rollout_decode"}).buckets["rollout"] == [
        (r, n) for r in (1, 2) for n in lens]


def test_the_sampler_is_planned_on_one_hosts_devices_for_its_share_of_the_rows():
    """Hand-computed: 3 tasks x 2 rollouts on 2 hosts -> the first host samples 2 tasks = 4 rows
    (at most a wave of 2); a mesh over two hosts' devices -> the first host's devices only."""
    import types

    import numpy as np

    from seed_jax.configs.search import get_config
    from seed_jax.plan.programs import host_devices, host_rollout_rows

    c = get_config("tiny")
    c.rl.tasks_per_update, c.rollout.group_size = 3, 2
    assert [host_rollout_rows(c, h) for h in (1, 2, 4)] == [6, 4, 2]
    c.rollout.wave_rows = 2
    assert host_rollout_rows(c, 1) == 2
    devs = [types.SimpleNamespace(id=i, process_index=i // 4) for i in range(8)]
    mesh = types.SimpleNamespace(devices=np.asarray(devs, dtype=object).reshape(2, 4))
    assert [d.id for d in host_devices(mesh)] == [0, 1, 2, 3]


def test_a_phase_that_does_not_fit_fails_the_plan_though_each_program_fits():
    """The plan of the tiny run on one CPU device, re-judged on a device just large enough for its
    largest program but not for that program plus the trees the RL train phase keeps resident
    (the KL reference beside the train state): every program fits, the plan does not, and the
    misfit line names the phase and what stays resident."""
    import dataclasses

    from seed_jax.configs.search import get_config
    from seed_jax.plan.analysis import HEADROOM, format_plan, misfit_message, plan_run
    from seed_jax.plan.targets import parse_target

    plan = plan_run(get_config("tiny"), parse_target("cpu:1"))
    train = plan.phases["rl_train"]
    assert train.program == "train_step" and "reference" in train.resident
    step = next(p for p in plan.programs if p.name == "train_step")
    assert train.peak == step.total + plan.trees["reference"]  # the state is the step's own argument
    biggest = max(p.total for p in plan.programs)
    hbm = (biggest + 1) / (1 - HEADROOM)
    assert max(ph.peak for ph in plan.phases.values()) > biggest + 1  # some phase is larger than any program
    small = dataclasses.replace(plan, hbm=hbm, programs=[dataclasses.replace(p, hbm=hbm, fits=p.total <= biggest + 1)
                                                         for p in plan.programs])
    assert all(p.fits for p in small.programs) and not small.fits
    why = misfit_message(small)
    assert why.startswith("phase ") and "does not fit" in why and "with the resident" in why
    assert "fits: no" in format_plan(small) and "fits: yes" in format_plan(plan)
