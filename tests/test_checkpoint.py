"""Checkpoints: bit-identical resume, corrupt-newest fallback, mismatch errors, keep-last-K."""

import glob
import logging
import os
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from seed_jax.train.checkpoint import (
    Checkpointer,
    CheckpointMismatchError,
    newest_common_step,
    unverified_note,
)
from seed_jax.train.config import TrainConfig
from seed_jax.train.mesh import make_mesh
from seed_jax.train.state import abstract_train_state, create_sharded_state
from seed_jax.train.step import make_train_step
from seed_jax.train.synthetic import random_params, synthetic_seed_batch, tiny_config

CFG = tiny_config()
# adam_eps 1e-3 keeps the first Adam step (lr * g / (|g| + eps)) well conditioned, so that
# float summation-order noise in a near-zero gradient entry cannot flip its update.
TC = TrainConfig(lr=1e-3, weight_decay=0.01, grad_clip=1.0, c_ent=0.01, c_kl=0.1,
                 lambda_opd=0.5, beta_opd=5.0, adam_eps=1e-3)
B, P, Pt, R = 8, 6, 7, 8


@pytest.fixture(scope="module")
def mesh():
    return make_mesh(devices=jax.devices()[:1])


def leaves(tree):
    return [np.asarray(x) for x in jax.tree_util.tree_leaves(jax.device_get(tree))]


def test_resume_is_bit_identical(tmp_path, mesh):
    batches = [synthetic_seed_batch(s, B, P, R, Pt, CFG.vocab_size) for s in range(3)]
    step = make_train_step(CFG, TC, mesh)
    state = create_sharded_state(random_params(CFG, 0), TC, mesh, rng=7)
    for b in batches[:2]:
        state, m = step(state, b)
        assert float(m["skipped"]) == 0
    ck = Checkpointer(tmp_path, max_to_keep=2)
    host = {"data_pos": 2, "seeds": [7, 11], "stage": "rl"}
    ck.save(2, state, host)
    state, _ = step(state, batches[2])  # the state is donated right after an async save
    uninterrupted = leaves(state)
    ck.close()

    fresh = create_sharded_state(random_params(CFG, 99), TC, mesh, rng=0)
    with Checkpointer(tmp_path) as ck2:
        restored, got_host, at = ck2.restore_latest(fresh)
    assert at == 2 and got_host == host
    assert int(restored.step) == 2 and int(restored.data_pos) == 2 * B
    resumed, _ = step(restored, batches[2])
    for a, b in zip(uninterrupted, leaves(resumed)):
        np.testing.assert_array_equal(a, b)


def _two_checkpoints(path, mesh):
    s1 = create_sharded_state(random_params(CFG, 1), TC, mesh)
    s2 = create_sharded_state(random_params(CFG, 2), TC, mesh)
    ck = Checkpointer(path, max_to_keep=3)
    ck.save(1, s1, {"stage": "one"})
    ck.save(2, s2, {"stage": "two"})
    ck.close()
    return s1, s2


