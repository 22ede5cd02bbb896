"""Bounded load test of a retrieval server on this machine: many clients at once, latencies, errors.

`burst(url, queries, clients, rounds)`: ``clients`` threads wait at a barrier, then each sends
``rounds`` ``POST /retrieve {"query": q}`` requests one after another, each on a new
connection (as urllib-based clients such as `HttpRetriever` do), so up to ``clients``
connections arrive at the same moment. Every request is bounded by ``timeout`` seconds and the
whole burst by ``clients * rounds`` requests; nothing is retried. `serve_subprocess` starts
``python -m seed_jax.envs.search.server`` on a free loopback port and returns it with its URL.
"""

from __future__ import annotations

import dataclasses
import http.client
import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.parse
from pathlib import Path

import numpy as np


@dataclasses.dataclass
class LoadResult:
    latencies: list[float]  # seconds of each successful request
    errors: list[str]  # one line per failed request (exception or bad status)
    answers: dict[str, list[str]]  # query -> the ids of one successful answer
    wall: float  # seconds from the barrier to the last reply

    def percentile(self, q: float) -> float:
        return float(np.percentile(self.latencies, q)) if self.latencies else float("nan")

    def summary(self) -> str:
        n = len(self.latencies) + len(self.errors)
        return (f"{n} requests, {len(self.errors)} errors, p50 {1e3 * self.percentile(50):.0f} ms, "
                f"p99 {1e3 * self.percentile(99):.0f} ms, max {1e3 * max(self.latencies, default=float('nan')):.0f} ms, "
                f"{n / self.wall:.0f} req/s")


def _post(url: urllib.parse.SplitResult, query: str, topk: int, timeout: float) -> list[str]:
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=timeout)
    try:
        body = json.dumps({"query": query, "topk": topk}).encode()
        conn.request("POST", url.path or "/retrieve", body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        data = resp.read()
        if resp.status != 200:
            raise RuntimeError(f"HTTP {resp.status}: {data[:200]!r}")
        return [d["id"] for d in json.loads(data)["result"][0]]
    finally:
        conn.close()


def burst(url: str, queries: list[str], clients: int, rounds: int = 1, topk: int = 3,
          timeout: float = 60.0) -> LoadResult:
    """The load of the module docstring; client i asks ``queries[(i * rounds + r) % len]``."""
    target = urllib.parse.urlsplit(url)
    latencies: list[float] = []
    errors: list[str] = []
    answers: dict[str, list[str]] = {}
    lock = threading.Lock()
    barrier = threading.Barrier(clients + 1)

    def client(i: int) -> None:
        barrier.wait()
        for r in range(rounds):
            q = queries[(i * rounds + r) % len(queries)]
            t0 = time.perf_counter()
            try:
                ids = _post(target, q, topk, timeout)
            except Exception as e:
                with lock:
                    errors.append(f"{type(e).__name__}: {e}")
                continue
            dt = time.perf_counter() - t0
            with lock:
                latencies.append(dt)
                answers.setdefault(q, ids)

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(clients)]
    for t in threads:
        t.start()
    barrier.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    return LoadResult(latencies, errors, answers, time.perf_counter() - t0)


def serve_subprocess(*args: str, startup_timeout: float = 120.0) -> tuple[subprocess.Popen, str]:
    """``python -m seed_jax.envs.search.server --port 0 *args`` and its /retrieve URL (read from the line
    it prints when it serves). Stop it with ``proc.terminate(); proc.wait()``."""
    # the folder holding this very package (a checkout's root, or site-packages), whatever else is installed
    root = str(Path(sys.modules[__name__.split(".")[0]].__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    proc = subprocess.Popen([sys.executable, "-m", "seed_jax.envs.search.server", "--port", "0", *args],
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env)
    deadline = time.monotonic() + startup_timeout
    lines = []
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        lines.append(line)
        m = re.search(r"at (http://\S+/retrieve)", line)
        if m:
            threading.Thread(target=proc.stderr.read, daemon=True).start()  # drain further output
            return proc, m.group(1)
    proc.kill()
    proc.wait()
    raise RuntimeError("retrieval server did not start: " + "".join(lines)[-2000:])
