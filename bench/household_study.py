"""The household evidence study in one command.

    python bench/household_study.py [--preset study|ci|tiny|gpu|hard] [--out DIR] [--arms a,b|none] [--seeds 0,1,2]
                                    [--set key=value ...] [--shared STUDY_DIR] [--archive DIR] [--report | --check]

Stage 0 (BC policy) and stage 1 (scripted annotation + analyzer SFT) run once; then every arm
(GRPO = sft_grpo, SEED, SEED-static, SEED-shuffled, the oracle = SEED with the env's expert
skills, optional lambda_opd sweep arms) runs RL + evaluation from the same stage-1 checkpoint
for each seed, seed by seed (every arm of seed k finishes before seed k+1 starts, so a study
stopped part-way holds complete pairs). A finished piece is skipped when the command is re-run
with the same --out.
Writes results.md (printed at the end), results.json, curves.png, gates.png, audit.png and timings.json to
--out (default runs/household-PRESET).

--report runs nothing: it writes and prints the report of the finished pieces in --out (after
linking --shared's stages and restoring --archive's), e.g. of a study still running or stopped
part-way.

--check runs nothing: it validates every arm's run config for every seed (one line each) and
exits 2 at the first that does not validate, naming the arm and the key.
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


def _arms(text: str | None) -> list[str] | None:
    """--arms: None (the preset's arms), [] for 'none', else the comma-separated names."""
    return None if not text else [] if text == "none" else text.split(",")


def _config(args):
    from seed_jax.configs.household import get_config

    config = get_config(args.preset)
    for a in args.set:
        _set(config, a)
    return config


def check(args) -> int:
    """Validate each arm's config (`arm_config`) for each seed, without running anything."""
    from seed_jax.experiments.household.experiment import arm_config, arms_of
    from seed_jax.pipeline.methods import switches
    from seed_jax.pipeline.validate import ConfigValueError

    config = _config(args)
    arms = _arms(args.arms)
    arms = arms_of(config) if arms is None else arms
    seeds = [int(s) for s in args.seeds.split(",")] if args.seeds else list(config.study.seeds)
    for arm in arms:
        try:
            cs = [arm_config(config, arm, seed) for seed in seeds]
        except ConfigValueError as e:
            print(f"error: arm {arm}: {e}", file=sys.stderr)
            return 2
        c = cs[0]
        opd = f"lambda_opd {c.train.lambda_opd:g}" if switches(c).opd else "no OPD"
        print(f"{arm}: method {c.method}, analysis.analyzer {c.analysis.analyzer}, {opd}, "
              f"seeds {','.join(map(str, seeds))}: ok")
    print(f"{len(arms)} arms of preset {args.preset} validate")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    from seed_jax.configs.household import PRESETS

    ap.add_argument("--preset", default="study", choices=PRESETS)
    ap.add_argument("--out", default=None)
    ap.add_argument("--arms", default=None, help="comma-separated arms (default: config.study.methods + sweep); "
                                                 "'none': stage 0, stage 1 and the start evaluations only")
    ap.add_argument("--seeds", default=None, help="comma-separated seeds (default: config.study.seeds)")
    ap.add_argument("--set", action="append", default=[], help="config override, e.g. rl.num_updates=10")
    ap.add_argument("--shared", default=None,
                    help="a study directory whose stage 0 and stage 1 this run reuses (RL settings may differ)")
    ap.add_argument("--archive", default=None,
                    help="restore the finished pieces stored in DIR first, and store each piece there as it "
                         "finishes (experiments.household.archive), so a later session goes on from them")
    ap.add_argument("--quiet", action="store_true", help="no progress bars")
    ap.add_argument("--report", action="store_true",
                    help="run nothing: link --shared, restore --archive's pieces, then write and print the report of the "
                         "finished pieces in --out (a run killed part-way is left out)")
    ap.add_argument("--check", action="store_true",
                    help="only validate every arm's config for every seed (exit 2 naming the arm and key)")
    args = ap.parse_args(argv)
    if args.check:
        return check(args)

    out = Path(args.out or f"runs/household-{args.preset}")
    if args.report and args.archive is None and args.shared is None and not out.is_dir():
        print(f"--report: {out} is not a study directory (nothing to report; give --out, or --archive to restore)",
              file=sys.stderr)
        return 2
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

    from seed_jax.experiments.household.experiment import run_study, study_report

    config = _config(args)
    arms = _arms(args.arms)
    seeds = [int(s) for s in args.seeds.split(",")] if args.seeds else None
    t0 = time.time()
    if args.report:
        res = study_report(config, out, arms, seeds, shared=args.shared, archive=args.archive)
    else:
        res = run_study(config, out, arms, seeds, shared=args.shared, archive=args.archive)
    print(res["markdown"])
    print(f"study directory: {out.absolute()}  (wall {time.time() - t0:.0f} s this call)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
