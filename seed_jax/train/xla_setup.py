"""The one place that sets XLA's flags and JAX's persistent compilation cache for a run.

`configure(cache_dir)` must run before the first JAX computation (XLA reads its flags when a
backend starts). It appends, never overrides, flags the user already set:

* GPU (``XLA_FLAGS``, when a CUDA plugin is installed): the latency-hiding scheduler and
  pipelined / combined collectives, so each layer's weight all-gather and gradient
  reduce-scatter overlap with the previous layer's compute (the ZeRO-3 pattern of
  `seed_jax.train.update.build_step`);
* TPU (``LIBTPU_INIT_ARGS``, when libtpu is installed): async collective fusion and
  compute / collective overlap, and no windowed einsums (collective matmuls): with ZeRO-3 over a
  slice a chip holds one or two rows of a micro-batch, and XLA:TPU's ring-decomposed gather +
  matmul then re-reads each layer's activations once per ring step (the 3B ALFWorld step on
  v5e-16: 28.8 TB of HBM traffic per chip per optimizer step with them, 10.2 TB without, by
  ``python -m seed_jax.plan``; the same setting as MaxText's tuned TPU flag sets);
* CPU (always): copy insertion by region analysis, which spares the copies of read-only
  while-loop operands (the weights a scanned layer stack reads) that the default analysis
  makes when the weights are donated to the step (`bench/xla_cpu_copies.py` prints the
  difference: about a third of a 135M model's SFT-step temporaries).

The persistent compilation cache (``jax_compilation_cache_dir``) keeps compiled programs on
disk (or in a bucket: a ``gs://`` cache dir, e.g. a bucket workdir's ``xla_cache``, is shared by every host
of a pod), so a relaunch or a later stage with the same shapes skips compilation.
"""

from __future__ import annotations

import importlib.util
import logging
import os
from collections.abc import Sequence

import jax

from seed_jax.paths import run_path

log = logging.getLogger(__name__)

GPU_FLAGS: tuple[str, ...] = (
    "--xla_gpu_enable_latency_hiding_scheduler=true",
    "--xla_gpu_enable_highest_priority_async_stream=true",
    "--xla_gpu_enable_pipelined_all_gather=true",
    "--xla_gpu_enable_pipelined_reduce_scatter=true",
    "--xla_gpu_enable_pipelined_all_reduce=true",
    "--xla_gpu_enable_while_loop_double_buffering=true",
    "--xla_gpu_all_gather_combine_threshold_bytes=134217728",
    "--xla_gpu_reduce_scatter_combine_threshold_bytes=134217728",
    "--xla_gpu_all_reduce_combine_threshold_bytes=134217728",
)
TPU_FLAGS: tuple[str, ...] = (
    "--xla_tpu_enable_async_collective_fusion=true",
    "--xla_tpu_enable_async_collective_fusion_fuse_all_gather=true",
    "--xla_tpu_enable_async_collective_fusion_multiple_steps=true",
    "--xla_tpu_overlap_compute_collective_tc=true",
    "--xla_enable_async_all_gather=true",
    "--xla_tpu_enable_windowed_einsum_for_all_gather=false",
    "--xla_tpu_enable_windowed_einsum_for_reduce_scatter=false",
)
CPU_FLAGS: tuple[str, ...] = (
    "--xla_cpu_copy_insertion_use_region_analysis=true",
)
_CUDA_PLUGINS = ("jax_cuda12_plugin", "jax_cuda13_plugin")


def merge_flags(current: str, extra: Sequence[str]) -> str:
    """``current`` plus each flag of ``extra`` whose name it does not set already."""
    names = {f.split("=", 1)[0] for f in current.split()}
    add = [f for f in extra if f.split("=", 1)[0] not in names]
    return " ".join([current.strip(), *add]).strip()


def _installed(*modules: str) -> bool:
    return any(importlib.util.find_spec(m) is not None for m in modules)


def configure(cache_dir: str | os.PathLike | None, *, gpu: bool | None = None, tpu: bool | None = None) -> dict:
    """Set the flags of the installed accelerator backends and the compilation cache.

    ``gpu`` / ``tpu``: force the flags on or off (default: on when the backend is installed).
    ``cache_dir=None``: no persistent cache. Returns what was set (for the run log).
    """
    gpu = _installed(*_CUDA_PLUGINS) if gpu is None else gpu
    tpu = _installed("libtpu") if tpu is None else tpu
    done = {}
    flags = CPU_FLAGS + (GPU_FLAGS if gpu else ())
    os.environ["XLA_FLAGS"] = done["XLA_FLAGS"] = merge_flags(os.environ.get("XLA_FLAGS", ""), flags)
    if tpu:
        os.environ["LIBTPU_INIT_ARGS"] = done["LIBTPU_INIT_ARGS"] = merge_flags(
            os.environ.get("LIBTPU_INIT_ARGS", ""), TPU_FLAGS)
    if cache_dir is not None:
        path = run_path(cache_dir)  # local, or gs:// (JAX reads and writes its cache through epath)
        path.mkdir(parents=True, exist_ok=True)
        jax.config.update("jax_compilation_cache_dir", str(path))
        done["jax_compilation_cache_dir"] = str(path)
    log.info("XLA setup: %s", done or "defaults")
    return done
