"""Run SEED end to end: ``seed-jax train --config=<env>[:preset] [flags]`` (the same as
``python -m seed_jax.launch ...``).

Stages, in order (``--stages`` picks a subset): collect (base-policy rollouts), annotate (skills),
sft (the policy learns to write skills), rl (SEED RL), eval (held-out splits); docs/METHOD.md
§2, §3, §6, §7 say what each computes.

Configs (``--config=``): ``search``, ``alfworld``, ``webshop`` by name from any directory
(``--config=search:paper``), or a file path (``configs/search.py:paper``,
`seed_jax.config_names`); every key, its default and meaning is in configs/base.py and the
env's file. Presets (``:preset``):
  local   (default) the embedded SmolLM2-135M on a CPU, no network: the method end to end, small
  paper   the paper's recipe (docs/METHOD.md §6); needs --config.model.path=<HF model dir>,
          a stage-1 annotator (--config.stage1.openai_base_url=URL --config.stage1.openai_model=NAME,
          or --config.stage1.analyzer=self, a deviation) and, for search, a retriever
          (python -m seed_jax.envs.search.server)
  tiny    a tiny random model: the whole pipeline in about a minute (tests, smoke runs)
Methods (``--config.method=``): {methods}; docs/METHOD.md §7 and seed_jax/pipeline/methods.py
say what each switches.

Overrides: ``--config.rl.num_updates=10 --config.train.lr=1e-5``. The default run directory is
``runs/<env>-<preset>-<method>``, plus a short hash of the overrides that change results.
Relaunching on a run directory resumes it: finished stages are skipped, RL continues from its
last checkpoint, and a raised ``rl.num_updates`` continues RL (and redoes eval). A config that
differs from the directory's config.json in keys that change results is refused (exit 2),
naming them: use a new ``--workdir`` or ``--force``. ``--dry_run`` prints the resolved config and
what would run. Before the first stage (and with ``--dry_run``, after printing) every program of
the run is compiled ahead of time for the run's devices (``--plan``, `seed_jax.plan`); a program
that does not fit stops the run in seconds, naming it. Config and input errors exit 2 with one line.

On several hosts (``JAX_COORDINATOR_ADDRESS`` etc. set, or a TPU pod) JAX's distributed runtime
is initialised first; each host runs its own environments for its share of the tasks and one
global mesh serves the train step.

SIGTERM (a preemption notice) on any host: every host stops at the same boundary, the end of
the RL update under way (saved first), of the chunk of collect / eval tasks under way (its
episodes saved, ``run.rollout_chunk_episodes`` per host: the relaunch rolls out only the tasks
left) or of the stage under way, prints ``preempted ...; relaunch to resume`` and exits 0
(`seed_jax.train.preemption`).
"""

from __future__ import annotations

import logging
import re
import sys
import time

import jax
import ml_collections
from absl import app, flags
from absl import logging as absl_logging
from ml_collections import config_flags

from seed_jax.config_names import ConfigNameError, resolve_config_args
from seed_jax.paths import run_path
from seed_jax.pipeline import evaluate, rl, stage1
from seed_jax.pipeline.auto_sizes import resolve_without_plan
from seed_jax.pipeline.environments import describe_data
from seed_jax.pipeline.methods import METHODS
from seed_jax.pipeline.multihost import barrier
from seed_jax.pipeline.run import (  # noqa: F401  (default_workdir, WORKDIR_NAME_NEUTRAL: the launch's names too)
    CONFIG_HISTORY,
    WORKDIR_NAME_NEUTRAL,
    Run,
    check_relaunch,
    config_preset,
    default_workdir,
    record_config_change,
    stage_plan,
    write_config,
)
from seed_jax.pipeline.runtime import drop_compiled, setup_xla
from seed_jax.pipeline.summary import describe_run
from seed_jax.pipeline.validate import (
    STAGES,
    ConfigValueError,
    check_annotator,
    check_inputs,
    check_mesh,
    check_retriever,
    validate,
)
from seed_jax.procmem import limit_malloc_arenas, peak_rss_mb, release_free_memory
from seed_jax.train.mesh import batch_divisor, interconnect_devices, make_mesh, maybe_initialize_distributed
from seed_jax.train.preemption import Preempted, install_sigterm_flag, preemption_requested
from seed_jax.watchdog import beat, watch_caller

__doc__ = __doc__.replace("{methods}", ", ".join(METHODS))

