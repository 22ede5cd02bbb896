"""Decode and train-step speed of two commits, side by side, on this machine.

    python bench/ab_commits.py --before 7f34f2f [--after HEAD] [--rounds 2] [--new-tokens 128]

Each commit is checked out into a temporary worktree; the measurements run in fresh processes
with ``PYTHONPATH`` set to that worktree, alternating (before, after, before, after ...) so both
see the same background load, and the fastest round of each is printed. Measured:

* decode: `seed_jax.sampling.generate` on the embedded SmolLM2-135M-Instruct (float32, greedy,
  ``--new-tokens`` tokens with EOS ignored) at batch 1 and 16: warm tokens/s, and the first
  call's seconds (compile + the sampler's parameter copy). Where the commit has
  `seed_jax.sampling.sampler_scope`, decode is measured twice: inside one scope (as the pipeline
  calls it: one copy for many calls) and with a fresh call each time (a copy per call).
* train step: the jitted SEED step (teacher pass on) of `bench/train_step_flops.py`'s tiny and
  SmolLM2-135M-shaped configs at B=4, P=R=64: compile seconds and warm step milliseconds.
Figures are printed, nothing is asserted.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def measure_decode(new_tokens: int, repeats: int) -> dict:
    """{"B=<b>[ scoped]": (warm tok/s, first-call s)} for the commit on PYTHONPATH."""
    from seed_jax import sampling
    from seed_jax.models import apply_chat, load_model, load_tokenizer

    tok = load_tokenizer(None)
    model = load_model(None, dtype="float32")
    questions = ["What is the capital of France?", "Explain photosynthesis briefly.",
                 "Write a haiku about rain.", "What is 17 times 23?"]
    scope = getattr(sampling, "sampler_scope", None)
    modes = [("", contextlib.nullcontext)]
    if scope is not None:
        modes.append((" scoped", lambda: scope(model.params, model.config)))
    out = {}
    for b in (1, 16):
        prompts = [apply_chat(tok, questions[i % len(questions)]) for i in range(b)]
        for label, ctx in modes:
            with ctx():
                times = []
                for _ in range(repeats + 1):
                    t = time.perf_counter()
                    r = sampling.generate(model, tok, prompts, max_new_tokens=new_tokens,
                                          temperature=0.0, ignore_eos=True)
                    times.append(time.perf_counter() - t)
                assert all(len(ids) == new_tokens for ids in r.token_ids)
            out[f"B={b}{label}"] = (b * new_tokens / min(times[1:]), times[0])
    return out


def measure_train(steps: int) -> dict:
    """{"<config>": (compile s, step ms)} for the SEED step of the commit on PYTHONPATH."""
    sys.path.insert(0, str(Path(os.environ["PYTHONPATH"].split(os.pathsep)[0]) / "bench"))
    import train_step_flops as tsf  # the commit's own bench module: its configs and batch

    from seed_jax.train.synthetic import smollm2_135m_config, synthetic_seed_batch, tiny_config

    out = {}
    for name, cfg in (("tiny", tiny_config()), ("smollm2-135m", smollm2_135m_config())):
        batch = synthetic_seed_batch(0, 4, 64, 64, 64, cfg.vocab_size, full=True)
        r = tsf.jax_bench(cfg, batch, steps)
        out[name] = (r["seed_compile_s"], r["step_s"] * 1e3)
    return out


def _run_child(tree: Path, what: str, args) -> dict:
    env = dict(os.environ, PYTHONPATH=str(tree))
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", what,
           "--new-tokens", str(args.new_tokens), "--repeats", str(args.repeats),
           "--steps", str(args.steps)]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False, cwd=tree)
    if p.returncode:
        raise RuntimeError(f"{what} at {tree} failed:\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def _best(rounds: list[dict], key: str, col: int, lower_is_better: bool):
    vals = [r[key][col] for r in rounds]
    return min(vals) if lower_is_better else max(vals)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--before", default="")
    ap.add_argument("--after", default="HEAD")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--only", default="decode,train")
    ap.add_argument("--child", default="")
    args = ap.parse_args()
    if args.child == "decode":
        print(json.dumps(measure_decode(args.new_tokens, args.repeats)))
        return
    if args.child == "train":
        print(json.dumps(measure_train(args.steps)))
        return
    if not args.before:
        ap.error("--before is required")

    shas = {}
    for ref in (args.before, args.after):
        shas[ref] = subprocess.run(["git", "rev-parse", "--short", ref], cwd=REPO, check=True,
                                   capture_output=True, text=True).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="ab_commits_") as tmp:
        trees = {}
        for ref, sha in shas.items():
            trees[ref] = Path(tmp) / sha
            subprocess.run(["git", "worktree", "add", "--detach", "-q", str(trees[ref]), sha],
                           cwd=REPO, check=True)
        try:
            print(f"cpus={os.cpu_count()}  before={shas[args.before]}  after={shas[args.after]}  "
                  f"rounds={args.rounds} (alternating; fastest shown)  load={os.getloadavg()[0]:.1f}")
            for what in args.only.split(","):
                res = {ref: [] for ref in shas}
                for _ in range(args.rounds):
                    for ref in shas:
                        res[ref].append(_run_child(trees[ref], what, args))
                b, a = res[args.before], res[args.after]
                if what == "decode":
                    print(f"\ndecode, SmolLM2-135M f32, {args.new_tokens} new tokens, greedy")
                    print(f"{'batch':<12} {'before tok/s':>12} {'after tok/s':>12} {'ratio':>6} "
                          f"{'before 1st s':>13} {'after 1st s':>12}")
                    for key in a[0]:
                        bkey = key if key in b[0] else key.replace(" scoped", "")
                        bt, at = _best(b, bkey, 0, False), _best(a, key, 0, False)
                        bf, af = _best(b, bkey, 1, True), _best(a, key, 1, True)
                        print(f"{key:<12} {bt:>12.1f} {at:>12.1f} {at / bt:>6.2f} {bf:>13.1f} {af:>12.1f}")
                else:
                    print("\nSEED train step (teacher pass on), B=4 P=R=64")
                    print(f"{'config':<14} {'before ms':>10} {'after ms':>10} {'ratio':>6} "
                          f"{'before compile s':>17} {'after compile s':>16}")
                    for key in a[0]:
                        bs, as_ = _best(b, key, 1, True), _best(a, key, 1, True)
                        bc, ac = _best(b, key, 0, True), _best(a, key, 0, True)
                        print(f"{key:<14} {bs:>10.1f} {as_:>10.1f} {as_ / bs:>6.2f} {bc:>17.1f} {ac:>16.1f}")
            print(f"\nload after: {os.getloadavg()[0]:.1f}")
        finally:
            for tree in trees.values():
                subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=REPO,
                               check=False)


if __name__ == "__main__":
    main()
