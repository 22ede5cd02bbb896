"""Sampler throughput on an accelerator: a random Qwen2.5-1.5B-shaped model (bfloat16), 256 rows
x 512 new tokens after 512-token prompts, rows over every local device (``--backend scan``:
scanned layers; ``unrolled``: per-layer weights and caches, compile time linear in depth).

Prints, side by side: prefill time, decode tokens/s, the decode step's HBM-bandwidth bound
(every weight byte plus the KV cache read once per token step, at ``--hbm-gbps``), the share of
that bound reached, compile times and the peak device memory; then the same prefill and decode
programs planned for these devices (`seed_jax.plan`: XLA's memory figures and the roofline of
the compiled HLO's traffic) beside the measured time and memory. Two bounds are shown: the cache
as read (every slot of ``P + N`` at each step: the program attends over the whole cache,
masked) and the ideal (only the filled slots, ``P + N / 2`` on average).

    python bench/gpu_sampler.py [--rows 256] [--prompt 512] [--new 512] [--hbm-gbps 4800]
                                [--tensor-parallel 1] [--attention reference|dot_product]
                                [--backend scan|unrolled]

Not run by the tests (it needs an accelerator to mean anything; on CPU use tiny sizes).
"""

from __future__ import annotations

import argparse
import dataclasses
import time

import jax
import numpy as np

from seed_jax.models import Model, ModelConfig
from seed_jax.models.decoder import init_params
from seed_jax.sampling import SamplerSpec, SamplingParams, generate, sampler_scope

QWEN25_15B = ModelConfig(model_type="qwen2", vocab_size=151936, hidden_size=1536, intermediate_size=8960,
                         num_layers=28, num_heads=12, num_kv_heads=2, head_dim=128, rope_theta=1e6,
                         rms_norm_eps=1e-6, tie_word_embeddings=True, qkv_bias=True,
                         param_dtype="bfloat16", dtype="bfloat16")


