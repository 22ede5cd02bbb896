"""Packages of the install: ``seed_jax`` and the top-level ``configs/``, ``envs/``,
``experiments/`` folders installed as ``seed_jax.configs``, ``seed_jax.envs``,
``seed_jax.experiments`` (see seed_jax/__init__.py); the rest of the metadata is in pyproject.toml."""

from setuptools import find_packages, setup

NAMESPACED = ("configs", "envs", "experiments")
# vendored data and the per-package READMEs/SOURCES (the data files' provenance) ride along
DATA = ["*.md", "*.jsonl", "*.json", "*.gz", "*.tar.xz", "*.txt", "*.zip",
        "data/*", "data/**/*"]

packages = find_packages(include=["seed_jax", "seed_jax.*"])
package_dir = {}
for name in NAMESPACED:
    package_dir[f"seed_jax.{name}"] = name
    packages += [f"seed_jax.{p}" for p in find_packages(include=[name, f"{name}.*"])]

setup(packages=packages, package_dir=package_dir,
      package_data=dict.fromkeys(packages, DATA), include_package_data=False)
