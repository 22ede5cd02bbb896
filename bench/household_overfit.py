"""Can the RL stage improve the household policy at all? A sign check for the study.

Runs one arm of the study (default GRPO = ``sft_grpo``) from a finished study's stage-1
checkpoint on only ``--tasks`` fixed training tasks (every update: all of them, ``--group``
rollouts each), and prints the training-rollout success per update. With a correct policy
gradient the success on those tasks climbs; a flipped sign or a broken mask makes it fall.

    python bench/household_overfit.py --study runs/household-study [--out DIR] [--method sft_grpo]
                                      [--updates 15] [--tasks 4] [--group 8] [--lr 1e-4]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--study", required=True, help="output directory of bench/household_study.py (stage 1 done)")
    ap.add_argument("--out", default=None, help="default: <study>/overfit-<method>")
    ap.add_argument("--method", default="sft_grpo")
    ap.add_argument("--updates", type=int, default=15)
    ap.add_argument("--tasks", type=int, default=4)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--lr", type=float, default=None, help="default: the study preset's train.lr")
    ap.add_argument("--preset", default="study")
    args = ap.parse_args(argv)
    os.environ.setdefault("TQDM_DISABLE", "1")

    from seed_jax.configs.household import get_config
    from seed_jax.experiments.household.experiment import arm_config, copy_stage1
    from seed_jax.launch import run_pipeline

    study = Path(args.study)
    if not (study / "base" / "stages" / "sft.json").exists():
        raise SystemExit(f"{study}: no finished stage 1 (base/stages/sft.json); run bench/household_study.py first")
    c = get_config(args.preset)
    c.model.path = str(study / "stage0" / "policy")
    c.env.num_train_tasks = args.tasks
    c.rl.tasks_per_update = args.tasks
    c.rollout.group_size = args.group
    c.rl.num_updates = args.updates
    c.rl.eval_every = 0
    c.rl.checkpoint_every = args.updates
    c.rl.mini_batch_size = 64
    if args.lr is not None:
        c.train.lr = args.lr
    c = arm_config(c, args.method, 0)
    out = Path(args.out or study / f"overfit-{args.method}")
    copy_stage1(study / "base", out)
    run_pipeline(c, out, "rl")
    rows = [json.loads(line) for line in open(out / "metrics.jsonl") if line.strip()]
    succ = [r["rollout/success_rate"] for r in rows if "rollout/success_rate" in r]
    print(f"{args.method} on {args.tasks} fixed tasks x {args.group} rollouts, lr {c.train.lr:g}: "
          f"training-rollout success per update")
    print(" ".join(f"{s:.2f}" for s in succ))
    k = max(1, len(succ) // 3)
    print(f"first {k} updates {sum(succ[:k]) / k:.3f} -> last {k} updates {sum(succ[-k:]) / k:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
