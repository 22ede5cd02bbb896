"""Environment throughput: the worker pool vs a single in-process loop, and SmolLM2 rollouts.

Part 1 (no model): a fixed script of responses is stepped through B live episodes; env steps/s
for the in-process backend and for the process pool with 1, 2 and 4 workers, side by side
(ratio against in-process). ALFWorld uses the real TextWorld engine on the plain-subset games;
Search uses the embedded BM25 retriever.

Part 2: rollout throughput of the full loop (SmolLM2-135M sampler + Search env): env steps/s and
generated tokens/s for one batch of tasks x group.

    python bench/env_pool.py [--episodes 16] [--steps 6] [--workers 1,2,4] [--skip-rollout]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def search_setup(n):
    from seed_jax.envs.search import load_default_tasks, make_search_env
    from seed_jax.rollout.pool import EnvFactory

    tasks = load_default_tasks()
    responses = ["<think>look it up</think><search>{q}</search>"] * 3 + ["<think>done</think><answer>x</answer>"]
    return EnvFactory(make_search_env, seed_kwarg=None), [tasks[i % len(tasks)] for i in range(n)], responses


def alfworld_setup(n):
    from seed_jax.envs.alfworld import list_games, make_alfworld_env
    from seed_jax.rollout.pool import EnvFactory

    data = REPO.parent / "shared" / "data" / "alfworld"
    games = list_games(data, "valid_seen")
    responses = ["<think>explore</think><action>look</action>", "<think>inv</think><action>inventory</action>"]
    return EnvFactory(make_alfworld_env, data_dir=str(data), seed_kwarg=None), \
        [games[i % len(games)] for i in range(n)], responses


def drive(backend, tasks, responses, steps):
    t0 = time.perf_counter()
    res = backend.reset(dict(enumerate(tasks)))
    t_reset = time.perf_counter() - t0
    live = {s for s, r in res.items() if not r.env_error}
    n = 0
    t0 = time.perf_counter()
    for k in range(steps):
        if not live:
            break
        out = backend.step({s: responses[k % len(responses)].replace("{q}", tasks[s].get("question", "")[:60])
                            for s in live})
        n += len(out)
        live = {s for s, r in out.items() if not r.done}
    return n, time.perf_counter() - t0, t_reset


def pool_table(name, setup, episodes, steps, workers):
    from seed_jax.rollout.pool import open_env_pool

    factory, tasks, responses = setup(episodes)
    rows = []
    with open_env_pool(factory, num_workers=0) as b:
        n, dt, tr = drive(b, tasks, responses, steps)
    base = n / dt
    rows.append(("in-process", n / dt, tr, 1.0))
    for w in workers:
        with open_env_pool(factory, num_workers=w, step_timeout_s=300) as b:
            drive(b, tasks[:w], responses, 1)  # start workers, import engines
            n, dt, tr = drive(b, tasks, responses, steps)
        rows.append((f"{w} worker(s)", n / dt, tr, (n / dt) / base))
    print(f"\n{name}: {episodes} episodes x up to {steps} steps")
    print(f"{'backend':>12} {'steps/s':>9} {'reset s':>8} {'vs in-process':>14}")
    for label, sps, tr, ratio in rows:
        print(f"{label:>12} {sps:>9.1f} {tr:>8.2f} {ratio:>14.2f}")


def rollout_figures(tasks_n, group):
    from seed_jax.envs.search import SEARCH_SPEC, load_default_tasks, make_search_env
    from seed_jax.models import load_model, load_tokenizer
    from seed_jax.rollout.loop import RolloutSettings, run_rollouts
    from seed_jax.rollout.pool import EnvFactory, open_env_pool
    from seed_jax.sampling import SamplingParams

    model, tok = load_model(None), load_tokenizer(None)
    settings = RolloutSettings(group_size=group, max_steps=SEARCH_SPEC.max_steps, max_prompt_tokens=1024,
                               sampling=SamplingParams(max_new_tokens=128), invalid_penalty=SEARCH_SPEC.invalid_penalty,
                               success_threshold=1.0, stop_strings=("</search>", "</answer>"))
    tasks = load_default_tasks(limit=tasks_n)
    with open_env_pool(EnvFactory(make_search_env, seed_kwarg=None), num_workers=0) as pool:
        run_rollouts(pool, model, tok, tasks[:1], settings, progress=False)  # compile
        t0 = time.perf_counter()
        trajs = run_rollouts(pool, model, tok, tasks, settings, progress=False)
        dt = time.perf_counter() - t0
    steps = sum(len(t.steps) for t in trajs)
    toks = sum(len(s.response_ids) for t in trajs for s in t.steps)
    print(f"\nSmolLM2-135M on Search: {len(trajs)} episodes, {steps} env steps, {toks} generated tokens in {dt:.1f}s")
    print(f"  env steps/s {steps / dt:.2f}   generated tokens/s {toks / dt:.1f}   "
          f"success {sum(t.won for t in trajs) / len(trajs):.2f}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--episodes", type=int, default=16)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--workers", default="1,2,4")
    ap.add_argument("--skip-rollout", action="store_true")
    ap.add_argument("--rollout-tasks", type=int, default=4)
    ap.add_argument("--group", type=int, default=4)
    args = ap.parse_args()
    workers = [int(w) for w in args.workers.split(",")]
    pool_table("Search (BM25)", search_setup, args.episodes, args.steps, workers)
    pool_table("ALFWorld (TextWorld engine)", alfworld_setup, args.episodes, args.steps, workers)
    if not args.skip_rollout:
        rollout_figures(args.rollout_tasks, args.group)


if __name__ == "__main__":
    main()
