"""``python -m seed_jax.plan --warm``: a later run finds its programs in the persistent cache.

The "run" is a fresh process that sets XLA up as the launch does (`setup_xla` on the workdir),
loads the tiny policy on the launch's mesh and makes the run's own calls: `generate` with the
rollout settings at every row count of a wave (the sampler's prefill and decode chunks) and
the train step on the sharded state at the planned shapes. JAX logs each persistent-cache miss
(``jax_explain_cache_misses``) and hit (``jax_log_compiles``); the run on an unwarmed
workdir misses each program, the run on a warmed one hits them all.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration  # whole pipelines / subprocess launches: CONTRIBUTING.md tiers

REPO = Path(__file__).resolve().parents[1]
# the tiny preset with few sampler buckets: prompts cut to 32 tokens (lengths 16, 24, 32), one
# task of two episodes per update (rows 1, 2): 6 (prefill, decode) pairs
OVERRIDES = ["--config.rollout.max_prompt_tokens=32", "--config.rollout.max_teacher_prompt_tokens=48",
             "--config.rl.tasks_per_update=1"]
CONFIG = "configs/search.py:tiny"

RUN = textwrap.dedent("""
    import sys
    import numpy as np
    from absl import flags
    from ml_collections import config_flags
    _C = config_flags.DEFINE_config_file("config", None, "")
    flags.FLAGS(["run", "--config=" + sys.argv[2], *sys.argv[3:]])
    config = _C.value
    from seed_jax.pipeline.runtime import setup_xla
    setup_xla(config, sys.argv[1])  # as run_pipeline: before any JAX work
    import jax
    from seed_jax.buckets import round_up
    from seed_jax.pipeline.runtime import load_policy, sampler_spec, train_config
    from seed_jax.sampling import generate
    from seed_jax.train.batch import SeedBatch
    from seed_jax.train.mesh import make_mesh
    from seed_jax.train.state import create_sharded_state
    from seed_jax.train.step import make_train_step

    c, r = config, config.rollout
    mesh = make_mesh(None if c.mesh.data == -1 else c.mesh.data, c.mesh.fsdp, c.mesh.tensor)
    policy = load_policy(c, mesh=mesh)
    for rows in (1, 2):  # a wave of two episodes, then one left (the rollout loop's calls)
        prompts = [[5 + i] * r.max_prompt_tokens for i in range(rows)]
        generate(policy.model, policy.tokenizer, prompts, params=policy.params, sampler=sampler_spec(c),
                 max_new_tokens=r.max_response_tokens, temperature=r.temperature, top_p=r.top_p, top_k=r.top_k,
                 chunk=r.chunk, seed=1, ignore_eos=True)
    tc = train_config(c)
    state = create_sharded_state(policy.params, tc, mesh, rng=c.seed)
    B, P, Pt, R = c.rl.mini_batch_size, round_up(r.max_prompt_tokens), round_up(r.max_teacher_prompt_tokens), \\
        round_up(r.max_response_tokens)
    ids = lambda n: np.ones((B, n + R), np.int32)
    tok = np.ones((B, R), np.float32)
    batch = SeedBatch(student_ids=ids(P), student_mask=ids(P), response_mask=tok, advantages=tok,
                      has_skill=np.ones((B,), np.float32), old_logp=tok, ref_logp=tok if tc.c_kl > 0 else None,
                      teacher_ids=ids(Pt), teacher_mask=ids(Pt), teacher_logp=None,
                      opd_mask=tok)  # the run's batch carries the OPD mask whenever the step takes OPD
    state, _ = make_train_step(policy.config, tc, mesh)(state, batch)
    jax.block_until_ready(state.params)
    print("run done")
""")
PROGRAMS = ("jit__prefill", "jit__decode_chunk", "jit_step")


def _python(args, env=None):
    path = os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])
    env = {**os.environ, "PYTHONPATH": path, "JAX_PLATFORMS": "cpu", **(env or {})}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=REPO, env=env, timeout=600)


def _entries(workdir: Path, names) -> dict[str, set[str]]:
    """The persistent cache's entries (``<program>-<key>-cache`` files) of each program name."""
    files = os.listdir(workdir / "xla_cache")
    return {n: {f for f in files if f.startswith(n + "-") and f.endswith("-cache")} for n in names}


def _run_cache_log(workdir: Path) -> tuple[dict[str, int], dict[str, int]]:
    """The run's persistent-cache ``(hits, misses)`` per program name."""
    out = _python(["-c", RUN, str(workdir), CONFIG, *OVERRIDES],
                  env={"JAX_EXPLAIN_CACHE_MISSES": "1", "JAX_LOG_COMPILES": "1"})
    assert out.returncode == 0 and "run done" in out.stdout, out.stderr[-3000:]
    hits = re.findall(r"Persistent compilation cache hit for '([^']+)'", out.stderr)
    misses = re.findall(r"PERSISTENT COMPILATION CACHE MISS for '([^']+)'", out.stderr)
    return ({p: hits.count(p) for p in PROGRAMS}, {p: misses.count(p) for p in PROGRAMS})


def test_a_warmed_cache_serves_the_runs_sampler_and_train_step(tmp_path):
    # without --warm: the run compiles each of its programs (a miss for each)
    hits, misses = _run_cache_log(tmp_path / "cold")
    assert all(misses[p] >= 1 for p in PROGRAMS), misses
    assert misses["jit__prefill"] == 2 and misses["jit__decode_chunk"] == 2, misses  # rows 1 and 2

    warm = tmp_path / "warm"
    out = _python(["-m", "seed_jax.plan", f"--config={CONFIG}", *OVERRIDES, "--target=cpu:1", "--warm",
                   f"--workdir={warm}"])
    assert out.returncode == 0, out.stderr[-3000:]
    m = re.search(r"warmed (\d+) programs in ([\d.]+)s into (\S+):", out.stdout)
    assert m and Path(m.group(3)) == warm / "xla_cache", out.stdout
    assert int(m.group(1)) == 4 + 2 * 6  # train, SFT, two log-prob passes; 6 sampler buckets
    entries = _entries(warm, PROGRAMS)
    assert len(entries["jit__prefill"]) == len(entries["jit__decode_chunk"]) == 6 and len(entries["jit_step"]) == 2  # train, SFT

    hits, misses = _run_cache_log(warm)
    assert not any(misses.values()), misses
    assert hits["jit__prefill"] == 2 and hits["jit__decode_chunk"] == 2 and hits["jit_step"] == 1, hits
    assert _entries(warm, PROGRAMS) == entries  # the run wrote no entry of its own for these programs


def test_warm_refuses_a_compile_only_tpu_topology():
    out = _python(["-m", "seed_jax.plan", f"--config={CONFIG}", "--target=tpu:v5e:2x2", "--warm"])
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "--warm" in lines[0] and "compile-only" in lines[0], out.stderr


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
