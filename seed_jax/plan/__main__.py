"""``python -m seed_jax.plan --config=<file>[:preset] [--config.key=value ...] --target=<target> [--json=FILE]``.

Targets: ``tpu:<topology>``, ``gpu:<kind>x<n>``, ``cpu:<n>``, ``native`` (`seed_jax.plan.targets`).
``--programs=train_step,rollout``: a subset (names or their prefixes, e.g. ``rollout`` for its
prefill and decode). Exit status: 0 when every program fits with 5% headroom, 1 when one does
not, 2 (one line on stderr) for a bad target or config.
"""

from __future__ import annotations

import sys

from absl import app, flags
from ml_collections import config_flags

_CONFIG = config_flags.DEFINE_config_file("config", None, "Run config: NAME[:PRESET] (alfworld:paper) or a file, "
                                           "e.g. configs/alfworld.py:paper")
_TARGET = flags.DEFINE_string("target", "native", "tpu:<topology> | gpu:<kind>x<n> | cpu:<n> | native")
_JSON = flags.DEFINE_string("json", None, "Also write the plan's figures to this JSON file")
_PROGRAMS = flags.DEFINE_string("programs", None, "Comma-separated subset of the programs (default: all)")
_WARM = flags.DEFINE_bool("warm", False, "Fill the run's persistent compilation cache with its programs for this "
                          "machine's devices, instead of planning")
_WORKDIR = flags.DEFINE_string("workdir", None, "--warm: the run directory whose xla_cache to fill (default: the "
                               "launch's, runs/<env>-<preset>-<method>[-<hash>])")


def fail(msg: str) -> None:
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(2)


def main(argv):
    if len(argv) > 1:
        fail(f"unexpected arguments {argv[1:]} (flags are --name=value)")
    import jax

    spec = _TARGET.value
    if _WARM.value and spec.startswith("tpu:"):
        fail(f"--warm compiles for the devices the run will use, and --target={spec} is a compile-only topology: "
             f"run --warm on the slice itself (--target=native, the default)")
    if spec.startswith(("gpu:", "cpu:")):
        jax.config.update("jax_platforms", "cpu")  # fake devices: no accelerator backend to start
    if _WARM.value:
        warm(spec)
        return
    from seed_jax.train.xla_setup import configure

    # The run's own XLA flags, set before the backend starts, so the plan compiles what the run
    # would: a CPU run's (cpu:), or libtpu's (tpu:). gpu: targets compile with XLA:CPU, which
    # the GPU flags do not steer.
    if spec.startswith("cpu:"):
        configure(None, gpu=False, tpu=False)
    elif spec.startswith("tpu:"):
        configure(None, gpu=False, tpu=True)
    from seed_jax.pipeline.validate import ConfigValueError, validate
    from seed_jax.plan.analysis import format_plan, plan_run, write_json
    from seed_jax.plan.programs import PROGRAM_NAMES, PlanConfigError
    from seed_jax.plan.targets import TargetError, parse_target
    from seed_jax.train.config import ConfigError

    config = _CONFIG.value
    if config is None:
        fail("--config is required, e.g. --config=configs/alfworld.py:paper")
    names = None
    if _PROGRAMS.value:
        names = {n.strip() for n in _PROGRAMS.value.split(",") if n.strip()}
        known = set(PROGRAM_NAMES) | {n.rsplit("_", 1)[0] for n in PROGRAM_NAMES}
        bad = sorted(names - known)
        if bad:
            fail(f"--programs: unknown {bad}; programs: {', '.join(PROGRAM_NAMES)}")
    try:
        validate(config)
        target = parse_target(spec)
        plan = plan_run(config, target, names, progress=lambda n: print(f"compiling {n} ...", file=sys.stderr,
                                                                        flush=True))
    except (TargetError, PlanConfigError, ConfigValueError, ConfigError) as e:
        fail(str(e))
    print(format_plan(plan))
    if _JSON.value:
        write_json(plan, _JSON.value)
    sys.exit(0 if plan.fits else 1)


def warm(spec: str) -> None:
    """``--warm``: the run's XLA setup (`setup_xla`: flags and cache directory, before JAX starts a
    backend), then `warm_run`; prints what it compiled, how long it took and what it did not warm."""
    import jax  # here, as in main: after the target's platform is chosen
    from ml_collections import config_flags as cf

    from seed_jax.pipeline.run import config_preset, default_workdir
    from seed_jax.pipeline.runtime import setup_xla
    from seed_jax.pipeline.validate import ConfigValueError, validate
    from seed_jax.plan.programs import PlanConfigError
    from seed_jax.plan.targets import TargetError, parse_target
    from seed_jax.plan.warm import format_warm, warm_run
    from seed_jax.train.config import ConfigError
    from seed_jax.train.mesh import maybe_initialize_distributed

    config = _CONFIG.value
    if config is None:
        fail("--config is required, e.g. --config=configs/alfworld.py:paper")
    workdir = _WORKDIR.value or str(default_workdir(
        config, config_preset(str(getattr(flags.FLAGS["config"], "config_filename", "") or "")),
        cf.get_override_values(flags.FLAGS["config"])))
    try:
        validate(config)
        if config.xla.cache_dir == "off":
            fail("--warm: config.xla.cache_dir is 'off': the run keeps no compilation cache to fill")
        done = setup_xla(config, workdir)  # the run's flags and cache: a cache hit needs the same XLA flags
        jax.config.update("jax_cpu_collectives_implementation", "gloo")  # as the launch sets it
        if spec == "native":
            maybe_initialize_distributed()  # a pod: every host warms together, as they launch
        target = parse_target(spec)
        report = warm_run(config, target, progress=lambda n: print(f"compiling {n} ...", file=sys.stderr, flush=True))
    except (TargetError, PlanConfigError, ConfigValueError, ConfigError) as e:
        fail(str(e))
    print(format_warm(report, done.get("jax_compilation_cache_dir", "(no cache: xla.cache_dir = off)")))


def parse_flags(argv: list[str]) -> list[str]:
    """absl's flag parsing, with a command-line error as one line on stderr and exit 2."""
    from seed_jax.config_names import ConfigNameError, resolve_config_args

    try:
        return flags.FLAGS(resolve_config_args(argv))  # --config=alfworld:paper from anywhere
    except ConfigNameError as e:
        fail(str(e))
    except (flags.Error, AttributeError, KeyError) as e:
        fail(" ".join(str(e).split()))


if __name__ == "__main__":
    app.run(main, flags_parser=parse_flags)