_CONFIG = config_flags.DEFINE_config_file("config", None, "Run config: NAME[:PRESET] (search:local, alfworld:paper; "
                                           "from any directory) or a file, e.g. configs/search.py:local")
_WORKDIR = flags.DEFINE_string("workdir", None, "Run directory (default: runs/<env>-<preset>-<method>[-<hash>])")
_STAGES = flags.DEFINE_string("stages", None, "Comma-separated subset of collect,annotate,sft,rl,eval")
_FORCE = flags.DEFINE_bool("force", False, "Relaunch on a run directory even where config.json differs in keys "
                           "that change results (the old config is kept in config.history.jsonl, the change logged "
                           "in metrics.jsonl and summary.md; finished stages stay finished)")
_DRY_RUN = flags.DEFINE_bool("dry_run", False, "Print the resolved config and the stages that would run; "
                             "load no model, run nothing")
_PLAN = flags.DEFINE_string("plan", "auto", "Compile every program for the run's devices before the first stage and "
                            "stop when one does not fit: auto (on TPU / GPU devices), yes, no; or, with --dry_run, a "
                            "target to plan for instead (tpu:v5e:4x4, gpu:h100x8, cpu:8; see python -m seed_jax.plan)")

log = logging.getLogger("seed_jax")
ENV_STAGES = ("collect", "rl", "eval")  # the stages that step environments (a retriever must answer)


