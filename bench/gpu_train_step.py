"""The paper's SEED train step on a real accelerator, measured beside its plan.

Builds a randomly initialised model of a ``config.json`` shape (default Qwen2.5-1.5B, no
download), the run's mesh over this machine's devices and the paper preset's train step
(`seed_jax.plan.programs.train_program`: one optimizer step of one mini-batch, micro-batched as
configured), plans it for these devices (`seed_jax.plan.analysis.measure`: XLA's memory figures,
FLOPs with loop trip counts, roofline), then runs it on random batches of the paper's shapes
(`seed_jax.train.synthetic.synthetic_seed_batch`, every row at full length) and prints, side by
side with the plan::

    step time, tokens/s (rows x (prompt + response) per step), MFU = plan FLOPs / step time / peak,
    peak device memory (``memory_stats()['peak_bytes_in_use']``) vs the plan's total.

    python bench/gpu_train_step.py [--config=configs/alfworld.py:paper] \
        [--model=tests/data/plan_models/qwen2.5-1.5b] [--steps=3] [--rows=N]

Needs an accelerator (GPU or TPU); on CPU it refuses unless ``--allow_cpu`` (tiny smoke runs:
``--config.rollout.max_prompt_tokens=...`` overrides shrink it).
"""

from __future__ import annotations

import sys
import time

from absl import app, flags
from ml_collections import config_flags

_CONFIG = config_flags.DEFINE_config_file("config", "configs/alfworld.py:paper", "Run config (preset)")
_MODEL = flags.DEFINE_string("model", "tests/data/plan_models/qwen2.5-1.5b", "Directory with a config.json")
_STEPS = flags.DEFINE_integer("steps", 3, "Timed steps (after one compile-and-warm-up step)")
_ROWS = flags.DEFINE_integer("rows", 0, "Rows per optimizer step (0: the preset's mini-batch)")
_ALLOW_CPU = flags.DEFINE_bool("allow_cpu", False, "Run on CPU (smoke test only)")


def main(argv):
    import jax
    import numpy as np

    from seed_jax.pipeline.runtime import train_config
    from seed_jax.plan.analysis import measure, model_config_of, target_mesh
    from seed_jax.plan.programs import Shapes, train_program
    from seed_jax.plan.targets import native_target
    from seed_jax.train.batch import SeedBatch
    from seed_jax.train.mesh import batch_sharding
    from seed_jax.train.state import create_sharded_state
    from seed_jax.train.synthetic import random_params

    if jax.default_backend() == "cpu" and not _ALLOW_CPU.value:
        sys.exit("no accelerator here (jax.default_backend() == 'cpu'); --allow_cpu for a smoke run")
    config = _CONFIG.value
    with config.unlocked():
        config.model.path = _MODEL.value
        if _ROWS.value:
            config.rl.mini_batch_size = _ROWS.value
    target = native_target()
    mesh = target_mesh(config, target)
    model_cfg = model_config_of(config)
    tc = train_config(config)
    s = Shapes.of(config)
    print(f"{target.spec}: {target.num_devices} device(s), mesh {dict(mesh.shape)}; model {_MODEL.value} "
          f"({model_cfg.num_layers} layers, hidden {model_cfg.hidden_size}); {s.mini_batch} rows x "
          f"{s.prompt}+{s.response} tokens (teacher prompt {s.teacher_prompt}), micro-batch {s.micro_batch}; "
          f"compute {tc.compute_dtype}, remat {model_cfg.remat}, attention {model_cfg.attention}", flush=True)

    program = train_program(model_cfg, tc, s, mesh)
    plan = measure(program, target)
    print(f"plan: {plan.total / 1e9:.1f} GB per device of {plan.hbm / 1e9:.0f}, {plan.flops / 1e12:.1f} TFLOP "
          f"per device, roofline {plan.roofline_s:.2f} s (MFU {plan.mfu:.0%}), compile {plan.compile_s:.0f} s",
          flush=True)

    step = program.fn
    abstract_batch = program.args[1]
    state = create_sharded_state(random_params(model_cfg, 0), tc, mesh)
    full = synthetic_seed_batch_of(s, model_cfg.vocab_size)
    rows = batch_sharding(mesh)
    fields = {k: (None if getattr(abstract_batch, k) is None else jax.device_put(np.asarray(v), rows))
              for k, v in vars(full).items() if k in SeedBatch.__dataclass_fields__}
    batch = SeedBatch(**fields)

    t0 = time.perf_counter()
    state, metrics = step(state, batch)
    jax.block_until_ready(metrics)
    first = time.perf_counter() - t0
    times = []
    for _ in range(_STEPS.value):
        t0 = time.perf_counter()
        state, metrics = step(state, batch)
        jax.block_until_ready(metrics)
        times.append(time.perf_counter() - t0)
    t = float(np.median(times))
    tokens = s.mini_batch * (s.prompt + s.response)
    peak = max((d.memory_stats() or {}).get("peak_bytes_in_use", 0) for d in mesh.devices.flat)
    chip = target.chip
    print(f"{'':24s}{'measured':>14s}{'plan':>14s}")
    print(f"{'step time (s)':24s}{t:14.2f}{plan.roofline_s:14.2f}   (first step with compile: {first:.0f} s)")
    print(f"{'tokens/s':24s}{tokens / t:14.0f}{tokens / max(plan.roofline_s, 1e-9):14.0f}")
    print(f"{'MFU (bf16 peak)':24s}{plan.flops / t / chip.peak:14.1%}{plan.mfu:14.1%}")
    print(f"{'peak memory (GB/dev)':24s}{peak / 1e9:14.1f}{plan.total / 1e9:14.1f}")
    print(f"loss {float(metrics['loss']):.4f}, grad_norm {float(metrics['grad_norm']):.3f}")


def synthetic_seed_batch_of(s, vocab: int):
    from seed_jax.train.synthetic import synthetic_seed_batch

    return synthetic_seed_batch(0, s.mini_batch, s.prompt, s.response, s.teacher_prompt, vocab, full=True)


if __name__ == "__main__":
    from seed_jax.config_names import resolve_config_args  # --config=alfworld:paper from anywhere

    app.run(main, argv=resolve_config_args(sys.argv))
