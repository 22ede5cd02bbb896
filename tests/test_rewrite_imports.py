"""tools/rewrite_imports.py: old top-level imports -> the seed_jax namespace, idempotent, and
none left in the repository."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

# rewrite_imports: skip  (old top-level import names are test data in this file)
REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("rewrite_imports", REPO / "tools" / "rewrite_imports.py")
rewrite_imports = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(rewrite_imports)

OLD = '''from envs.search import make_search_env
from configs import search
import experiments.household.bc as bc
    from configs.base import base_config
mod = importlib.import_module(f"configs.{env}")
code = "import sys, envs.alfworld as a; from envs.bm25 import BM25"
proc = [sys.executable, "-m", "envs.search.server"]
"""Docs name `envs.base.Environment` and configs/search.py; from environments import x."""
from environments import y
'''
NEW = '''from seed_jax.envs.search import make_search_env
from seed_jax.configs import search
import seed_jax.experiments.household.bc as bc
    from seed_jax.configs.base import base_config
mod = importlib.import_module(f"seed_jax.configs.{env}")
code = "import sys, seed_jax.envs.alfworld as a; from seed_jax.envs.bm25 import BM25"
proc = [sys.executable, "-m", "seed_jax.envs.search.server"]
"""Docs name `envs.base.Environment` and configs/search.py; from environments import x."""
from environments import y
'''


def test_python_rewrite_is_exact_and_idempotent():
    assert rewrite_imports.rewrite(OLD, python=True) == NEW
    assert rewrite_imports.rewrite(NEW, python=True) == NEW


def test_commands_in_docs_and_scripts():
    old = "run `python -m envs.search.server --port 8000`; see envs/search/README.md and `from envs import x`\n"
    new = "run `python -m seed_jax.envs.search.server --port 8000`; see envs/search/README.md and `from envs import x`\n"
    assert rewrite_imports.rewrite(old, python=False) == new
    assert rewrite_imports.rewrite(new, python=False) == new


def test_check_mode_reports_and_the_repository_has_none_left(tmp_path):
    (tmp_path / "a.py").write_text("from envs.base import EnvSpec\n")
    (tmp_path / "b.py").write_text("from seed_jax.envs.base import EnvSpec\n")
    tool = [sys.executable, str(REPO / "tools" / "rewrite_imports.py")]
    r = subprocess.run([*tool, "--check", f"--root={tmp_path}"], capture_output=True, text=True)
    assert r.returncode == 1 and r.stdout.split() == ["a.py"]
    assert (tmp_path / "a.py").read_text() == "from envs.base import EnvSpec\n"  # --check writes nothing
    r = subprocess.run([*tool, "--check"], cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 0, f"old imports left (python tools/rewrite_imports.py fixes them):\n{r.stdout}"
