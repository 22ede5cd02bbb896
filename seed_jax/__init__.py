"""SEED in JAX. The run configs, environments and studies live in the top-level folders
``configs/``, ``envs/`` and ``experiments/`` of the repository (the design card's layout), but are
imported under this package's name: ``seed_jax.configs``, ``seed_jax.envs``,
``seed_jax.experiments``, so an installed project never shadows a user's own ``configs`` or
``envs`` modules. An installed package carries them as sub-packages (``package_dir`` in setup.py);
in a checkout (``PYTHONPATH=.``, an editable install) the repository root is appended to this
package's ``__path__`` so the same names resolve to the folders beside ``seed_jax/``.
"""

from pathlib import Path as _Path

NAMESPACED = ("configs", "envs", "experiments")  # top-level folders imported as seed_jax.<name>


def _checkout_root() -> _Path | None:
    """The repository root when this package runs from a checkout (its folders beside
    ``seed_jax/``, none inside it), else None (an installed package carries them inside)."""
    here = _Path(__file__).resolve().parent
    root = here.parent
    if any((here / n).is_dir() for n in NAMESPACED):
        return None
    if all((root / n / "__init__.py").is_file() for n in NAMESPACED):
        return root
    return None


_root = _checkout_root()
if _root is not None and str(_root) not in __path__:
    __path__.append(str(_root))  # seed_jax.envs -> <root>/envs (appended: seed_jax's own modules win)
del _root