class IdTokenizer:
    """Ids in, empty text out (the benchmark reads token ids only)."""

    pad_token_id = 0
    eos_token_id = None

    def decode(self, ids, skip_special_tokens=True):
        return ""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=256)
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--new", type=int, default=512)
    ap.add_argument("--chunk", type=int, default=128)
    ap.add_argument("--hbm-gbps", type=float, default=4800.0, help="device memory bandwidth (H200: 4800)")
    ap.add_argument("--tensor-parallel", type=int, default=1)
    ap.add_argument("--attention", default="reference")
    ap.add_argument("--backend", default="scan", help="scan | unrolled (per-layer weights and caches)")
    ap.add_argument("--layers", type=int, default=0, help="override the depth (0: 28)")
    args = ap.parse_args()

    cfg = dataclasses.replace(QWEN25_15B, attention=args.attention,
                              num_layers=args.layers or QWEN25_15B.num_layers)
    dev = jax.local_devices()
    print(f"devices: {len(dev)} x {dev[0].device_kind}; model: Qwen2.5-1.5B shape, {cfg.num_layers} layers, "
          f"bfloat16, attention={cfg.attention}, backend={args.backend}")
    t = time.perf_counter()
    params = jax.jit(init_params, static_argnums=0)(cfg, jax.random.PRNGKey(0))
    jax.block_until_ready(params)
    n_params = sum(int(np.prod(a.shape)) for a in jax.tree.leaves(params))
    print(f"random params: {n_params / 1e9:.2f} B in {time.perf_counter() - t:.1f} s")
    model = Model(cfg, params)
    spec = SamplerSpec(backend=args.backend, tensor_parallel=args.tensor_parallel)
    t = time.perf_counter()
    with sampler_scope(params, cfg, spec) as copy:  # generate reuses this copy
        jax.block_until_ready(copy)
        print(f"sampler copy: {time.perf_counter() - t:.2f} s")
        rng = np.random.default_rng(0)
        prompts = [rng.integers(10, cfg.vocab_size, args.prompt).tolist() for _ in range(args.rows)]
        tok = IdTokenizer()

        def run(new):
            t0 = time.perf_counter()
            res = generate(model, tok, prompts, max_new_tokens=new, temperature=1.0, chunk=args.chunk,
                           ignore_eos=True, sampler=spec, prompt_buckets=(args.prompt,))
            assert all(len(r) == new for r in res.token_ids)
            return time.perf_counter() - t0

        first_prefill = run(1)
        prefill = min(run(1) for _ in range(2))
        first_full = run(args.new)
        full = run(args.new)
        decode_s = max(full - prefill, 1e-9)
        steps = args.new - 1
        tps = args.rows * steps / decode_s

    P, N, R = args.prompt, args.new, args.rows
    kv_bytes_per_slot = cfg.num_layers * 2 * cfg.num_kv_heads * cfg.head_dim * 2  # k and v, bfloat16
    weight_bytes = n_params * 2  # a tied embedding counts once: the LM head reads it, lookups a few rows
    tp = args.tensor_parallel
    rows_per_dev = R / (len(dev) // tp)

    def step_bound(slots):  # seconds per token step: one device's weight share and its rows' cache
        return (weight_bytes / tp + rows_per_dev * slots * kv_bytes_per_slot / tp) / (args.hbm_gbps * 1e9)

    as_read, ideal = step_bound(P + N), step_bound(P + N / 2)
    stats = dev[0].memory_stats() or {}
    peak = stats.get("peak_bytes_in_use", 0) / 2**30
    print(f"rows={R} prompt={P} new={N}  prefill {prefill:.2f} s ({R * P / prefill:,.0f} prompt tok/s)")
    print(f"decode: {decode_s:.2f} s for {steps} steps = {decode_s / steps * 1e3:.2f} ms/step, {tps:,.0f} tok/s")
    print(f"HBM bound per step: {as_read * 1e3:.2f} ms (whole cache read) / {ideal * 1e3:.2f} ms (filled slots) "
          f"-> {R / as_read:,.0f} / {R / ideal:,.0f} tok/s; reached {as_read / (decode_s / steps):.0%} / "
          f"{ideal / (decode_s / steps):.0%}")
    print(f"compile+first run: prefill {first_prefill - prefill:.1f} s, decode {first_full - full:.1f} s")
    print(f"peak device memory (device 0): {peak:.1f} GiB; KV cache {R * (P + N) * kv_bytes_per_slot / 2**30:.1f} GiB "
          f"over all devices, weights {weight_bytes / 2**30:.1f} GiB per replica")
    plan_beside(cfg, args, dev, prefill, decode_s / steps, peak)


def plan_beside(cfg, args, dev, prefill_s: float, step_s: float, peak_gib: float) -> None:
    """The plan of the same prefill and decode chunk on these devices, beside the measurement."""
    from seed_jax.plan.analysis import measure
    from seed_jax.plan.programs import sampler_programs
    from seed_jax.plan.targets import native_target

    target = native_target(dev)
    sp = SamplingParams(args.new, 1.0, 1.0, 0, min(args.chunk, args.new))
    pre, dec = (measure(p, target) for p in sampler_programs("rollout", cfg, args.rows, args.prompt, sp, dev,
                                                            backend=args.backend, tensor_parallel=args.tensor_parallel))
    print(f"{'':28s}{'measured':>12s}{'plan':>12s}")
    print(f"{'prefill (s)':28s}{prefill_s:12.3f}{pre.roofline_s:12.3f}   (plan: roofline of its HLO)")
    print(f"{'decode step (ms)':28s}{step_s * 1e3:12.2f}{dec.roofline_s / sp.chunk * 1e3:12.2f}   "
          f"(plan: {dec.hbm_bytes / sp.chunk / 1e9:.2f} GB of HBM traffic per step)")
    print(f"{'peak memory (GiB, device 0)':28s}{peak_gib:12.1f}{max(pre.total, dec.total) / 2**30:12.1f}")


if __name__ == "__main__":
    main()
