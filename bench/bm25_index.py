"""BM25 index build and query cost at a scale between the vendored corpus and wiki-18.

Writes a synthetic ``{"id", "contents"}`` corpus of ``--passages`` passages of 100 words drawn
from a Zipf(1.1) law over a 1M-word vocabulary (wiki-18: 21,015,324 passages of 100 words),
then, each in a fresh process: (1) builds the BM25 index (`envs.search.BM25Retriever`,
bm25s), printing wall time and peak RSS; (2) loads it memory-mapped and runs 100 queries of 8
words, printing load time, RSS after the queries and per-query latency. Per-passage figures
are printed for a linear extrapolation to wiki-18 (an estimate, not a measurement).

    python bench/bm25_index.py [--passages 200000] [--dir /tmp/bm25_bench]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WIKI18 = 21_015_324


def write_corpus(path: Path, n: int, seed: int = 0) -> None:
    import numpy as np

    rng = np.random.default_rng(seed)
    words = np.array([f"w{i}" for i in range(1_000_000)])
    with open(path, "w") as f:
        for i in range(n):
            ranks = np.minimum(rng.zipf(1.1, size=100), len(words)) - 1
            f.write(json.dumps({"id": str(i), "contents": f'"T{i}"\n' + " ".join(words[ranks])}) + "\n")


def child(mode: str, corpus: str, cache: str) -> None:
    sys.path.insert(0, str(REPO))
    import numpy as np

    from seed_jax.envs.search import BM25Retriever

    t0 = time.perf_counter()
    r = BM25Retriever(corpus, cache_dir=cache)
    t1 = time.perf_counter()
    out = {"seconds": t1 - t0, "from_cache": r.loaded_from_cache}
    if mode == "query":
        rng = np.random.default_rng(1)
        lat = []
        for _ in range(100):
            q = " ".join(f"w{int(k) - 1}" for k in np.minimum(rng.zipf(1.1, size=8), 1_000_000))
            s = time.perf_counter()
            r.search([q], 3)
            lat.append(time.perf_counter() - s)
        out["query_ms_p50"] = 1e3 * float(np.percentile(lat, 50))
        out["query_ms_p99"] = 1e3 * float(np.percentile(lat, 99))
    with open(f"/proc/{os.getpid()}/status") as f:
        rss = next(int(line.split()[1]) for line in f if line.startswith("VmRSS"))
    out["rss_mb"] = rss / 1024
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(out))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--passages", type=int, default=200_000)
    p.add_argument("--dir", default="/tmp/bm25_bench")
    args = p.parse_args()
    d = Path(args.dir)
    d.mkdir(parents=True, exist_ok=True)
    corpus, cache = d / f"corpus{args.passages}.jsonl", d / "cache"
    if not corpus.exists():
        write_corpus(corpus, args.passages)
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    res = {}
    for mode in ("build", "query"):
        if mode == "build":
            subprocess.run(["rm", "-rf", str(cache)], check=True)
        line = subprocess.run([sys.executable, __file__, "--child", mode, str(corpus), str(cache)], env=env,
                              check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
        res[mode] = json.loads(line)
    n, b, q = args.passages, res["build"], res["query"]
    size = sum(f.stat().st_size for f in cache.rglob("*") if f.is_file()) / 2**20
    scale = WIKI18 / n
    print(f"passages {n}  corpus {corpus.stat().st_size / 2**20:.0f} MiB  index on disk {size:.0f} MiB")
    print(f"build: {b['seconds']:.1f} s, peak RSS {b['peak_rss_mb']:.0f} MiB")
    print(f"query (mmap): load {q['seconds']:.2f} s, RSS after 100 queries {q['rss_mb']:.0f} MiB, "
          f"p50 {q['query_ms_p50']:.1f} ms, p99 {q['query_ms_p99']:.1f} ms")
    print(f"linear estimate for wiki-18 ({WIKI18} passages, x{scale:.0f}): build {b['seconds'] * scale / 3600:.1f} h, "
          f"peak RSS {b['peak_rss_mb'] * scale / 1024:.0f} GiB, index on disk {size * scale / 1024:.0f} GiB")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(*sys.argv[2:5])
    else:
        main()
