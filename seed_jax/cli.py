"""The ``seed-jax`` command: one name for the project's entry points.

    seed-jax train --config=search:local [--dry_run] [--config.key=value ...]
    seed-jax plan --config=alfworld:paper --config.model.path=DIR --target=tpu:v5e:4x4
    seed-jax export --workdir=runs/search-local-seed --out=DIR
    seed-jax chat --workdir=runs/search-local-seed
    seed-jax report runs/search-local-seed
    seed-jax serve-retriever --corpus corpus.jsonl --port 8000

Each subcommand runs the module of the ``python -m`` form (the table `COMMANDS`) as ``__main__``
with the rest of the command line, so flags, ``--help``, output and exit status are that
module's; the ``python -m`` forms keep working. ``--config`` takes a config name and preset from
any directory (``search:paper``) or a path (`seed_jax.config_names`).
"""

from __future__ import annotations

import runpy
import sys
from collections.abc import Sequence

# subcommand -> (module run as __main__, what it does)
COMMANDS = {
    "train": ("seed_jax.launch", "run SEED end to end: collect, annotate, sft, rl, eval (--dry_run: what would run)"),
    "plan": ("seed_jax.plan", "plan a run's programs ahead of time for a target (memory, fit)"),
    "export": ("seed_jax.export", "write a run's RL policy as a Hugging Face model directory"),
    "chat": ("seed_jax.chat", "chat with a run's policy in the terminal"),
    "report": ("seed_jax.report", "a run's report: figures, tables, transcripts"),
    "serve-retriever": ("seed_jax.envs.search.server", "serve the BM25 retriever of the search environment over HTTP"),
}


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = ["usage: seed-jax <command> [flags]   (seed-jax <command> --help: its flags)", "", "commands:"]
    lines += [f"  {name:<{width}}  {what}  (python -m {module})" for name, (module, what) in COMMANDS.items()]
    lines += ["", "configs: --config=NAME[:PRESET] from any directory (search:local, alfworld:tiny, webshop:paper) "
              "or a file path"]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(usage())
        return 0
    name, rest = args[0], args[1:]
    if name not in COMMANDS:
        print(f"error: unknown command {name!r} (one of: {', '.join(COMMANDS)}; seed-jax --help)", file=sys.stderr)
        return 2
    module = COMMANDS[name][0]
    sys.argv = [f"seed-jax {name}", *rest]
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as e:
        code = e.code
        if code is None or isinstance(code, int):
            return code or 0
        print(code, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
