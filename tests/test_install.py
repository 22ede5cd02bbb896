"""A real install, as a new user makes one: a fresh clone of this checkout's commit, a fresh venv,
``pip install .`` (not editable), and the ``seed-jax`` command run from a directory outside the
clone. The venv sees the system's site-packages for the dependencies (``--system-site-packages``,
``--no-deps``: nothing is downloaded); what it installs itself is this project only.

Integration tier (a clone and an install, ~10 s; each tiny run 1-2 min on 2 cores): CI runs it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[1]


# a user's machine has none of the development checkout's data locations
DEV_DATA_VARS = ("ALFWORLD_DATA", "SEED_WEBSHOP_DATA", "SEED_SEARCH_QA_DATA")


def _env() -> dict[str, str]:
    """The environment without this checkout on the import path and without the development data."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", *DEV_DATA_VARS)}


def _run(cmd, cwd, timeout=600):
    return subprocess.run([str(c) for c in cmd], cwd=cwd, env=_env(), capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """``(venv bin directory, working directory outside the clone)`` after a non-editable install
    of a fresh clone of this checkout's HEAD commit (uncommitted changes are not in it)."""
    if shutil.which("git") is None:
        pytest.skip("needs git")
    root = tmp_path_factory.mktemp("install")
    clone, venv, work = root / "clone", root / "venv", root / "work"
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True)
    if head.returncode != 0:
        pytest.skip(f"not a git checkout: {head.stderr.strip()}")
    for cmd in (["git", "clone", "--quiet", "--no-checkout", REPO, clone],
                ["git", "-C", clone, "checkout", "--quiet", head.stdout.strip()],
                # the system's pip and setuptools (>= 61, pyproject's build requirement) build it offline
                [sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", venv],
                [venv / "bin" / "python", "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                 clone]):
        r = _run(cmd, cwd=root)
        assert r.returncode == 0, f"{cmd}:\n{r.stdout}\n{r.stderr}"
    work.mkdir()
    return venv / "bin", work


def test_the_install_is_the_venvs_own_and_shadows_nothing(installed):
    bin_dir, work = installed
    code = ("import importlib.util, seed_jax, seed_jax.configs.search, seed_jax.envs.search.data as d; "
            "print(seed_jax.__file__); print(d.__file__); "
            "print([n for n in ('configs', 'envs', 'experiments') if importlib.util.find_spec(n)])")
    r = _run([bin_dir / "python", "-c", code], cwd=work)
    assert r.returncode == 0, r.stderr
    package, data_module, top_level = r.stdout.splitlines()
    venv = bin_dir.parent.resolve()
    assert Path(package).resolve().is_relative_to(venv) and Path(data_module).resolve().is_relative_to(venv)
    assert top_level == "[]"  # no top-level configs / envs / experiments: a user's own modules stay theirs
    data = Path(data_module).parent / "data"  # vendored data ride along as package data
    assert (data / "default_tasks.jsonl").stat().st_size > 0 and (data / "default_corpus.jsonl").stat().st_size > 0


def test_seed_jax_help_lists_the_commands(installed):
    bin_dir, work = installed
    r = _run([bin_dir / "seed-jax", "--help"], cwd=work)
    assert r.returncode == 0, r.stderr
    for name in ("train", "plan", "export", "chat", "report", "serve-retriever"):
        assert f"  {name} " in r.stdout


@pytest.mark.parametrize("config", ["search:tiny", "configs/search.py:tiny", "search"])
def test_a_dry_run_from_outside_the_clone(installed, config):
    bin_dir, work = installed
    r = _run([bin_dir / "seed-jax", "train", f"--config={config}", "--dry_run", "--plan=no"], cwd=work)
    assert r.returncode == 0, r.stderr[-3000:]
    preset = config.partition(":")[2] or "local"
    assert f"run directory: {work / 'runs' / f'search-{preset}-seed'} (new)" in r.stdout
    assert "collect   run" in r.stdout


def test_a_wrong_config_name_is_one_line_exit_2(installed):
    bin_dir, work = installed
    r = _run([bin_dir / "seed-jax", "train", "--config=serch:tiny", "--dry_run"], cwd=work)
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and "search" in r.stderr


def test_a_tiny_search_run_end_to_end_and_its_report(installed):
    """The whole pipeline from the install (vendored tasks and corpus read as package data),
    then ``seed-jax report`` on its run directory (~1.5 min on 2 cores)."""
    bin_dir, work = installed
    r = _run([bin_dir / "seed-jax", "train", "--config=search:tiny", "--workdir=runs/tiny"], cwd=work, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    assert (work / "runs" / "tiny" / "config.json").is_file()
    from test_tracking import read_tensorboard  # tensorboard's own event reader

    texts, hparams = read_tensorboard(work / "runs" / "tiny" / "tb")  # the tiny run's tracking
    assert '"method": "seed"' in texts["config/text_summary"][0][1] and hparams["method"] == "seed"
    assert texts["transcripts/text_summary"] and "**Task**" in texts["transcripts/text_summary"][-1][1]
    r = _run([bin_dir / "seed-jax", "report", "runs/tiny"], cwd=work)
    assert r.returncode == 0, r.stderr[-3000:]


@pytest.mark.parametrize("config", ["alfworld:tiny", "webshop:tiny"])
def test_the_alfworld_and_webshop_tiny_presets_run_from_the_install(installed, config, tmp_path):
    """No data location set: ALFWorld plays the vendored game subset (unpacked into a fresh
    cache), WebShop shops the catalog generated from the vendored attributes; the whole pipeline
    runs and its summary names the data it read."""
    bin_dir, work = installed
    env = dict(_env(), SEED_JAX_CACHE=str(tmp_path / "cache"))
    name = config.split(":")[0]
    r = subprocess.run([str(bin_dir / "seed-jax"), "train", f"--config={config}", f"--workdir=runs/{name}"],
                       cwd=work, env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    summary = (work / "runs" / name / "summary.md").read_text()
    assert "Data:" in summary, summary[:2000]
    assert ("vendored" in summary) if name == "alfworld" else ("GENERATED" in summary), summary[:2000]
    assert (work / "runs" / name / "eval").is_dir()
