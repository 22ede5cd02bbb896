"""How accurate are the skills a stage-1 checkpoint writes about its own episodes?

    python bench/household_analyzer.py --shared runs/household-study[,OTHER_STUDY ...]
        [--out runs/household-analyzer] [--tasks 32] [--group 4] [--preset study] [--set key=value ...]

For each study directory of ``--shared`` (its finished stage-1 checkpoint ``base/sft/model``,
the policy every RL arm starts from), the checkpoint plays ``--tasks`` training tasks ``--group``
times each at the RL rollout temperature and then writes, greedily, the hindsight skill of each
of its own episodes: the study's stage 1 (collect, annotate) run with ``stage1.analyzer = self``
and the checkpoint as the policy, i.e. what the SEED(self) arm's first update does. The same
tasks and seeds for every checkpoint. A skill is *accurate* when it names the receptacle where
the task object started (`experiments.household.audit.names_start_place`), as every expert
analysis does; the expert analysis is the reference (1.00 by construction, checked in the ci
study test). Prints, per checkpoint, success and the shares of episodes whose skill parsed and is
accurate (all, won, lost episodes), the share of episodes that showed the start place
(`envs.household.start_place_seen`: only about those can a skill copy it) and the accuracy on
them (reading accuracy), beside the accuracy of a constant guess (naming, every time, the start
place most of these episodes share: what a skill that does not read its episode scores), and
writes ``analyzer.json`` to ``--out``. A checkpoint's
run directory in ``--out`` that has finished is read again, not rerun (a new ``--out`` for other
``--set`` values).

Issue 35's goal for "the analyzer the teacher needs": >= 80 % accurate at the RL start.
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


def fmt_share(part: int, whole: int) -> str:
    return f"{part / whole:.3f} ({part}/{whole})" if whole else "-"


def main(argv=None) -> int:
    from seed_jax.configs.household import PRESETS

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shared", required=True, help="comma-separated study directories with a finished stage 1")
    ap.add_argument("--out", default="runs/household-analyzer")
    ap.add_argument("--tasks", type=int, default=32, help="training tasks (the same for every checkpoint)")
    ap.add_argument("--group", type=int, default=4, help="episodes per task")
    ap.add_argument("--preset", default="study", choices=PRESETS, help="the household preset the studies were run with")
    ap.add_argument("--set", action="append", default=[], help="config override, e.g. env.num_receptacles=8")
    args = ap.parse_args(argv)
    given = [s for s in args.shared.split(",") if s]  # recorded as given: no machine's absolute path
    studies = [Path(s).resolve() for s in given]
    if args.tasks < 1 or args.group < 1:
        print(f"error: --tasks ({args.tasks}) and --group ({args.group}) must be >= 1", file=sys.stderr)
        return 2
    for s in studies:
        if not (s / "base" / "stages" / "eval.json").exists() or not (s / "base" / "sft" / "model").exists():
            print(f"error: --shared {s}: no finished stage 1 there (base/stages/eval.json, base/sft/model)",
                  file=sys.stderr)
            return 2

    from seed_jax.configs.household import get_config
    from seed_jax.experiments.household.audit import analyzer_accuracy
    from seed_jax.launch import run_pipeline
    from seed_jax.pipeline.environments import make_benchmark
    from seed_jax.pipeline.validate import ConfigValueError, validate

    base = get_config(args.preset)
    for a in args.set:
        _set(base, a)
    base.unlock()
    base.method, base.seed = "seed", 0
    base.stage1.update(analyzer="self", num_tasks=args.tasks, group_size=args.group,
                       temperature=base.rollout.temperature)
    base.model.path = str(studies[0] / "base" / "sft" / "model")
    try:
        validate(base)
    except ConfigValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    logging.getLogger("seed_jax").setLevel(logging.WARNING)
    bench = make_benchmark(base.env)
    tasks_by_id = {t["task_id"]: t for t in bench.tasks(bench.train_split)}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    print(f"{args.tasks} training tasks x {args.group} episodes at T={base.rollout.temperature:g}; "
          "accurate = the skill names the object's start place (expert analysis: 1.000)")
    print("| checkpoint | success | parsed | accurate | accurate (won) | accurate (lost) | episode showed the place "
          "| accurate when shown | constant guess | wall s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for i, study in enumerate(studies):
        cfg = copy.deepcopy(base)
        cfg.model.path = str(study / "base" / "sft" / "model")
        wd = out / f"{i}-{study.name}-{args.tasks}x{args.group}"  # reused when it has finished
        t0 = time.time()
        if not (wd / "stages" / "annotate.json").exists():
            run_pipeline(cfg, wd, "collect,annotate")
        acc = analyzer_accuracy(wd, tasks_by_id)
        row = {"study": given[i], "accuracy": acc, "wall_s": round(time.time() - t0, 1),
               "success": acc["won"]["trajectories"] / max(acc["all"]["trajectories"], 1)}
        rows.append(row)
        a, w, lo, sn = acc["all"], acc["won"], acc["lost"], acc["seen"]
        print(f"| {given[i]} | {row['success']:.3f} | {fmt_share(a['parsed'], a['trajectories'])} | "
              f"{fmt_share(a['names_place'], a['trajectories'])} | {fmt_share(w['names_place'], w['trajectories'])} | "
              f"{fmt_share(lo['names_place'], lo['trajectories'])} | {fmt_share(sn['trajectories'], a['trajectories'])} | "
              f"{fmt_share(sn['names_place'], sn['trajectories'])} | {acc['constant_guess']['place']}: "
              f"{fmt_share(acc['constant_guess']['names_place'], a['trajectories'])} | {row['wall_s']:.0f} |", flush=True)
    (out / "analyzer.json").write_text(json.dumps({"tasks": args.tasks, "group": args.group, "set": args.set,
                                                   "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