# A failed orbax read leaves sibling read coroutines that complain when collected; harmless.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.parametrize("damage", ["truncate", "delete", "bitflip", "metadata"])
def test_corrupt_newest_falls_back_to_previous(tmp_path, mesh, caplog, damage):
    s1, s2 = _two_checkpoints(tmp_path, mesh)
    data = sorted(glob.glob(f"{tmp_path}/2/state/**/d/*", recursive=True), key=os.path.getsize)
    big = data[-1]
    if damage == "truncate":
        with open(big, "r+b") as f:
            f.truncate(os.path.getsize(big) // 2)
    elif damage == "delete":
        os.remove(big)
    elif damage == "bitflip":
        raw = bytearray(Path(big).read_bytes())
        raw[len(raw) // 2] ^= 0x10
        Path(big).write_bytes(bytes(raw))
    else:
        os.remove(f"{tmp_path}/2/state/_METADATA")
    with caplog.at_level(logging.WARNING, logger="seed_jax.train.checkpoint"):
        with Checkpointer(tmp_path) as ck:
            state, host, at = ck.restore_latest(s2)
    assert at == 1 and host == {"stage": "one"}
    msgs = [r.getMessage() for r in caplog.records if r.name == "seed_jax.train.checkpoint"]
    assert any("step 2" in m and "falling back to step 1" in m for m in msgs), msgs
    for a, b in zip(leaves(s1), leaves(state)):
        np.testing.assert_array_equal(a, b)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_the_run_resumed_from_the_older_step_can_save_the_newer_step_again(tmp_path, mesh):
    s1, s2 = _two_checkpoints(tmp_path, mesh)
    os.remove(f"{tmp_path}/2/state/_METADATA")
    with Checkpointer(tmp_path) as ck:
        _, _, at = ck.restore_latest(s2)
        assert at == 1 and ck.all_steps() == [1]  # the unreadable step 2 is gone
        ck.save(2, s2, {"stage": "two again"})  # orbax refuses a step that exists
    with Checkpointer(tmp_path) as ck:
        state, host, at = ck.restore_latest(s1)
    assert at == 2 and host == {"stage": "two again"}
    for a, b in zip(leaves(s2), leaves(state)):
        np.testing.assert_array_equal(a, b)


def test_intact_newest_is_restored(tmp_path, mesh):
    _, s2 = _two_checkpoints(tmp_path, mesh)
    with Checkpointer(tmp_path) as ck:
        state, host, at = ck.restore_latest(s2)
    assert at == 2 and host == {"stage": "two"}
    for a, b in zip(leaves(s2), leaves(state)):
        np.testing.assert_array_equal(a, b)


def test_mismatched_config_names_the_leaves(tmp_path, mesh):
    _two_checkpoints(tmp_path, mesh)
    wide = tiny_config(hidden_size=48)
    target = abstract_train_state(wide, TC)  # shapes/dtypes are all a mismatch check needs
    with pytest.raises(CheckpointMismatchError) as e, Checkpointer(tmp_path) as ck:
        ck.restore_latest(target)
    msg = str(e.value)
    assert "params/embed_tokens/embedding: checkpoint (64, 32) float32 vs target (64, 48) float32" in msg
    assert "opt_state" in msg
    bf16 = TC.replace(param_dtype="bfloat16")
    target = abstract_train_state(CFG, bf16)
    with pytest.raises(CheckpointMismatchError, match="params/lm_head: checkpoint .* float32 "
                       "vs target .* bfloat16"), Checkpointer(tmp_path) as ck:
        ck.restore_latest(target)


def test_keeps_last_k_and_empty_dir(tmp_path, mesh):
    s = create_sharded_state(random_params(CFG, 0), TC, mesh)
    with Checkpointer(tmp_path / "empty") as ck:
        assert ck.restore_latest(s) is None
    ck = Checkpointer(tmp_path / "k", max_to_keep=2)
    for i in (1, 2, 3):
        ck.save(i, s, {"i": i})
    ck.close()
    with Checkpointer(tmp_path / "k") as ck:
        assert ck.all_steps() == [2, 3]


def _fingerprint_by_numpy(x) -> int:
    """The fingerprint's formula in numpy (uint64, reduced mod 2^32 at the end)."""
    x = np.asarray(x)
    w = x.astype(np.uint64) if x.dtype == np.bool_ else x.view(f"uint{x.dtype.itemsize * 8}").astype(np.uint64)
    k = np.arange(x.size, dtype=np.uint64)
    return int(np.sum(w.reshape(-1) * (((k * 2654435761) % 2**32) | 1)) % 2**32)


@pytest.mark.parametrize("shape,dtype", [((7,), "float32"), ((3000,), "float32"), ((13, 517), "float32"),
                                         ((5, 3, 401), "float32"), ((2999,), "bfloat16"), ((1001,), "int32"),
                                         ((2500,), "bool")])
def test_leaf_fingerprint_matches_numpy_in_blocks(shape, dtype, monkeypatch):
    """Blocks of 1,000 elements: several loop steps, the last overlapping the one before."""
    import seed_jax.train.checkpoint as ckpt

    monkeypatch.setattr(ckpt, "_FINGERPRINT_CHUNK", 1000)
    rng = np.random.default_rng(0)
    x = (rng.integers(0, 2, shape) if dtype == "bool" else rng.normal(size=shape) * 100).astype(jnp.dtype(dtype))
    assert int(jax.jit(ckpt._leaf_fingerprint)(jnp.asarray(x))) == _fingerprint_by_numpy(x)


def test_fingerprint_makes_no_state_sized_temporary():
    """Computed at every save: its compiled program must not copy the state (it once took a
    temporary as large as the whole state)."""
    from seed_jax.train.checkpoint import _fingerprint_tree

    # float32 and integer leaves (XLA:CPU upcasts a bfloat16 leaf to float32 before any loop)
    state = {"a": jax.ShapeDtypeStruct((30, 576, 1536), jnp.float32),
             "b": jax.ShapeDtypeStruct((49152, 576), jnp.float32), "c": jax.ShapeDtypeStruct((), jnp.int32)}
    temp = _fingerprint_tree.lower(state).compile().memory_analysis().temp_size_in_bytes
    assert temp < 16 * 2**20, f"{temp / 2**20:.0f} MiB of temporaries"


@pytest.mark.parametrize("verified, want", [
    ([{1, 2, 3}], 3),  # one host: its newest verified step
    ([{3, 4}, {3, 4}], 4),  # every host verified the newest
    ([{3, 4}, {3}], 3),  # host 1 could not verify 4: both take 3
    ([{2, 4}, {3, 4}, {2, 3}], None),  # every step fails on some host
    ([{4}, set()], None),  # a host verified nothing
    ([{1, 5, 7}, {5, 7, 9}, {1, 5}], 5),
    ([], None),
])
def test_hosts_agree_on_the_newest_step_every_host_verified(verified, want):
    assert newest_common_step(verified) == want


def test_the_note_names_each_host_that_could_not_verify_a_newer_step():
    verified = [{2, 3, 4}, {2, 3}, {2}]
    assert unverified_note(2, [4, 3, 2], verified) == \
        "hosts 1, 2 could not verify step 4; host 2 could not verify step 3"
    assert unverified_note(None, [4], [{4}, set()]) == "host 1 could not verify step 4"
    assert unverified_note(4, [4], verified) == ""
