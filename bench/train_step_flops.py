"""SEED train step: compiled FLOPs (SEED vs GRPO), JAX vs PyTorch step time, MFU.

    python bench/train_step_flops.py                  # tiny + SmolLM2-135M-sized, B=4, P=R=64
    python bench/train_step_flops.py --configs tiny --steps 5 --no-torch

For each config it prints
  * XLA cost-analysis FLOPs of the compiled SEED step (lambda_opd > 0, teacher pass on the
    current params) and of the GRPO step (lambda_opd = 0), and their ratio. XLA's
    HloCostAnalysis counts a while-loop body once, so the scanned decoder layers appear
    once per pass; the ratio still compares "student fwd + bwd + teacher fwd" with
    "student fwd + bwd" (expected ~4/3, goal <= 1.45: the teacher adds forward work only).
  * the analytic FLOPs with every layer counted (matmuls + attention scores + LM head on
    the R response positions; backward = 2 x forward) and their ratio;
  * step time and tokens/s (student sequence tokens B x (P + R) per step) of the jitted JAX
    SEED step and of a PyTorch reference of the same loss (bench/torch_seed_step.py:
    transformers LlamaForCausalLM with the same weights and batch, torch.optim.AdamW,
    teacher under no_grad; run in a fresh process so XLA cannot disturb torch's threads),
    the loss of both on the first step as a parity check, and the speed ratio;
  * MFU: analytic FLOPs per second / measured peak matmul FLOP/s (a large jnp.dot).
Figures are printed, nothing is asserted.
"""

from __future__ import annotations

import argparse
import functools
import os
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np

from seed_jax.models.config import ModelConfig
from seed_jax.train.config import TrainConfig
from seed_jax.train.mesh import make_mesh
from seed_jax.train.state import create_sharded_state
from seed_jax.train.step import make_train_step
from seed_jax.train.synthetic import random_params, smollm2_135m_config, synthetic_seed_batch, tiny_config

TC = TrainConfig(lr=1e-6, weight_decay=0.01, grad_clip=1.0, c_ent=0.001, c_kl=0.01,
                 lambda_opd=0.01, beta_opd=5.0)


def peak_matmul_flops(n: int = 2048, reps: int = 5) -> float:
    """Best-of-``reps`` float32 FLOP/s of an ``n x n @ n x n`` jnp.dot."""
    a = jax.random.normal(jax.random.PRNGKey(0), (n, n), jnp.float32)
    f = jax.jit(lambda x: x @ x)
    f(a).block_until_ready()
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        f(a).block_until_ready()
        best = min(best, time.perf_counter() - t)
    return 2 * n ** 3 / best


def analytic_flops(cfg: ModelConfig, B: int, Ts: int, Tt: int, R: int, teacher: bool) -> float:
    """3 x student forward (+ 1 teacher forward): layer matmuls, attention, LM head on R rows."""
    H, D, L = cfg.hidden_size, cfg.head_dim, cfg.num_layers
    per_tok = 2 * (2 * H * cfg.num_heads * D + 2 * H * cfg.num_kv_heads * D
                   + 3 * H * cfg.intermediate_size)

    def fwd(T):
        return B * (L * (T * per_tok + 4 * T * T * cfg.num_heads * D) + 2 * H * cfg.vocab_size * R)

    return 3 * fwd(Ts) + (fwd(Tt) if teacher else 0)


def jax_bench(cfg, batch, steps):
    mesh = make_mesh()
    params = random_params(cfg, 0)
    out = {"params": jax.device_get(params)}
    for name, tc in (("seed", TC), ("grpo", TC.replace(lambda_opd=0.0))):
        state = create_sharded_state(params, tc, mesh)
        t = time.perf_counter()
        compiled = make_train_step(cfg, tc, mesh).lower(state, batch).compile()
        out[f"{name}_compile_s"] = time.perf_counter() - t
        out[f"{name}_flops"] = compiled.cost_analysis()["flops"]
        if name == "seed":
            state, m = compiled(state, batch)  # warm-up, and the parity loss
            out["loss"] = float(m["loss"])
            jax.block_until_ready(state)
            t = time.perf_counter()
            for _ in range(steps):
                state, m = compiled(state, batch)
            jax.block_until_ready((state, m))
            out["step_s"] = (time.perf_counter() - t) / steps
    return out


