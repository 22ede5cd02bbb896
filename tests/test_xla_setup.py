"""XLA flags and the persistent compilation cache (`seed_jax.train.xla_setup`)."""

import os
import subprocess
import sys
from pathlib import Path

from seed_jax.train.xla_setup import CPU_FLAGS, GPU_FLAGS, merge_flags

REPO = str(Path(__file__).resolve().parents[1])


def _run(code: str, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": REPO, **env})


def test_merge_keeps_the_users_flags_and_adds_the_rest():
    got = merge_flags("--xla_gpu_enable_latency_hiding_scheduler=false --foo=1", GPU_FLAGS[:2])
    assert got.split() == ["--xla_gpu_enable_latency_hiding_scheduler=false", "--foo=1", GPU_FLAGS[1]]


def test_gpu_flags_are_known_to_this_xla():
    """XLA aborts on an unknown flag when a backend starts; the CPU backend parses the same
    flag table, so a renamed or removed GPU flag fails here."""
    proc = _run("import jax; print(jax.numpy.ones(2).sum())", XLA_FLAGS=" ".join(GPU_FLAGS))
    assert proc.returncode == 0 and "2.0" in proc.stdout, proc.stderr[-2000:]
    bad = _run("import jax; print(jax.numpy.ones(2).sum())", XLA_FLAGS="--xla_gpu_no_such_flag=true")
    assert bad.returncode != 0


def test_configure_fills_the_compilation_cache(tmp_path):
    code = ("import jax, jax.numpy as jnp\n"
            "from seed_jax.train.xla_setup import configure\n"
            f"print(configure({str(tmp_path / 'cache')!r}, gpu=True, tpu=True))\n"
            "jax.config.update('jax_persistent_cache_min_compile_time_secs', 0)\n"
            "print(jax.jit(lambda x: jnp.sin(x) * 3)(jnp.ones(4)).sum())\n")
    proc = _run(code, XLA_FLAGS="", LIBTPU_INIT_ARGS="")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "--xla_gpu_enable_latency_hiding_scheduler=true" in proc.stdout
    assert CPU_FLAGS[0] in proc.stdout
    assert "--xla_tpu_enable_async_collective_fusion=true" in proc.stdout
    assert any((tmp_path / "cache").iterdir())  # the compiled program was written


def test_cpu_flags_are_known_to_this_xla_and_set_before_the_backend_starts():
    """The launcher sets the flags after importing every stage's module: none of them may start
    a backend at import (XLA reads ``XLA_FLAGS`` once, when the first backend starts)."""
    code = ("import seed_jax.launch, seed_jax.plan.analysis, seed_jax.plan.programs\n"
            "from jax._src import xla_bridge\n"
            "assert not xla_bridge._backends, sorted(xla_bridge._backends)\n"
            "from seed_jax.train.xla_setup import configure\n"
            "configure(None, gpu=False, tpu=False)\n"
            "import jax; print(jax.numpy.ones(2).sum())\n")
    proc = _run(code, XLA_FLAGS="")
    assert proc.returncode == 0 and "2.0" in proc.stdout, proc.stderr[-2000:]
