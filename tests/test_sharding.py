"""Sharding: rule table, and one train step on 8 fake CPU devices == the 1-device step
(meshes data x fsdp x tensor = 2x2x2, 1x8x1 and 2x4x1, with activation constraints), with no
activation-sized collective in the fsdp=8 program; the sharded log-prob pass == 1 device.

The device count is fixed when JAX starts, so the 8-device run is a subprocess of this file
(``python tests/test_sharding.py OUT.npz`` under
``XLA_FLAGS=--xla_force_host_platform_device_count=8``) that writes its results to an npz.
"""

import os
import subprocess
import sys
import types
from pathlib import Path

import jax
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from seed_jax.train.config import TrainConfig
from seed_jax.train.mesh import auto_fsdp, fit_spec, make_mesh, maybe_initialize_distributed, path_string, spec_for
from seed_jax.train.state import create_sharded_state
from seed_jax.train.step import make_train_step
from seed_jax.train.synthetic import random_params, synthetic_seed_batch, tiny_config
from seed_jax.train.update import metric_means

CFG = tiny_config()
# adam_eps 1e-3 keeps the first Adam step (lr * g / (|g| + eps)) well conditioned, so that
# float summation-order noise in a near-zero gradient entry cannot flip its update.
TC = TrainConfig(lr=1e-3, weight_decay=0.01, grad_clip=1.0, c_ent=0.01, c_kl=0.1,
                 lambda_opd=0.5, beta_opd=5.0, adam_eps=1e-3)
B, P_LEN, Pt, R = 8, 6, 7, 8
B16 = 16  # rows of the fsdp=8 / data=2 x fsdp=4 runs: two micro-batches of 8
# meshes (data, fsdp, tensor) of the 8-device runs -> (rows, micro-batch rows)
MESHES = {"2x2x2": ((2, 2, 2), B, 4), "1x8x1": ((1, 8, 1), B16, 8), "2x4x1": ((2, 4, 1), B16, 8)}


def run_step(mesh, tc, to_global=None, rows=B, compiled_text=None):
    batch = synthetic_seed_batch(0, rows, P_LEN, R, Pt, CFG.vocab_size)
    if to_global is not None:
        batch = to_global(batch, mesh)
    state = create_sharded_state(random_params(CFG, 0), tc, mesh)
    step = make_train_step(CFG, tc, mesh)
    if compiled_text is not None:
        compiled_text.append(step.lower(state, batch).compile().as_text())
    state, metrics = step(state, batch)
    return state, metric_means(metrics)


def logprob_inputs():
    batch = synthetic_seed_batch(1, B16, P_LEN, R, Pt, CFG.vocab_size)
    return np.asarray(batch.student_ids), np.asarray(batch.student_mask)


def activation_collectives(hlo: str) -> list[str]:
    """All-reduces / all-gathers / reduce-scatters of the compiled program whose floating result
    has a sequence-length dimension (``P + R`` or ``Pt + R``): activations summed or gathered
    between devices (the tiny model has no parameter dimension of those sizes). Not counted:
    the all-to-all that moves the embedding output from the table's hidden split to the rows
    split (once per pass, not per layer) and the gather of the token ids it needs."""
    import re

    seq = {str(P_LEN + R), str(Pt + R)}
    out = []
    for line in hlo.splitlines():
        m = re.search(r"=\s*(.+?)\s+(all-gather|reduce-scatter|all-reduce)(-start)?\(", line)
        if m and any(seq & set(dims.split(",")) for dt, dims in re.findall(r"(\w+)\[([0-9,]*)\]", m.group(1))
                     if dt.startswith(("f", "bf"))):
            out.append(line.strip()[:200])
    return out


def flat(tree) -> dict:
    leaves, _ = jax.tree_util.tree_flatten_with_path(jax.device_get(tree))
    return {path_string(p): np.asarray(x) for p, x in leaves}


