"""The sharded sampler: rows over 8 fake CPU devices (scan backend, with and without heads split
over 2 devices; unrolled backend with a per-device replica) gives transformers' greedy tokens
and the 1-device tokens.

The device count is fixed when JAX starts, so the 8-device runs are a subprocess of this file
(``python tests/test_sampler_sharded.py OUT.json DIR...`` under
``XLA_FLAGS=--xla_force_host_platform_device_count=8``) that writes its tokens to a json.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from seed_jax.models import load_model
from seed_jax.models.scan_cache import StackedCache
from seed_jax.sampling import SamplerSpec, generate, prefill_chunks, prefill_query_chunk, resolve_layout
from tests.conftest import TINY_KINDS
from tests.test_sampling import _hf_greedy

pytestmark = pytest.mark.integration  # whole pipelines / subprocess launches: CONTRIBUTING.md tiers

PROMPTS = [[5, 17, 33, 90, 12, 7, 8, 44, 61], [9, 100, 3], [70, 71, 72, 73, 74, 75],
           [3, 4, 5, 6], [88, 12, 41, 9, 9, 10, 11], [60]]
NEW = 14
# a budget of a few rows' prompt scratch, so that the prompt pass runs in several row chunks
SMALL_SCRATCH = 12_000
LAYOUTS = {"rows8": dict(tensor_parallel=1), "rows4_heads2": dict(tensor_parallel=2),
           "unrolled_rows8": dict(backend="unrolled")}


def _generate(d, tok, **spec):
    spec = {"backend": "scan", **spec}
    res = generate(load_model(d), tok, PROMPTS, max_new_tokens=NEW, temperature=0.0, chunk=5,
                   sampler=SamplerSpec(prefill_scratch_bytes=SMALL_SCRATCH, **spec))
    return res.token_ids


def worker(out: str, dirs: list[str]) -> None:
    from seed_jax.models import load_tokenizer

    assert jax.device_count() == 8, jax.device_count()
    tok = load_tokenizer(None)
    got = {}
    for d in dirs:
        for name, spec in LAYOUTS.items():
            got[f"{d}|{name}"] = _generate(d, tok, **spec)
            if spec.get("backend") == "unrolled":
                continue
            layout = resolve_layout(SamplerSpec(backend="scan", **spec))
            model = load_model(d)
            # the cache is created sharded: rows over 'rows' (and kv heads over 'heads')
            cfg, shard = model.config, layout.shard(model.config)
            cache = jax.jit(lambda cfg=cfg, shard=shard: StackedCache.zeros(cfg, 8, 32, np.float32, shard))()
            shards = {s.data.shape for s in cache.k.addressable_shards}
            assert len(shards) == 1 and next(iter(shards))[1] == 8 // layout.row_shards, shards
            if layout.head_shards == 2:
                assert next(iter(shards))[3] == model.config.num_kv_heads // 2, shards
    Path(out).write_text(json.dumps(got))


@pytest.fixture(scope="module")
def sharded_tokens(tiny_model_dirs, tmp_path_factory):
    out = tmp_path_factory.mktemp("sharded") / "tokens.json"
    repo = str(Path(__file__).resolve().parents[1])
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8", JAX_PLATFORMS="cpu",
               PYTHONPATH=os.pathsep.join(filter(None, [repo, os.environ.get("PYTHONPATH")])))
    dirs = [str(tiny_model_dirs[k][1]) for k in TINY_KINDS]
    proc = subprocess.run([sys.executable, __file__, str(out), *dirs], env=env, capture_output=True, text=True,
                          timeout=600, cwd=repo)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text())


@pytest.mark.parametrize("kind", TINY_KINDS)
def test_sharded_greedy_equals_transformers_and_one_device(kind, tiny_model_dirs, smol_tokenizer,
                                                           sharded_tokens):
    hf, d = tiny_model_dirs[kind]
    want = _hf_greedy(hf, PROMPTS, NEW)
    one = _generate(d, smol_tokenizer)  # scan backend on this process's single device
    unrolled = generate(load_model(d), smol_tokenizer, PROMPTS, max_new_tokens=NEW, temperature=0.0,
                        sampler=SamplerSpec(backend="unrolled")).token_ids
    assert one == want and unrolled == want
    for name in LAYOUTS:
        assert sharded_tokens[f"{d}|{name}"] == want, name


def test_prefill_row_chunks_follow_the_scratch_budget(tiny_model_dirs):
    cfg = load_model(tiny_model_dirs["qwen2"][1]).config
    one = resolve_layout(SamplerSpec(backend="scan", prefill_scratch_bytes=SMALL_SCRATCH))
    per_row = 4 * 16 * (cfg.num_heads * 16 + 3 * cfg.intermediate_size)  # 22,528 bytes at P = 16
    assert SMALL_SCRATCH < per_row
    assert prefill_chunks(cfg, one, 8, 16) == 8  # one row per chunk
    big = resolve_layout(SamplerSpec(backend="scan", prefill_scratch_bytes=4 * per_row))
    assert prefill_chunks(cfg, big, 8, 16) == 2  # four rows per chunk
    assert prefill_chunks(cfg, big, 6, 16) == 3  # two rows (a power of two dividing 6)


def test_prefill_query_blocks_follow_the_scratch_budget(tiny_model_dirs):
    cfg = load_model(tiny_model_dirs["qwen2"][1]).config
    H = cfg.num_heads
    whole = resolve_layout(SamplerSpec(backend="scan", prefill_scratch_bytes=4 * H * 16 * 16))
    assert prefill_query_chunk(cfg, whole, 1, 16, 1) == 16  # one row's 16 x 16 scores fit: one block
    # room for 5 queries' scores of one row (4 H P bytes each): the largest divisor of 16 <= 5 is 4
    five = resolve_layout(SamplerSpec(backend="scan", prefill_scratch_bytes=5 * 4 * H * 16))
    assert prefill_query_chunk(cfg, five, 1, 16, 1) == 4
    assert prefill_query_chunk(cfg, five, 2, 16, 1) == 2  # two rows per chunk: half the queries
    assert prefill_query_chunk(cfg, five, 1, 12, 1) == 6  # 12 positions: 6 queries (4 H 12 bytes each)


@pytest.mark.parametrize("kind", TINY_KINDS)
def test_prompt_pass_in_query_blocks_gives_transformers_tokens(kind, tiny_model_dirs, smol_tokenizer):
    hf, d = tiny_model_dirs[kind]
    cfg = load_model(d).config
    budget = 3 * 4 * cfg.num_heads * 16  # three queries' scores of one 16-position row
    layout = resolve_layout(SamplerSpec(backend="scan", prefill_scratch_bytes=budget))
    assert prefill_query_chunk(cfg, layout, 6, 16, prefill_chunks(cfg, layout, 6, 16)) == 2
    got = generate(load_model(d), smol_tokenizer, PROMPTS, max_new_tokens=NEW, temperature=0.0, chunk=5,
                   sampler=SamplerSpec(backend="scan", prefill_scratch_bytes=budget)).token_ids
    assert got == _hf_greedy(hf, PROMPTS, NEW)


if __name__ == "__main__":
    worker(sys.argv[1], sys.argv[2:])


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_new_token_attention_equals_softmax_over_old_slots_and_itself(dtype):
    """Reference: numpy softmax over the allowed old slots and the new key, per query head and
    its kv head (4 query heads on 2 kv heads), rows with left padding and one slot masked."""
    from seed_jax.models.scan_cache import attend_new_token

    rng = np.random.default_rng(0)
    B, S, H, K, D = 3, 7, 4, 2, 8
    q, kn, vn = rng.normal(size=(B, 1, H, D)), rng.normal(size=(B, 1, K, D)), rng.normal(size=(B, 1, K, D))
    ko, vo = rng.normal(size=(B, S, K, D)), rng.normal(size=(B, S, K, D))
    old = np.ones((B, S), bool)
    old[1, :3] = False  # left padding
    old[2, 4] = False
    old[:, 5:] = False  # slots not yet written
    cast = lambda a: jnp.asarray(a, dtype)  # noqa: E731
    got = np.asarray(attend_new_token(cast(q), cast(kn), cast(vn), cast(ko), cast(vo), jnp.asarray(old)), np.float64)
    r = lambda a: np.asarray(cast(a), np.float64)  # the inputs as the kernel sees them  # noqa: E731
    q, kn, vn, ko, vo = map(r, (q, kn, vn, ko, vo))
    want = np.zeros((B, 1, H, D))
    for b in range(B):
        for h in range(H):
            kv = h // (H // K)
            keys = np.concatenate([ko[b, old[b], kv], kn[b, :, kv]])
            vals = np.concatenate([vo[b, old[b], kv], vn[b, :, kv]])
            s = keys @ q[b, 0, h] / np.sqrt(D)
            p = np.exp(s - s.max())
            want[b, 0, h] = p @ vals / p.sum()
    np.testing.assert_allclose(got, want, atol=1e-5 if dtype == "float32" else 3e-2)
