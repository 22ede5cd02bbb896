"""Entry point: ``python -m seed_jax.launch --config=configs/search.py[:preset] [--workdir=DIR] [--stages=...]``.

Runs stage-1 collection, annotation and SFT, then SEED RL, then evaluation (docs/METHOD.md
§2, §3, §6, §7). Overrides: ``--config.rl.num_updates=10``. Re-running with the same workdir
resumes: finished stages are skipped and RL continues from its last checkpoint.
On several hosts (``JAX_COORDINATOR_ADDRESS`` etc. set, or a TPU pod) JAX's distributed runtime
is initialised first; each host runs its own environments for its share of the tasks and one
global mesh serves the train step.
"""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path

import jax
from absl import app, flags
from absl import logging as absl_logging
from ml_collections import config_flags

from seed_jax.pipeline import evaluate, rl, stage1
from seed_jax.pipeline.multihost import barrier
from seed_jax.pipeline.run import Run
from seed_jax.pipeline.validate import STAGES, validate
from seed_jax.train.mesh import make_mesh, maybe_initialize_distributed

_CONFIG = config_flags.DEFINE_config_file("config", None, "Benchmark config file, e.g. configs/search.py:local")
_WORKDIR = flags.DEFINE_string("workdir", None, "Run directory (default: runs/<env>-<preset>-<method>)")
_STAGES = flags.DEFINE_string("stages", None, "Comma-separated subset of collect,annotate,sft,rl,eval")

log = logging.getLogger("seed_jax")
HOST0_STAGES = ("collect", "annotate", "eval")  # small host-side stages; sft and rl use every host


def run_pipeline(config, workdir, stages=None, rl_callbacks=()) -> dict:
    """Validate, then run the requested stages in order; returns each stage's summary.

    ``rl_callbacks``: called with each RL update's `seed_jax.pipeline.rl.UpdateRecord`.
    """
    if stages is not None:
        config.stages = stages
    validate(config)
    jax.config.update("jax_cpu_collectives_implementation", "gloo")  # CPU multi-process collectives
    maybe_initialize_distributed()

    run = Run(config, workdir)
    mesh = make_mesh(None if config.mesh.data == -1 else config.mesh.data, config.mesh.fsdp, config.mesh.tensor)
    wanted = [s.strip() for s in config.stages.split(",") if s.strip()]
    actions = {"collect": lambda: stage1.collect(run), "annotate": lambda: stage1.annotate_stage(run),
               "sft": lambda: stage1.sft(run, mesh), "rl": lambda: rl.rl(run, mesh, rl_callbacks),
               "eval": lambda: evaluate.eval_stage(run)}
    out = {}
    for stage in STAGES:
        if stage not in wanted:
            continue
        prev = run.done(stage)
        if prev is not None and not (stage == "eval" and config.eval.checkpoint):
            log.info("stage %s already finished: %s", stage, prev)
            out[stage] = prev
            continue
        t0 = time.time()
        log.info("stage %s: start", stage)
        if stage in HOST0_STAGES and jax.process_index() != 0:
            summary = {"host": jax.process_index(), "skipped": "runs on host 0"}
        else:
            summary = actions[stage]()
        barrier(f"stage-{stage}")
        summary = {**summary, "wall_s": round(time.time() - t0, 1)}
        run.mark_done(stage, summary)
        log.info("stage %s: done in %.1fs: %s", stage, summary["wall_s"], summary)
        out[stage] = summary
    run.close()
    if jax.process_index() == 0:
        print(f"run directory: {run.workdir}")
        if (run.workdir / "eval" / "results.md").exists():
            print((run.workdir / "eval" / "results.md").read_text())
    return out


def main(argv):
    del argv
    absl_logging.set_verbosity(absl_logging.WARNING)  # orbax / jax chatter
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False
    config = _CONFIG.value
    if config is None:
        raise app.UsageError("--config is required, e.g. --config=configs/search.py")
    spec = flags.FLAGS["config"].config_filename if hasattr(flags.FLAGS["config"], "config_filename") else ""
    preset = spec.split(":", 1)[1] if ":" in str(spec) else "local"
    workdir = _WORKDIR.value or str(Path("runs") / f"{config.env.name}-{preset}-{config.method}")
    run_pipeline(config, workdir, _STAGES.value)


if __name__ == "__main__":
    app.run(main)