def worker(out: str) -> None:
    import jax.numpy as jnp

    from seed_jax.train.logprobs import compute_logprobs, scoring_params
    from seed_jax.train.mesh import host_local_batch_to_global

    assert jax.device_count() == 8, jax.device_count()
    # fsdp=-1: every device of this (single) host on 'fsdp'; data = the remaining (1)
    assert dict(make_mesh(data=-1, fsdp=-1).shape) == {"data": 1, "fsdp": 8, "tensor": 1}
    assert dict(make_mesh(fsdp=-1, tensor=2).shape) == {"data": 1, "fsdp": 4, "tensor": 2}
    saved = {}
    for name, ((d, f, t), rows, micro) in MESHES.items():
        # micro-batches of data x fsdp rows: sharding and accumulation at once
        mesh = make_mesh(data=d, fsdp=f, tensor=t)
        hlo = []
        state, metrics = run_step(mesh, TC.replace(micro_batch_size=micro), host_local_batch_to_global, rows,
                                  compiled_text=hlo if name == "1x8x1" else None)
        if hlo:
            moved = activation_collectives(hlo[0])
            assert not moved, "activation-sized collectives in the fsdp=8 step:\n" + "\n".join(moved)
        saved.update({f"{name}/state/{k}": v for k, v in flat(state).items()})
        saved.update({f"{name}/metric/{k}": np.float64(v) for k, v in metrics.items()})
    ref = scoring_params(random_params(CFG, 0), CFG.replace(dtype="bfloat16"), make_mesh(data=1, fsdp=8))
    q = ref["layers"]["self_attn"]["q_proj"]["kernel"]
    assert (q.dtype, q.sharding.spec) == (jnp.bfloat16, P(None, "fsdp", "tensor")), (q.dtype, q.sharding.spec)
    assert ref["norm"]["scale"].dtype == jnp.float32  # vectors keep the master dtype
    ids, mask = logprob_inputs()
    saved["logp"] = compute_logprobs(random_params(CFG, 0), CFG, ids, mask, P_LEN, R, micro_batch=8,
                                     mesh=make_mesh(data=1, fsdp=8))
    mesh = make_mesh(data=2, fsdp=2, tensor=2)
    state = create_sharded_state(random_params(CFG, 0), TC, mesh)
    specs = {
        "q": state.params["layers"]["self_attn"]["q_proj"]["kernel"].sharding.spec,
        "mu_down": state.opt_state[1].mu["layers"]["mlp"]["down_proj"]["kernel"].sharding.spec,
        "embed": state.params["embed_tokens"]["embedding"].sharding.spec,
    }
    assert specs == {"q": P(None, "fsdp", "tensor"), "mu_down": P(None, "tensor", "fsdp"),
                     "embed": P("tensor", "fsdp")}, specs
    saved.update(sft_step_with_fill_rows(make_mesh(data=1, fsdp=8)))
    np.savez(out, **saved)


def sft_step_with_fill_rows(mesh) -> dict:
    """One stage-1 SFT step of 3 examples in one micro-batch, filled as the run fills them for
    ``mesh`` (`sft_train_config` / `sft_rows`: masked rows up to the mesh's row shards)."""
    import jax.numpy as jnp
    import ml_collections

    from seed_jax.pipeline.runtime import sft_rows, sft_train_config
    from seed_jax.train.batch import SftBatch
    from seed_jax.train.mesh import batch_divisor, host_local_batch_to_global
    from seed_jax.train.sft import make_sft_step
    from seed_jax.train.synthetic import synthetic_sft_batch

    c = ml_collections.ConfigDict({"stage1": {"sft_lr": 1e-3, "sft_batch_size": 3, "sft_micro_batch_size": 3},
                                   "train": {"weight_decay": 0.01, "grad_clip": 1.0},
                                   "model": {"remat": "none", "dtype": "float32", "param_dtype": "float32"}})
    tc = sft_train_config(c, batch_divisor(mesh))
    rows = sft_rows(c, tc)
    b = synthetic_sft_batch(2, 3, P_LEN, R, CFG.vocab_size)
    pad = lambda x: jnp.concatenate([x, jnp.zeros((rows - 3, *x.shape[1:]), x.dtype)])  # noqa: E731
    b = SftBatch(pad(b.input_ids), pad(b.attention_mask), pad(b.loss_mask))
    if mesh.size > 1:
        b = host_local_batch_to_global(b, mesh)
    state = create_sharded_state(random_params(CFG, 0), tc, mesh)
    state, m = make_sft_step(CFG, tc, mesh)(state, b)
    out = {f"sft/state/{k}": v for k, v in flat(state.params).items()}
    out.update({"sft/loss": np.float64(metric_means(m)["loss"]), "sft/rows": np.int64(rows),
                "sft/micro": np.int64(tc.micro_batch_size)})
    return out


@pytest.mark.integration
def test_eight_device_step_equals_one_device(tmp_path):
    out = tmp_path / "sharded.npz"
    repo = str(Path(__file__).resolve().parents[1])  # the script imports this checkout's seed_jax
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8",
               JAX_PLATFORMS="cpu",
               PYTHONPATH=os.pathsep.join(filter(None, [repo, os.environ.get("PYTHONPATH")])))
    proc = subprocess.run([sys.executable, __file__, str(out)], env=env, capture_output=True,
                          text=True, timeout=300, cwd=Path(__file__).parent.parent)
    assert proc.returncode == 0, proc.stderr[-3000:]
    sharded = np.load(out)

    one = make_mesh(devices=jax.devices()[:1])
    for rows in (B, B16):
        state, metrics = run_step(one, TC, rows=rows)  # whole batch at once, no constraint splits
        ref = flat(state)
        for name in (n for n, (_, r, _) in MESHES.items() if r == rows):
            got = {k[len(f"{name}/state/"):] for k in sharded.files if k.startswith(f"{name}/state/")}
            assert got == set(ref), name
            for k, v in ref.items():
                np.testing.assert_allclose(sharded[f"{name}/state/{k}"], v, atol=1e-5, rtol=0, err_msg=f"{name} {k}")
            for k in ("loss", "grad_norm", "kl", "entropy", "opd_loss", "tokens"):
                np.testing.assert_allclose(float(sharded[f"{name}/metric/{k}"]), metrics[k], rtol=1e-5,
                                           atol=1e-7, err_msg=f"{name} {k}")
    from seed_jax.train.logprobs import compute_logprobs

    ids, mask = logprob_inputs()
    ref_logp = compute_logprobs(random_params(CFG, 0), CFG, ids, mask, P_LEN, R, micro_batch=16)
    np.testing.assert_allclose(sharded["logp"], ref_logp, atol=1e-5, rtol=0)
    # stage-1 SFT: 3 examples ran on 8 devices as 8 rows (5 masked) and updated the weights as the
    # 3 rows alone on one device
    one_sft = sft_step_with_fill_rows(one)
    assert (int(one_sft["sft/rows"]), int(one_sft["sft/micro"])) == (3, 3)
    assert (int(sharded["sft/rows"]), int(sharded["sft/micro"])) == (8, 8)
    np.testing.assert_allclose(float(sharded["sft/loss"]), float(one_sft["sft/loss"]), rtol=1e-5)
    for k, v in one_sft.items():
        if k.startswith("sft/state/"):
            np.testing.assert_allclose(sharded[k], v, atol=1e-5, rtol=0, err_msg=k)


