"""Rewrite imports of the top-level ``configs``, ``envs``, ``experiments`` folders to their
installed names ``seed_jax.configs``, ``seed_jax.envs``, ``seed_jax.experiments`` (see
seed_jax/__init__.py), across the repository::

    python tools/rewrite_imports.py          # rewrite in place, then sort the changed files' imports (ruff)
    python tools/rewrite_imports.py --check  # list what would change; exit 1 if anything would

What is rewritten (only at these spots, so the script is idempotent and prose is left alone):

- ``from envs.x import y`` / ``from envs import y`` / ``import envs.x`` at the start of a line;
- ``importlib.import_module("configs.search")`` and f-string forms;
- code in strings (``python -c "import sys; from envs.x import y"``), after a quote or ``;``;
- ``python -m envs.search.server`` and ``[sys.executable, "-m", "envs.search.server"]`` in
  .py, .md, .sh, .yml, .yaml and .ci/ files.

Run it again after a merge brings in code written against the old names. A file that holds the
old names on purpose (tests of the import rules) carries the line ``# rewrite_imports: skip``.
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NAMES = "configs|envs|experiments"
SKIP_DIRS = {".git", "build", "runs", ".cache", "__pycache__", ".hypothesis", ".pytest_cache", ".venv", "venv"}
TEXT_SUFFIXES = {".md", ".sh", ".yml", ".yaml"}
SKIP_MARKER = "# rewrite_imports: skip"  # a file with this line is left as it is

PY_RULES = [
    (re.compile(rf"^(\s*from\s+)({NAMES})(?=[.\s])", re.M), r"\1seed_jax.\2"),
    (re.compile(rf"^(\s*import\s+)({NAMES})(?=[.\s,]|$)", re.M), r"\1seed_jax.\2"),
    (re.compile(rf"(import_module\(\s*f?[\"'])({NAMES})(?=[.\"'])"), r"\1seed_jax.\2"),
    # code in strings (python -c "import sys; from envs.x import y"): after a quote or a semicolon
    (re.compile(rf"([\"';]\s*from\s+)({NAMES})(?=[.\s])"), r"\1seed_jax.\2"),
    (re.compile(rf"([\"';]\s*import\s+(?:[\w.]+\s*,\s*)*)({NAMES})(?=[.\s,])"), r"\1seed_jax.\2"),
]
COMMAND_RULES = [
    (re.compile(rf"(-m\s+)({NAMES})(?=\.)"), r"\1seed_jax.\2"),
    (re.compile(rf"([\"']-m[\"']\s*,\s*[\"'])({NAMES})(?=\.)"), r"\1seed_jax.\2"),
]


def rewrite(text: str, python: bool) -> str:
    """``text`` with the old import names replaced (`PY_RULES` for Python, `COMMAND_RULES` for all)."""
    for pattern, repl in (PY_RULES if python else []) + COMMAND_RULES:
        text = pattern.sub(repl, text)
    return text


def candidates(root: Path):
    """The files the rules apply to, under ``root`` (git-tracked or not), this script excluded."""
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if any(part in SKIP_DIRS for part in rel.parts) or not path.is_file() or path == Path(__file__).resolve():
            continue
        if path.suffix == ".py" or path.suffix in TEXT_SUFFIXES or rel.parts[0] == ".ci":
            yield path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="report files that would change; exit 1 if any")
    parser.add_argument("--root", type=Path, default=ROOT, help="repository root (default: this script's)")
    args = parser.parse_args(argv)
    changed = []
    for path in candidates(args.root.resolve()):
        try:
            old = path.read_text()
        except UnicodeDecodeError:
            continue
        if any(line.strip().startswith(SKIP_MARKER) for line in old.splitlines()):
            continue
        new = rewrite(old, python=path.suffix == ".py")
        if new != old:
            changed.append(path)
            if not args.check:
                path.write_text(new)
    for path in changed:
        print(path.relative_to(args.root.resolve()))
    if args.check:
        return 1 if changed else 0
    py = [str(p) for p in changed if p.suffix == ".py"]
    if py and importlib.util.find_spec("ruff") is not None:
        # the new names sort among seed_jax's imports: let ruff's isort place them
        subprocess.run([sys.executable, "-m", "ruff", "check", "--select", "I", "--fix", "--quiet", *py],
                       cwd=args.root, check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
