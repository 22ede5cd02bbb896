"""``--config=`` spellings: a run config named by preset from any working directory, or by path.

- ``NAME[:PRESET]`` (``search``, ``search:paper``, ``alfworld:tiny``): the project's config
  ``configs/NAME.py``, wherever the project is (a checkout or an installed package, where it is
  ``seed_jax/configs/NAME.py``);
- ``PATH[:PRESET]`` (``configs/search.py:local``, ``/abs/my_config.py``): that file, relative to the
  working directory; a ``configs/NAME.py`` that is not there (a working directory outside the
  checkout) is the project's own config of that name.

`resolve_config_spec` turns either into ``<absolute path>[:PRESET]``, the spelling
ml_collections' ``DEFINE_config_file`` reads; `resolve_config_args` does it to a command line
before absl parses it (every entry point that takes ``--config`` calls it). Standard library only:
the configs are located as files, never imported here.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Sequence
from pathlib import Path

_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


class ConfigNameError(ValueError):
    """A ``--config`` that names no config file (the message says what exists)."""


def configs_dir() -> Path:
    """The folder of the project's run configs (``configs/`` of a checkout, or the installed
    ``seed_jax/configs/``)."""
    spec = importlib.util.find_spec("seed_jax.configs")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigNameError("the project's configs (seed_jax.configs) are not installed")
    return Path(list(spec.submodule_search_locations)[0])


def config_names() -> list[str]:
    """The names of the project's run configs (``search``, ``alfworld``, ...; not ``base``)."""
    return sorted(p.stem for p in configs_dir().glob("*.py") if p.stem not in ("__init__", "base"))


def resolve_config_spec(spec: str, cwd: Path | None = None) -> str:
    """``<absolute config file>[:PRESET]`` for a ``--config`` value (module docstring)."""
    path, sep, preset = spec.partition(":")
    if not path:
        raise ConfigNameError(f"--config={spec}: no config named (e.g. --config=search:local)")
    if _NAME.match(path):
        found = configs_dir() / f"{path}.py"
        if not found.is_file() or path == "base":
            raise ConfigNameError(f"--config={spec}: no config named {path!r} "
                                  f"(one of: {', '.join(config_names())}; or a path to a .py file)")
        return f"{found}{sep}{preset}"
    file = Path(path).expanduser()
    if not file.is_absolute():
        file = (cwd or Path.cwd()) / file
    if not file.exists():
        parts = Path(path).parts
        if len(parts) == 2 and parts[0] == "configs" and (configs_dir() / parts[1]).is_file():
            file = configs_dir() / parts[1]  # configs/search.py from outside the checkout
        else:
            raise ConfigNameError(f"--config={spec}: no file {path} (from {cwd or Path.cwd()}); name a project config "
                                  f"as NAME[:PRESET], one of: {', '.join(config_names())}")
    return f"{file.resolve()}{sep}{preset}"


def resolve_config_args(argv: Sequence[str], flag: str = "config") -> list[str]:
    """``argv`` with the value of ``--config=V`` / ``--config V`` resolved (`resolve_config_spec`);
    ``--config.key=value`` overrides are left as they are."""
    out = list(argv)
    for i, arg in enumerate(out):
        for dashes in ("--", "-"):
            if arg.startswith(f"{dashes}{flag}="):
                out[i] = f"{dashes}{flag}=" + resolve_config_spec(arg.split("=", 1)[1])
            elif arg == f"{dashes}{flag}" and i + 1 < len(out):
                out[i + 1] = resolve_config_spec(out[i + 1])
    return out
