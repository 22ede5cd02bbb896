"""The household evidence study in one command.

    python bench/household_study.py [--preset study|ci|tiny|gpu] [--out DIR] [--arms a,b] [--seeds 0,1,2]
                                    [--set key=value ...] [--shared STUDY_DIR] [--archive DIR]

Stage 0 (BC policy) and stage 1 (scripted annotation + analyzer SFT) run once; then every arm
(GRPO = sft_grpo, SEED, SEED-static, SEED-shuffled, optional lambda_opd sweep arms) runs RL +
evaluation from the same stage-1 checkpoint for each seed. A finished piece is skipped when
the command is re-run with the same --out. Writes results.md (printed at the end),
results.json, curves.png, gates.png and timings.json to --out (default runs/household-PRESET).
"""

from __future__ import annotations

import argparse
import ast
import logging
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _set(config, assignment: str) -> None:
    key, _, text = assignment.partition("=")
    if not _:
        raise SystemExit(f"--set expects key=value, got {assignment!r}")
    node = config
    *parents, last = key.split(".")
    for p in parents:
        node = node[p]
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        value = text
    node[last] = value


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="study", choices=("study", "ci", "tiny", "gpu"))
    ap.add_argument("--out", default=None)
    ap.add_argument("--arms", default=None, help="comma-separated arms (default: config.study.methods + sweep)")
    ap.add_argument("--seeds", default=None, help="comma-separated seeds (default: config.study.seeds)")
    ap.add_argument("--set", action="append", default=[], help="config override, e.g. rl.num_updates=10")
    ap.add_argument("--shared", default=None,
                    help="a study directory whose stage 0 and stage 1 this run reuses (RL settings may differ)")
    ap.add_argument("--archive", default=None,
                    help="restore the finished pieces stored in DIR first, and store each piece there as it "
                         "finishes (experiments.household.archive), so a later session goes on from them")
    ap.add_argument("--quiet", action="store_true", help="no progress bars")
    args = ap.parse_args(argv)

    if args.quiet:
        os.environ.setdefault("TQDM_DISABLE", "1")
    from absl import logging as absl_logging

    absl_logging.set_verbosity(absl_logging.WARNING)
    log = logging.getLogger("seed_jax")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False

    from seed_jax.configs.household import get_config
    from seed_jax.experiments.household.experiment import run_study

    config = get_config(args.preset)
    for a in args.set:
        _set(config, a)
    out = Path(args.out or f"runs/household-{args.preset}")
    arms = args.arms.split(",") if args.arms else None
    seeds = [int(s) for s in args.seeds.split(",")] if args.seeds else None
    t0 = time.time()
    res = run_study(config, out, arms, seeds, shared=args.shared, archive=args.archive)
    print(res["markdown"])
    print(f"study directory: {out.absolute()}  (wall {time.time() - t0:.0f} s this call)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
