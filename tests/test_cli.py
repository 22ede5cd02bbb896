"""The ``seed-jax`` command (`seed_jax.cli`): every subcommand names a runnable module, the
dispatch passes the rest of the command line and the module's exit status through."""

from __future__ import annotations

import importlib.util

import pytest

from seed_jax import cli


def test_every_subcommand_names_a_module():
    assert set(cli.COMMANDS) == {"train", "plan", "export", "chat", "report", "serve-retriever"}
    for module, _ in cli.COMMANDS.values():
        assert importlib.util.find_spec(module) is not None, module


def test_help_lists_the_commands(capsys):
    assert cli.main(["--help"]) == 0 and cli.main([]) == 0
    out = capsys.readouterr().out
    assert all(f"  {name} " in out for name in cli.COMMANDS) and "search:local" in out


def test_a_subcommand_gets_the_rest_of_the_line(capsys):
    assert cli.main(["report", "--help"]) == 0
    assert "workdir" in capsys.readouterr().out


def test_an_error_exit_status_comes_through(tmp_path, capsys):
    assert cli.main(["report", str(tmp_path / "no-such-run")]) != 0


@pytest.mark.parametrize("argv", [["bogus"], ["--config=search:tiny"]])
def test_an_unknown_command_is_one_line_exit_2(argv, capsys):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown command" in err
