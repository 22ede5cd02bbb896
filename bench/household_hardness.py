"""How hard must the household be for the stage-1 policy to fail? A scan for the hard regime.

    python bench/household_hardness.py --shared runs/household-study [--out runs/household-hardness]
        [--grid 5:0.3,8:0.3,8:1.0,11:1.0,15:1.0] [--set key=value ...]

Evaluates the finished stage-1 checkpoint of the study directory ``--shared`` (``base/sft/model``,
as every RL arm starts from it; restore it from an archive with ``tar xJf
docs/household_study4/archive/shared.tar.xz -C DIR``) on task sets of harder layouts, each grid
point ``R:C`` = ``env.num_receptacles=R`` (receptacles in the room, 4..15) and
``env.closed_share=C`` (the probability that the task object starts inside a closed
container, so the policy must open things to find it). Every point is the study preset's
evaluation (48 tasks per split, seen / unseen, T = 0.4, seed 0) with only those two keys
changed; ``--set`` changes others (``env.max_steps=...``). Prints success per split and per task
type, the mean episode length and the share of all-fail GRPO groups to expect (a group of G = 8
independent rollouts of a task all fail with probability (1 - p)^G; p the task type's success,
an estimate that ignores the rollout temperature), and writes ``hardness.json`` to ``--out``.

The hard regime of the study (`configs/household.py`, docs/EVIDENCE.md) is the mildest grid
point whose success is at most 15 % on both splits, fixed before any RL arm runs on it.
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import sys
import time
from pathlib import Path

from bench.household_study import _set

DEFAULT_GRID = "5:0.3,8:0.3,8:1.0,11:0.3,11:1.0,15:1.0"
GROUP = 8


def parse_grid(text: str) -> list[tuple[int, float]]:
    """'R:C,R:C' -> [(R, C), ...]; ValueError naming the bad point."""
    out = []
    for item in text.split(","):
        try:
            r, c = item.split(":")
            out.append((int(r), float(c)))
        except ValueError:
            raise ValueError(f"--grid point {item!r} is not RECEPTACLES:CLOSED_SHARE (e.g. 8:1.0)") from None
    return out


def all_fail_share(per_type: dict, group: int = GROUP) -> float:
    """Mean over task types of (1 - p_type)^G (types weighted by their task counts)."""
    n = sum(v["n"] for v in per_type.values())
    return sum(v["n"] * (1.0 - v["success_rate"]) ** group for v in per_type.values()) / n if n else float("nan")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shared", required=True, help="a study directory with a finished stage 1 (base/)")
    ap.add_argument("--out", default="runs/household-hardness")
    ap.add_argument("--grid", default=DEFAULT_GRID)
    ap.add_argument("--set", action="append", default=[], help="config override, e.g. env.max_steps=12")
    args = ap.parse_args(argv)
    shared = Path(args.shared).absolute()
    checkpoint = shared / "base" / "sft" / "model"
    try:
        grid = parse_grid(args.grid)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if not (shared / "base" / "stages" / "eval.json").exists() or not checkpoint.exists():
        print(f"error: --shared {shared}: no finished stage 1 there (base/stages/eval.json, base/sft/model)",
              file=sys.stderr)
        return 2

    from seed_jax.configs.household import get_config
    from seed_jax.envs.household.tasks import HouseholdConfig
    from seed_jax.launch import run_pipeline

    base = get_config("study")
    for a in args.set:
        _set(base, a)
    for r, c in grid:
        try:
            HouseholdConfig(num_receptacles=r, closed_share=c)
        except ValueError as e:
            print(f"error: --grid {r}:{c}: {e}", file=sys.stderr)
            return 2
    logging.getLogger("seed_jax").setLevel(logging.WARNING)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for r, c in grid:
        cfg = copy.deepcopy(base)
        cfg.unlock()
        cfg.env.num_receptacles, cfg.env.closed_share = r, c
        cfg.method, cfg.seed = "sft_grpo", 0
        cfg.model.path = str(shared / "stage0" / "policy")
        cfg.eval.checkpoint = str(checkpoint)
        wd = out / f"r{r}_c{c:g}"
        t0 = time.time()
        if not (wd / "stages" / "eval.json").exists():
            run_pipeline(cfg, wd, "eval")
        row = {"num_receptacles": r, "closed_share": c, "wall_s": round(time.time() - t0, 1), "splits": {}}
        for split in cfg.env.eval_splits:
            res = json.loads((wd / "eval" / f"checkpoint_{split}.json").read_text())["results"]
            row["splits"][split] = {"success": res["overall"]["success_rate"],
                                    "episode_length": res["overall"]["episode_length"],
                                    "per_type": {k: v["success_rate"] for k, v in res["per_type"].items()},
                                    "all_fail_groups": all_fail_share(res["per_type"])}
        rows.append(row)
        print(f"{r:>2} receptacles, closed {c:.1f}: " + "; ".join(
            f"{s} {v['success']:.3f} (len {v['episode_length']:.1f}, all-fail groups ~{v['all_fail_groups']:.2f}; "
            + ", ".join(f"{t} {p:.2f}" for t, p in sorted(v["per_type"].items())) + ")"
            for s, v in row["splits"].items()), flush=True)
    (out / "hardness.json").write_text(json.dumps({"shared": str(shared), "set": args.set, "rows": rows}, indent=1))
    hard = [row for row in rows if all(v["success"] <= 0.15 for v in row["splits"].values())]
    print("hard regime (success <= 0.15 on every split): "
          + (f"{hard[0]['num_receptacles']} receptacles, closed share {hard[0]['closed_share']:g}" if hard
             else "none of the grid"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