def run_pipeline(config, workdir, stages=None, rl_callbacks=(), *, preset: str | None = None,
                 force: bool = False, dry_run: bool = False, plan: str = "no") -> dict:
    """Check, then run the requested stages in order; returns each stage's summary.

    Before any work: `validate` (impossible values), `check_inputs` (``model.path`` for the
    ``paper`` preset, every named file or directory exists), `check_relaunch` (the run directory's
    config.json; ``force`` accepts keys that change results, the replaced config kept in
    ``config.history.jsonl`` and the change logged as a metrics event and in summary.md), when a
    stage that steps environments will run, the HTTP retriever, and when annotate will run with
    ``stage1.analyzer = openai``, one request to the annotator endpoint (`check_annotator`); each
    raises `ConfigValueError`. ``dry_run``: print the resolved config and the stage plan, and
    return the plan (``{stage: {"plan", "why"}}``). ``rl_callbacks``: called with each RL update's `seed_jax.pipeline.rl.UpdateRecord`. ``plan``
    (`check_plan`): compile every program for the run's devices (``"yes"``, ``"auto"``: on TPU / GPU)
    or, with ``dry_run``, for a target (``"gpu:h100x8"``) and raise `ConfigValueError` naming the
    first program that does not fit.
    """
    if stages is not None:
        config.stages = stages
    validate(config)
    check_inputs(config, preset)
    data = describe_data(config.env)  # the WebShop generated catalog is named as such (summary, report too)
    workdir = run_path(workdir)  # a gs:// workdir keeps its scheme
    relaunch = check_relaunch(config, workdir, force)
    stage_list = stage_plan(config, workdir, relaunch.old)
    busy = [p.stage for p in stage_list if p.action != "skip"]
    if config.env.name == "search" and config.env.retriever == "http" and set(busy) & set(ENV_STAGES):
        check_retriever(config.env.retriever_url)
    if "annotate" in busy:  # the external annotator answers one request before collection starts
        check_annotator(config)
    if dry_run:
        print(config)
        if data:
            print(f"data: {data}")
        print(f"run directory: {workdir}" + ("" if relaunch.old else " (new)"))
        if relaunch.changed:
            print(f"changed since config.json ({'forced' if relaunch.forced else 'allowed'}): "
                  f"{', '.join(relaunch.changed)}")
        for p in stage_list:
            print(f"  {p.stage:9s} {p.action:7s} {p.why}")
        check_plan(config, plan, dry_run=True)
        return {p.stage: {"plan": p.action, "why": p.why} for p in stage_list}
    setup_xla(config, workdir)  # flags and compilation cache: before any JAX work
    jax.config.update("jax_cpu_collectives_implementation", "gloo")  # CPU multi-process collectives
    maybe_initialize_distributed()
    # after the distributed start (it asks jax.process_index(), which starts the backend):
    change = record_config_change(relaunch, config, workdir)  # config.history.jsonl keeps the old one
    if change:
        log.warning("%s (%s keeps the config it replaced; config.json updated)", change[1], CONFIG_HISTORY)
    watch_caller(config.run.stall_timeout_s)  # a stall of this host ends it (exit 3) while run_pipeline runs
    validate(config, hosts=jax.process_count())  # the host count is known once distributed is up
    check_mesh(config, jax.device_count(), jax.process_count(), interconnect_devices(jax.devices(), jax.process_count()))
    if data:  # after the last check: a refused launch prints one line
        log.info("data: %s", data)

    run = Run(config, workdir)
    if change:
        run.metrics.event(*change)
    write_config(config, workdir)
    if busy:
        check_plan(config, plan)
    mesh = make_mesh(None if config.mesh.data == -1 else config.mesh.data, config.mesh.fsdp, config.mesh.tensor)
    for line in resolve_without_plan(config, batch_divisor(mesh), jax.process_count(),
                                     jax.local_device_count() // config.sampler.tensor_parallel):
        log.info(line)  # sizes left at -1 that no plan chose (CPU, --plan=no)
    actions = {"collect": lambda: stage1.collect(run, mesh), "annotate": lambda: stage1.annotate_stage(run, mesh),
               "sft": lambda: stage1.sft(run, mesh), "rl": lambda: rl.rl(run, mesh, rl_callbacks),
               "eval": lambda: evaluate.eval_stage(run, mesh)}
    out = {}
    for item in stage_list:
        stage = item.stage
        if item.action == "skip":
            out[stage] = run.done(stage)
            log.info("stage %s already finished: %s", stage, out[stage])
            continue
        for later in STAGES[STAGES.index(stage) + 1:]:
            run.clear_done(later)
        t0 = time.time()
        log.info("stage %s: start (%s)", stage, item.why)
        beat("stage", stage)
        summary = actions[stage]()  # every stage on every host (each takes its share of the work)
        if config.low_memory:
            drop_compiled()
        release_free_memory()
        barrier(f"stage-{stage}")
        summary = {**summary, "wall_s": round(time.time() - t0, 1), "peak_rss_mb": round(peak_rss_mb(), 1)}
        if stage == "rl":
            summary["num_updates"] = config.rl.num_updates  # a raised rl.num_updates reopens the stage
        run.mark_done(stage, summary)
        log.info("stage %s: done in %.1fs: %s", stage, summary["wall_s"], summary)
        out[stage] = summary
        if item is not stage_list[-1] and preemption_requested():  # any host told to stop: all stop here
            raise Preempted(stage=stage)
    run.close()
    if jax.process_index() == 0:
        if (run.workdir / "eval" / "results.md").exists():
            print((run.workdir / "eval" / "results.md").read_text())
        text = describe_run(config, out, run.workdir, preset)
        (run.workdir / "summary.md").write_text(text + "\n")
        print(text)
    return out


def check_plan(config, plan: str, dry_run: bool = False) -> None:
    """Plan the run's programs (`seed_jax.plan`) when ``plan`` asks for it; `ConfigValueError` naming
    the first program that does not fit. ``plan``: ``no``; ``yes``; ``auto`` (yes when the devices are
    TPUs or GPUs); with ``dry_run`` also a target spelling, planned in this process (fake CPU devices
    need a process whose JAX backend has not started). The config is checked against the target's
    mesh first (`check_mesh`), before anything compiles. ``rollout.wave_rows``,
    ``train.micro_batch_size`` and ``analysis.batch_size`` at -1: the run takes the plan's choice
    (`seed_jax.plan.analysis.choose_largest`)."""
    from seed_jax.plan.analysis import CHOICE_KEYS, format_plan, misfit_message, plan_run, target_hosts
    from seed_jax.plan.programs import PlanConfigError
    from seed_jax.plan.targets import TargetError, native_target, parse_target

    if plan == "no" or (plan == "auto" and jax.default_backend() == "cpu"):
        return
    try:
        if plan in ("yes", "auto"):
            target = native_target()
        elif not dry_run:
            raise ConfigValueError(f"--plan={plan}: a target other than this machine's devices needs --dry_run")
        else:
            if plan.startswith(("gpu:", "cpu:")):
                jax.config.update("jax_platforms", "cpu")
            target = parse_target(plan)
        hosts = target_hosts(target)
        check_mesh(config, target.num_devices, hosts, interconnect_devices(target.devices, hosts))
        result = plan_run(config, target, progress=lambda n: log.info("plan: compiling %s for %s", n, target.spec),
                          stop_at_misfit=True)
    except (TargetError, PlanConfigError) as e:
        raise ConfigValueError(str(e)) from None
    if jax.process_index() == 0:
        print(format_plan(result))
    why = misfit_message(result)
    if why:
        raise ConfigValueError(why)
    for field, key in CHOICE_KEYS.items():
        choice = getattr(result, field)
        if choice is not None and not dry_run:  # the run samples / trains in the plan's sizes
            section, leaf = key.split(".")
            config[section][leaf] = choice.rows
            log.info("%s = -1: the plan's choice is %d rows", key, choice.rows)


def flag_error_message(err: BaseException) -> str:
    """One line for an error of the command line (an unknown or mistyped key, a bad preset)."""
    text = str(err)
    if isinstance(err, (AttributeError, KeyError)):  # ml_collections: an unknown --config.a.b key
        text = text.encode().decode("unicode_escape").replace("\\'", "'")
        m = re.search(r"'([\w.]+)'.*Did you mean \"(\w+)\"", text, re.S)
        if m:
            return f"unknown key {_override_key(m.group(1))}; did you mean {m.group(2)}?"
        m = re.search(r"'([\w.]+)'", text)
        return f"unknown key {_override_key(m.group(1)) if m else text.strip()}"
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    head = re.sub(r"^flag ", "", lines[0]).replace(" Error whilst parsing config file:", "") if lines else ""
    # an exception inside the config file: its last line says what was wrong
    error_lines = [ln for ln in lines if re.match(r"^\w*(Error|Exception): ", ln)]
    if error_lines:
        return f"{head} {error_lines[-1].split(': ', 1)[1]}"
    return " ".join([head, *lines[1:]])


def _override_key(name: str) -> str:
    """``config.a.b`` for the ``--config.a.b.c`` argument of sys.argv naming ``name``, or ``name``."""
    for arg in sys.argv[1:]:
        parts = arg.lstrip("-").split("=", 1)[0].split(".")
        if parts[0] == "config" and name in parts[1:]:
            return ".".join(parts[: parts.index(name, 1) + 1])
    return name


HELP_FLAGS = ("-h", "-?", "--help", "-help", "--helpshort", "--helpfull", "--helpxml")


def parse_flags(argv: list[str]) -> list[str]:
    """absl's flag parsing, with a command-line error as one line on stderr and exit 2; a help flag
    prints the usage on stdout and exits 0 (absl's own help exits 1)."""
    if any(a in HELP_FLAGS for a in argv[1:]):
        app.usage(shorthelp="--helpfull" not in argv[1:], writeto_stdout=True, exitcode=0)
    try:
        return flags.FLAGS(resolve_config_args(argv))  # --config=search:paper from anywhere
    except ConfigNameError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    except (flags.Error, AttributeError, KeyError) as e:
        print(f"error: {flag_error_message(e)}", file=sys.stderr)
        sys.exit(2)


def main(argv):
    limit_malloc_arenas()  # before JAX's thread pools exist: freed buffers stay in fewer arenas
    if len(argv) > 1:
        print(f"error: unexpected arguments {argv[1:]} (flags are --name=value)", file=sys.stderr)
        sys.exit(2)
    absl_logging.set_verbosity(absl_logging.WARNING)  # orbax / jax chatter
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False
    config = _CONFIG.value
    if config is None:
        print("error: --config is required, e.g. --config=search:local (see --help)", file=sys.stderr)
        sys.exit(2)
    spec = str(getattr(flags.FLAGS["config"], "config_filename", "") or "")
    if not isinstance(config, ml_collections.ConfigDict):  # the config file could not be read
        why = " ".join(str(getattr(config, "_error", "unreadable config")).split())
        print(f"error: --config={spec}: {why}", file=sys.stderr)
        sys.exit(2)
    preset = config_preset(spec)
    workdir = _WORKDIR.value or str(default_workdir(config, preset, config_flags.get_override_values(
        flags.FLAGS["config"])))
    install_sigterm_flag()  # one process: SIGTERM stops at the next boundary (several: JAX's notifier)
    try:
        run_pipeline(config, workdir, _STAGES.value, preset=preset, force=_FORCE.value, dry_run=_DRY_RUN.value,
                     plan=_PLAN.value)
    except ConfigValueError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    except Preempted as e:  # the state is saved: a relaunch resumes; exit 0 as a finished run would
        log.warning("%s", e)
        print(e, flush=True)


if __name__ == "__main__":
    app.run(main, flags_parser=parse_flags)
