"""`seed_jax.config_names`: ``--config=NAME[:PRESET]`` from any directory, paths as before."""

from __future__ import annotations

from pathlib import Path

import pytest

from seed_jax.config_names import ConfigNameError, config_names, resolve_config_args, resolve_config_spec

REPO = Path(__file__).resolve().parents[1]
SEARCH = REPO / "configs" / "search.py"


def test_a_name_is_the_projects_config_from_any_directory(tmp_path):
    assert resolve_config_spec("search:paper", cwd=tmp_path) == f"{SEARCH}:paper"
    assert resolve_config_spec("alfworld", cwd=tmp_path) == str(REPO / "configs" / "alfworld.py")
    assert {"search", "alfworld", "webshop"} <= set(config_names()) and "base" not in config_names()


def test_a_path_is_read_from_the_working_directory(tmp_path):
    assert resolve_config_spec("configs/search.py:tiny", cwd=REPO) == f"{SEARCH}:tiny"
    own = tmp_path / "configs" / "search.py"  # a user's own file of the same name wins where it exists
    own.parent.mkdir()
    own.write_text("")
    assert resolve_config_spec("configs/search.py:tiny", cwd=tmp_path) == f"{own}:tiny"


def test_configs_path_outside_the_checkout_is_the_projects(tmp_path):
    assert resolve_config_spec("configs/webshop.py", cwd=tmp_path) == str(REPO / "configs" / "webshop.py")


@pytest.mark.parametrize("spec,says", [("serch:tiny", "no config named 'serch'"), ("base", "no config named 'base'"),
                                       ("nope/x.py", "no file nope/x.py"), (":tiny", "no config named")])
def test_a_wrong_spec_names_what_exists(tmp_path, spec, says):
    with pytest.raises(ConfigNameError, match="search") as e:
        resolve_config_spec(spec, cwd=tmp_path)
    assert says in str(e.value)


def test_the_command_line_is_resolved_overrides_untouched():
    argv = ["prog", "--config=search:tiny", "--config.rl.num_updates=3", "--config", "webshop:paper", "--dry_run"]
    assert resolve_config_args(argv) == ["prog", f"--config={SEARCH}:tiny", "--config.rl.num_updates=3", "--config",
                                         f"{REPO / 'configs' / 'webshop.py'}:paper", "--dry_run"]
