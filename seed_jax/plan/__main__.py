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

_CONFIG = config_flags.DEFINE_config_file("config", None, "Run config, e.g. configs/alfworld.py:paper")
_TARGET = flags.DEFINE_string("target", "native", "tpu:<topology> | gpu:<kind>x<n> | cpu:<n> | native")
_JSON = flags.DEFINE_string("json", None, "Also write the plan's figures to this JSON file")
_PROGRAMS = flags.DEFINE_string("programs", None, "Comma-separated subset of the programs (default: all)")


def fail(msg: str) -> None:
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(2)


def main(argv):
    if len(argv) > 1:
        fail(f"unexpected arguments {argv[1:]} (flags are --name=value)")
    import jax

    spec = _TARGET.value
    if spec.startswith(("gpu:", "cpu:")):
        jax.config.update("jax_platforms", "cpu")  # fake devices: no accelerator backend to start
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


def parse_flags(argv: list[str]) -> list[str]:
    """absl's flag parsing, with a command-line error as one line on stderr and exit 2."""
    try:
        return flags.FLAGS(argv)
    except (flags.Error, AttributeError, KeyError) as e:
        fail(" ".join(str(e).split()))


if __name__ == "__main__":
    app.run(main, flags_parser=parse_flags)
