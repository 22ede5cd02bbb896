"""Where the environments keep their caches (built search indexes).

One variable names the cache root for everything: ``$SEED_JAX_CACHE``. Without it,
``$XDG_CACHE_HOME/seed_jax``, else ``~/.cache/seed_jax``. The older ``$SEED_JAX_CACHE_DIR`` is
still read when ``$SEED_JAX_CACHE`` is unset, with a ``FutureWarning`` saying it is deprecated
(and ignored, with the same warning, when both are set).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping
from pathlib import Path

CACHE_VAR = "SEED_JAX_CACHE"
DEPRECATED_CACHE_VAR = "SEED_JAX_CACHE_DIR"


def cache_root(environ: Mapping[str, str] | None = None) -> Path:
    """The cache root of the module docstring."""
    env = os.environ if environ is None else environ
    root, old = env.get(CACHE_VAR), env.get(DEPRECATED_CACHE_VAR)
    if old:
        what = "ignored: $SEED_JAX_CACHE is set" if root else "read for now; rename it to $SEED_JAX_CACHE"
        warnings.warn(f"${DEPRECATED_CACHE_VAR} is deprecated ({what})", FutureWarning, stacklevel=2)
        root = root or old
    if root:
        return Path(root)
    xdg = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(xdg) / "seed_jax"