def torch_bench(cfg, params, batch, steps, P, Pt, R, threads, workdir):
    """Run bench/torch_seed_step.py in a fresh process on the same weights and batch."""
    import dataclasses
    import json
    import subprocess
    import sys
    from pathlib import Path

    from seed_jax.models.model import Model, save_model

    wd = Path(workdir)
    if not (wd / "model" / "config.json").exists():
        save_model(Model(cfg, params), wd / "model", dtype="float32")
        np.savez(wd / "batch.npz", **{k: np.asarray(v) for k, v in vars(batch).items() if v is not None})
        (wd / "setup.json").write_text(json.dumps(
            {"P": P, "Pt": Pt, "R": R, "train": dataclasses.asdict(TC)}))
    script = Path(__file__).with_name("torch_seed_step.py")
    out = subprocess.run([sys.executable, str(script), str(wd), "--threads", str(threads),
                          "--steps", str(steps)], capture_output=True, text=True, check=False)
    if out.returncode:
        raise RuntimeError(f"torch reference failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--configs", default="tiny,smollm2-135m")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--prompt", type=int, default=64)
    ap.add_argument("--teacher-prompt", type=int, default=None, help="Pt (default: = prompt)")
    ap.add_argument("--resp", type=int, default=64)
    ap.add_argument("--steps", type=int, default=1, help="timed steps after one warm-up")
    ap.add_argument("--no-torch", action="store_true")
    args = ap.parse_args()
    B, P, R = args.batch, args.prompt, args.resp
    Pt = args.teacher_prompt or P
    peak = peak_matmul_flops()
    print(f"devices: {jax.devices()}  cpus: {os.cpu_count()}")
    print(f"peak matmul (2048^3 jnp.dot, f32): {peak / 1e9:.1f} GFLOP/s")
    print(f"batch B={B} P={P} Pt={Pt} R={R}; tokens/s = B*(P+R) student tokens per second\n")
    configs = {"tiny": tiny_config(), "smollm2-135m": smollm2_135m_config()}
    for name in args.configs.split(","):
        cfg = configs[name]
        batch = synthetic_seed_batch(0, B, P, R, Pt, cfg.vocab_size, full=True)
        j = jax_bench(cfg, batch, args.steps)
        a_seed = analytic_flops(cfg, B, P + R, Pt + R, R, True)
        a_grpo = analytic_flops(cfg, B, P + R, Pt + R, R, False)
        tok = B * (P + R)
        print(f"== {name}: layers={cfg.num_layers} hidden={cfg.hidden_size} vocab={cfg.vocab_size}")
        print(f"  XLA cost analysis  SEED {j['seed_flops'] / 1e9:10.3f} GFLOP  GRPO "
              f"{j['grpo_flops'] / 1e9:10.3f} GFLOP  ratio {j['seed_flops'] / j['grpo_flops']:.3f}"
              f"   (loop bodies counted once)")
        print(f"  analytic (all L)   SEED {a_seed / 1e9:10.3f} GFLOP  GRPO {a_grpo / 1e9:10.3f} "
              f"GFLOP  ratio {a_seed / a_grpo:.3f}")
        print(f"  compile: SEED {j['seed_compile_s']:.1f}s  GRPO {j['grpo_compile_s']:.1f}s")
        print(f"  JAX   SEED step {j['step_s'] * 1e3:9.1f} ms  {tok / j['step_s']:9.1f} tok/s  "
              f"MFU {a_seed / j['step_s'] / peak:6.1%}  loss[0] {j['loss']:.6f}")
        if not args.no_torch:
            with tempfile.TemporaryDirectory() as wd:
                run = functools.partial(torch_bench, cfg, j["params"], batch, args.steps, P, Pt, R, workdir=wd)
                t = run(os.cpu_count() or 1)
                if t["step_s"] < 5.0 and t["threads"] > 1:
                    # Small models: one OpenMP thread can beat several (overhead-bound).
                    t = min(t, run(1), key=lambda r: r["step_s"])
            print(f"  torch SEED step {t['step_s'] * 1e3:9.1f} ms  {tok / t['step_s']:9.1f} tok/s  "
                  f"MFU {a_seed / t['step_s'] / peak:6.1%}  loss[0] {t['loss']:.6f}  "
                  f"({t['threads']} threads)")
            print(f"  speed JAX / torch: {t['step_s'] / j['step_s']:.2f}x   "
                  f"|loss diff| {abs(t['loss'] - j['loss']):.2e}")
        print()


if __name__ == "__main__":
    main()
