"""Retrieval server under a burst of concurrent loopback clients: p50 / p99 latency and errors.

Starts ``python -m seed_jax.envs.search.server`` (embedded BM25 over the vendored corpus) on a free
loopback port twice, with this project's listen backlog and with the standard library's 5 as
the reference, and sends each a burst (`envs.search.load.burst`: all clients connect at once,
each sends ``--rounds`` one-query requests on fresh connections). Bounded: clients x rounds
requests per row, 60 s timeout per request.

    python bench/retrieval_server.py [--clients 32,1024] [--rounds 4] [--workers 32]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from seed_jax.envs.search import load_default_tasks
from seed_jax.envs.search.load import burst, serve_subprocess
from seed_jax.envs.search.server import DEFAULT_BACKLOG


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--clients", default="32,1024", help="comma-separated numbers of concurrent clients")
    p.add_argument("--rounds", type=int, default=4, help="requests per client")
    p.add_argument("--workers", type=int, default=32, help="server worker threads")
    args = p.parse_args()
    queries = [t["question"] for t in load_default_tasks()]
    print(f"{'server':<24} {'clients':>7} {'requests':>8} {'errors':>6} {'p50 ms':>7} {'p99 ms':>7} {'req/s':>6}")
    for label, backlog in ((f"backlog {DEFAULT_BACKLOG} (this)", DEFAULT_BACKLOG), ("backlog 5 (stdlib)", 5)):
        proc, url = serve_subprocess("--backlog", str(backlog), "--workers", str(args.workers))
        try:
            burst(url, queries[:8], clients=8)  # warm-up: index loaded, code paths hot
            for clients in (int(c) for c in args.clients.split(",")):
                r = burst(url, queries, clients=clients, rounds=args.rounds)
                n = len(r.latencies) + len(r.errors)
                print(f"{label:<24} {clients:>7} {n:>8} {len(r.errors):>6} {1e3 * r.percentile(50):>7.0f} "
                      f"{1e3 * r.percentile(99):>7.0f} {n / r.wall:>6.0f}", flush=True)
                for e in sorted(set(r.errors))[:3]:
                    print(f"    e.g. {e}")
        finally:
            proc.terminate()
            proc.wait()


if __name__ == "__main__":
    main()
