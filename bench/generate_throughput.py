"""Decode throughput of `seed_jax.sampling.generate` vs transformers' `generate`, side by side.

Same CPU, same model (the embedded SmolLM2-135M-Instruct, float32, weights dequantised from
the same GGUF), same prompts, batch 1 and 16, 128 new tokens (EOS ignored so both run every
step), greedy. The JAX and torch runs alternate (JAX, torch, JAX, torch ...) so that both see
the same background load; tok/s is from the fastest run of each. Also printed: the process
CPU seconds of those runs (all threads; less sensitive to other processes than wall time,
though torch's spinning worker threads count too), the JAX compile time (first call minus
the fastest warm call) and the 1-minute load average before the row (the CPU count is the
ceiling for an otherwise idle machine).

    python bench/generate_throughput.py [--new-tokens 128] [--batches 1,16] [--repeats 2]
                                        [--torch-threads N]

``--torch-threads`` defaults to torch's own choice (one per core). On a machine where other
processes keep a core busy, torch's multi-threaded decode can be many times slower than with
one thread (its worker threads wait on each other at every op); run both to see.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np


def _timed(fn):
    """(wall seconds, process CPU seconds, result) of one call."""
    c0, t0 = time.process_time(), time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, time.process_time() - c0, out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--batches", default="1,16")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--torch-threads", type=int, default=0, help="0: torch's default")
    args = ap.parse_args()

    import torch

    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)
    from transformers import AutoModelForCausalLM

    from seed_jax.models import apply_chat, embedded_model_path, load_model, load_tokenizer
    from seed_jax.sampling import generate

    path = embedded_model_path()
    tok = load_tokenizer(None)
    jmodel = load_model(None, dtype="float32")
    hf = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32).eval()
    questions = ["What is the capital of France?", "Explain photosynthesis briefly.",
                 "Write a haiku about rain.", "What is 17 times 23?"]
    N = args.new_tokens
    print(f"torch threads={torch.get_num_threads()}  cpus={os.cpu_count()}  new tokens={N}  "
          f"model=SmolLM2-135M-Instruct float32")
    print(f"{'batch':>5} {'jax tok/s':>10} {'torch tok/s':>12} {'ratio':>6} {'jax cpu s':>10} "
          f"{'torch cpu s':>12} {'jax compile s':>14} {'load':>5}")
    for B in [int(b) for b in args.batches.split(",")]:
        load = os.getloadavg()[0]
        prompts = [apply_chat(tok, questions[i % len(questions)]) for i in range(B)]
        enc = tok(prompts, return_tensors="pt", padding=True)

        def run_jax(prompts=prompts):
            return generate(jmodel, tok, prompts, max_new_tokens=N, temperature=0.0, ignore_eos=True)

        def run_torch(enc=enc):
            with torch.no_grad():
                return hf.generate(**enc, max_new_tokens=N, min_new_tokens=N, do_sample=False,
                                   pad_token_id=tok.pad_token_id)

        first, _, _ = _timed(run_jax)
        jax_runs, torch_runs = [], []
        for _ in range(args.repeats):
            jax_runs.append(_timed(run_jax))
            torch_runs.append(_timed(run_torch))
        assert all(len(r) == N for r in jax_runs[-1][2].token_ids)
        assert torch_runs[-1][2].shape[1] - enc["input_ids"].shape[1] == N
        jw, jc, _ = min(jax_runs, key=lambda r: r[0])
        tw, tc, _ = min(torch_runs, key=lambda r: r[0])
        jax_tps, torch_tps = B * N / jw, B * N / tw
        print(f"{B:>5} {jax_tps:>10.1f} {torch_tps:>12.1f} {jax_tps / torch_tps:>6.2f} {jc:>10.1f} "
              f"{tc:>12.1f} {first - jw:>14.1f} {load:>5.1f}", flush=True)


if __name__ == "__main__":
    np.set_printoptions(precision=3)
    main()
