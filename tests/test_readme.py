"""Every cheap command of the README runs as written, and the README stays short.

The ``bash`` blocks of README.md are read as a user would copy them (continuation lines joined,
comments dropped, ``a && b`` split). Each ``seed-jax`` / ``python -m seed_jax...`` command then
runs in a fresh working directory (as `seed_jax.cli`, the console script's entry point):

* ``--help``: exit 0 with the usage on stdout;
* ``train ... --dry_run``: as written; a ``train`` command without it runs with ``--dry_run``
  appended, which checks its config, preset and every override before any model loads;
* ``report <workdir>``: on a small run written there first (metrics.jsonl), exit 0 and a
  ``report/summary.md``;
* ``plan`` compiles every program of a run (minutes): its flags are checked by tests/test_plan.py,
  not here.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
MAX_LINES = 250

pytestmark = pytest.mark.integration


def readme_commands(text: str) -> list[list[str]]:
    """The seed_jax commands of the README's bash blocks, each as an argv (program first)."""
    out = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            line = re.sub(r"(^|\s)#.*$", "", line).strip()
            for part in line.split("&&"):
                argv = shlex.split(part.strip())
                if argv[:1] == ["seed-jax"]:
                    out.append(argv)
                elif argv[:3] in (["python", "-m", "seed_jax.launch"], ["python", "-m", "seed_jax.report"]):
                    out.append(["seed-jax", "train" if argv[2].endswith("launch") else "report", *argv[3:]])
    return out


def test_readme_commands_are_read_as_a_user_copies_them():
    text = ("```bash\nbash launch/install.sh && seed-jax train --config=search  # comment\n"
            "seed-jax plan --config=a \\\n    --target=x\n# only a comment\npython -m seed_jax.report runs/s\n```\n"
            "```python\nseed-jax not a shell block\n```\n")
    assert readme_commands(text) == [["seed-jax", "train", "--config=search"],
                                     ["seed-jax", "plan", "--config=a", "--target=x"],
                                     ["seed-jax", "report", "runs/s"]]


def test_the_readme_is_short_and_its_documents_exist():
    text = README.read_text()
    assert len(text.splitlines()) <= MAX_LINES, f"README.md has {len(text.splitlines())} lines (> {MAX_LINES})"
    named = set(re.findall(r"\b((?:docs|bench|launch|envs|configs)/[\w./-]+\.(?:md|py|sh))\b", text))
    assert named, "the README names no documents"
    missing = sorted(p for p in named if "*" not in p and not (REPO / p).exists())
    assert not missing, f"README names files that do not exist: {missing}"


def _write_small_run(workdir: Path) -> None:
    from seed_jax.metrics import MetricsWriter

    with MetricsWriter(workdir, tensorboard=False) as w:
        for step in (1, 2):
            w.write(step, {"success_rate": 0.25 * step, "invalid_rate": 0.1}, prefix="rollout")


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "seed_jax.cli", *argv[1:]], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300, check=False)


def test_every_cheap_readme_command_runs_as_written(tmp_path):
    commands = readme_commands(README.read_text())
    ran = []
    for i, argv in enumerate(commands):
        sub = argv[1] if len(argv) > 1 else ""
        cwd = tmp_path / f"cmd{i}"
        cwd.mkdir()
        if "--help" in argv:
            r = _run(argv, cwd)
            assert r.returncode == 0 and r.stdout.strip(), (argv, r.stderr[-2000:])
        elif sub == "train":
            run_argv = argv if "--dry_run" in argv else [*argv, "--dry_run"]
            r = _run(run_argv, cwd)
            assert r.returncode == 0, (run_argv, r.stderr[-2000:])
            assert "run directory:" in r.stdout and "eval" in r.stdout, (run_argv, r.stdout[-2000:])
        elif sub == "report":
            _write_small_run(cwd / argv[2])
            r = _run(argv, cwd)
            assert r.returncode == 0, (argv, r.stderr[-2000:])
            assert (cwd / argv[2] / "report" / "summary.md").exists(), argv
        else:
            continue
        ran.append(" ".join(argv))
    # the quick start's help, dry runs and report at least: a README without them fails here
    assert sum("--help" in c for c in ran) >= 2 and sum("--dry_run" in c for c in ran) >= 2, ran
    assert any(c.startswith("seed-jax report") for c in ran), ran
    assert sum(c.startswith("seed-jax train") for c in ran) >= 5, ran