def test_rules_and_divisibility_fallback():
    mesh = types.SimpleNamespace(shape={"data": 1, "fsdp": 2, "tensor": 3})
    # 3 kv heads x 64 = 192 divides by 3; hidden 576 by 2; a 32-wide dim does not divide by 3.
    assert spec_for("params/layers/self_attn/k_proj/kernel", (30, 576, 192), mesh) == P(None, "fsdp", "tensor")
    assert spec_for("params/layers/self_attn/k_proj/kernel", (30, 576, 32), mesh) == P(None, "fsdp", None)
    assert spec_for("opt_state/1/0/nu/layers/mlp/down_proj/kernel", (30, 1536, 577), mesh) == P(None, "tensor", None)
    assert spec_for("params/layers/input_layernorm/scale", (30, 576), mesh) == P(None, None)
    assert spec_for("step", (), mesh) == P()
    assert fit_spec(P(("data", "fsdp")), (8, 5), types.SimpleNamespace(shape={"data": 2, "fsdp": 2})) \
        == P(("data", "fsdp"), None)
    with pytest.raises(ValueError, match="device count"):
        make_mesh(data=3)


# environment -> the keyword arguments of jax.distributed.initialize (None: no call), written
# out from the documented rule: a coordinator address, or more than one process, starts it
DISTRIBUTED_ENV = [
    ({}, None),
    ({"JAX_NUM_PROCESSES": "1"}, None),
    ({"JAX_PROCESS_ID": "0"}, None),
    ({"JAX_NUM_PROCESSES": "4"}, {"num_processes": 4}),
    ({"JAX_PROCESS_COUNT": "2", "JAX_PROCESS_ID": "1"}, {"num_processes": 2, "process_id": 1}),
    ({"JAX_COORDINATOR_ADDRESS": "10.0.0.1:1234"}, {"coordinator_address": "10.0.0.1:1234"}),
    ({"JAX_COORDINATOR_ADDRESS": "h:1", "JAX_NUM_PROCESSES": "8", "JAX_PROCESS_ID": "3"},
     {"coordinator_address": "h:1", "num_processes": 8, "process_id": 3}),
]


@pytest.mark.parametrize("env,call", DISTRIBUTED_ENV)
def test_distributed_init_follows_the_environment(env, call, monkeypatch):
    """Reference: the table above. `jax.distributed.initialize` is replaced by a recorder (it
    would start a real multi-process runtime)."""
    for k in ("JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_COUNT", "JAX_PROCESS_ID"):
        monkeypatch.delenv(k, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    calls = []
    monkeypatch.setattr(jax.distributed, "initialize", lambda **kw: calls.append(kw))
    assert maybe_initialize_distributed() is (call is not None)
    assert calls == ([] if call is None else [call])


if __name__ == "__main__":
    worker(sys.argv[1])


def _devices(platform: str, n: int, slices: int = 1):
    return [types.SimpleNamespace(platform=platform, id=i, slice_index=i * slices // n) for i in range(n)]


@pytest.mark.parametrize("platform, n, slices, tensor, hosts, want", [
    ("tpu", 16, 1, 1, 4, 16),  # v5e-16: four hosts, one ICI slice -> ZeRO-3 over all 16 chips
    ("tpu", 64, 2, 1, 16, 32),  # two slices joined by DCN: one slice each
    ("tpu", 16, 1, 2, 4, 8),  # tensor=2 takes its share of the slice
    ("gpu", 16, 1, 1, 2, 8),  # two 8-GPU nodes: NVLink within a node, data parallel across
    ("cpu", 8, 1, 1, 1, 8),
])
def test_auto_fsdp_is_one_interconnect_domain(platform, n, slices, tensor, hosts, want):
    assert auto_fsdp(_devices(platform, n, slices), tensor, hosts) == want
