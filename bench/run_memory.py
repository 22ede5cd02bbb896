"""Peak resident memory and wall time per stage of a launcher run, beside a reference.

    python bench/run_memory.py                                  # the default run (configs/search.py)
    python bench/run_memory.py --stages=collect,annotate,sft    # stage 1 only
    python bench/run_memory.py --config=configs/search.py:tiny --save=/tmp/tiny.json
    python bench/run_memory.py --reference=/tmp/tiny.json       # compare with a saved measurement

The run is ``python -m seed_jax.launch`` in a child process (a fresh run directory unless
``--workdir``; extra ``--config.*`` arguments pass through). A sampler reads the resident set
size (RSS) of the child and its children every ``--interval`` seconds and files each sample
under the stage the launcher's log says is running (``stage X: start`` / ``stage X: done``);
the whole-run peak is also read from the kernel (``getrusage(RUSAGE_CHILDREN).ru_maxrss``, the
figure ``/usr/bin/time -v`` prints as "Maximum resident set size"). Wall time per stage is the
launcher's own ``wall_s``.

The reference column is ``--reference FILE`` (what ``--save`` wrote for another commit or
config), else `REFERENCE`: the default run as measured before the memory work (see its note).
Wall times depend on the machine's load: say so when quoting them.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
STAGES = ("collect", "annotate", "sft", "rl", "eval")

# The default run before the memory work (commit c19b655), as recorded then: wall time per stage
# from the README of that commit (one run on the project's shared 2-core machine, load 6-7) and
# the whole run's peak RSS, 14.5 GB, reached during stage-1 SFT (measured alone on an idle
# machine). Its per-stage RSS other than SFT was not recorded.
REFERENCE = {
    "label": "c19b655 (before)",
    "peak_rss_mb": {"sft": 14.5 * 1024},
    "wall_s": {"collect": 212.0, "annotate": 0.0, "sft": 1143.0, "rl": 1599.0, "eval": 154.0},
    "total_wall_s": 52 * 60.0,
    "max_rss_mb": 14.5 * 1024,
}

_START = re.compile(r"stage (\w+): start")
_DONE = re.compile(r"stage (\w+): done in ([\d.]+)s")


def tree_rss(proc: psutil.Process) -> int:
    """Resident bytes of ``proc`` and all its descendants (0 once it is gone)."""
    total = 0
    try:
        procs = [proc, *proc.children(recursive=True)]
    except psutil.Error:
        return 0
    for p in procs:
        try:
            total += p.memory_info().rss
        except psutil.Error:
            pass
    return total


def measure(cmd: list[str], interval: float, log_file: Path) -> dict:
    """Run ``cmd``; ``{"peak_rss_mb": {stage: MB}, "wall_s": {stage: s}, "total_wall_s", "max_rss_mb", "rc"}``."""
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "TQDM_DISABLE": "1"}
    t0 = time.time()
    child = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    proc = psutil.Process(child.pid)
    state = {"stage": "startup"}
    peaks: dict[str, int] = {}
    walls: dict[str, float] = {}
    cpu: dict[str, float] = {}
    cpu_at_start: dict[str, float] = {}

    def cpu_seconds() -> float:
        try:
            t = proc.cpu_times()
            return t.user + t.system + t.children_user + t.children_system
        except psutil.Error:
            return float("nan")

    done = threading.Event()

    def sample():
        while not done.is_set():
            rss = tree_rss(proc)
            stage = state["stage"]
            peaks[stage] = max(peaks.get(stage, 0), rss)
            time.sleep(interval)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    with open(log_file, "w") as log:
        for line in child.stdout:
            log.write(line)
            log.flush()
            if m := _START.search(line):
                state["stage"] = m.group(1)
                cpu_at_start[m.group(1)] = cpu_seconds()
            elif m := _DONE.search(line):
                walls[m.group(1)] = float(m.group(2))
                cpu[m.group(1)] = cpu_seconds() - cpu_at_start.get(m.group(1), float("nan"))
                state["stage"] = "between"
    rc = child.wait()
    done.set()
    sampler.join()
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"peak_rss_mb": {k: v / 2**20 for k, v in peaks.items()}, "wall_s": walls, "cpu_s": cpu,
            "total_wall_s": time.time() - t0, "max_rss_mb": usage.ru_maxrss / 1024,  # Linux: KiB
            "total_cpu_s": usage.ru_utime + usage.ru_stime, "rc": rc}


def table(now: dict, ref: dict, label: str) -> str:
    """Per stage: peak RSS (MB) and wall (s), this run beside the reference."""
    def cell(d, key, stage, fmt):
        v = d.get(key, {}).get(stage)
        return fmt.format(v) if v is not None else "-"

    rows = [f"| stage | peak RSS MB ({label}) | peak RSS MB ({ref.get('label', 'reference')}) "
            f"| wall s ({label}) | wall s ({ref.get('label', 'reference')}) | CPU s ({label}) |",
            "|---|---|---|---|---|---|"]
    stages = [s for s in ("startup", *STAGES) if s in now["peak_rss_mb"] or s in now["wall_s"]
              or s in ref.get("wall_s", {})]
    for s in stages:
        rows.append(f"| {s} | {cell(now, 'peak_rss_mb', s, '{:.0f}')} | {cell(ref, 'peak_rss_mb', s, '{:.0f}')} "
                    f"| {cell(now, 'wall_s', s, '{:.1f}')} | {cell(ref, 'wall_s', s, '{:.1f}')} "
                    f"| {cell(now, 'cpu_s', s, '{:.0f}')} |")
    fmt = lambda d, k, f: f.format(d[k]) if d.get(k) is not None else "-"  # noqa: E731
    rows.append(f"| whole run (max RSS, kernel) | {fmt(now, 'max_rss_mb', '{:.0f}')} | "
                f"{fmt(ref, 'max_rss_mb', '{:.0f}')} | {fmt(now, 'total_wall_s', '{:.1f}')} | "
                f"{fmt(ref, 'total_wall_s', '{:.1f}')} | {fmt(now, 'total_cpu_s', '{:.0f}')} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="configs/search.py", help="launcher --config (default: %(default)s)")
    ap.add_argument("--stages", default=None, help="launcher --stages (default: all)")
    ap.add_argument("--workdir", default=None, help="run directory (default: a fresh temporary one)")
    ap.add_argument("--reference", default=None, help="JSON written by --save of another run")
    ap.add_argument("--save", default=None, help="write this run's figures as JSON here")
    ap.add_argument("--label", default="this run", help="column label of this run")
    ap.add_argument("--interval", type=float, default=0.2, help="RSS sampling period, seconds")
    args, extra = ap.parse_known_args(argv)
    ref = json.loads(Path(args.reference).read_text()) if args.reference else REFERENCE
    with tempfile.TemporaryDirectory(prefix="run_memory_") as tmp:
        workdir = args.workdir or str(Path(tmp) / "run")
        cmd = [sys.executable, "-m", "seed_jax.launch", f"--config={args.config}", f"--workdir={workdir}", *extra]
        if args.stages:
            cmd.append(f"--stages={args.stages}")
        log_file = Path(args.save).with_suffix(".log") if args.save else Path(tmp) / "launch.log"
        print("running:", " ".join(cmd), f"(log: {log_file})", flush=True)
        now = measure(cmd, args.interval, log_file)
        if now["rc"] != 0:
            print(Path(log_file).read_text()[-4000:], file=sys.stderr)
            print(f"launcher exited {now['rc']}", file=sys.stderr)
    now["label"] = args.label
    now["command"] = " ".join(cmd)
    now["load_average"] = os.getloadavg()
    print(table(now, ref, args.label))
    print(f"load average at the end (1, 5, 15 min): {', '.join(f'{x:.1f}' for x in now['load_average'])}"
          " (wall times under load are slower than on an idle machine)")
    if args.save:
        Path(args.save).write_text(json.dumps(now, indent=1))
    return 0 if now["rc"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
