"""XLA:CPU temporaries of the default run's train steps with and without the CPU flags of
`seed_jax.train.xla_setup` (copy insertion by region analysis), side by side.

    python bench/xla_cpu_copies.py                       # configs/search.py (SmolLM2-135M)
    python bench/xla_cpu_copies.py --config=configs/alfworld.py

Each column is `python -m seed_jax.plan --target=cpu:1` in its own process (XLA reads its
flags once): the reference column sets ``--xla_cpu_copy_insertion_use_region_analysis=false``
(XLA's default), the other takes the run's flags. Nothing is allocated: the programs are
compiled from abstract inputs and their ``memory_analysis()`` read.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FLAG = "--xla_cpu_copy_insertion_use_region_analysis"


def plan(config: str, programs: str, flags: str) -> dict[str, dict]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "plan.json"
        cmd = [sys.executable, "-m", "seed_jax.plan", f"--config={config}", "--target=cpu:1",
               f"--programs={programs}", f"--json={out}"]
        env = {**os.environ, "XLA_FLAGS": flags, "PYTHONPATH": str(ROOT)}
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            sys.exit(f"plan failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
        return {p["name"]: p for p in json.loads(out.read_text())["programs"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="configs/search.py")
    ap.add_argument("--programs", default="sft_step,train_step")
    args = ap.parse_args()
    ref = plan(args.config, args.programs, f"{FLAG}=false")
    run = plan(args.config, args.programs, "")
    gb = lambda p, k: p[k] / 1e9  # noqa: E731
    print(f"{args.config}: XLA:CPU memory per program, GB (reference: {FLAG}=false)")
    print("| program | args | temp (reference) | temp (run flags) | saved |")
    print("|---|---|---|---|---|")
    for name, p in run.items():
        r = ref[name]
        print(f"| {name} | {gb(p, 'argument'):.2f} | {gb(r, 'temp'):.2f} | {gb(p, 'temp'):.2f} "
              f"| {gb(r, 'temp') - gb(p, 'temp'):.2f} |")


if __name__ == "__main__":
    main()
