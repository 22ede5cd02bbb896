"""Import layers: every import under ``seed_jax/`` and ``envs/`` (module level and inside
functions, read from the source with `ast`, nothing imported) points down or sideways.
The top-level folders ``configs/``, ``envs/``, ``experiments/`` are the packages
``seed_jax.configs``, ``seed_jax.envs``, ``seed_jax.experiments`` (seed_jax/__init__.py); an
import by their old top-level names is reported (``python tools/rewrite_imports.py`` fixes it).

The library, lowest layer first (a module may import its own layer and the layers below):

====  =========  ==================================================================
  0   models     ``seed_jax.models``, ``seed_jax.losses`` (the math core: arrays in, arrays out),
                 ``seed_jax.buckets`` (static-shape buckets)
  1   train      ``seed_jax.train`` (train state, jitted steps, checkpoints, mesh)
  2   rollout    ``seed_jax.rollout``, ``seed_jax.sampling``; shared utilities whose lowest
                 user is the rollout: ``seed_jax.skills`` (skill format and parser),
                 ``seed_jax.metrics`` (metric writers and pooling)
  3   pipeline   ``seed_jax.pipeline`` (config -> live objects, the stages)
  4   launch     ``seed_jax.launch``, ``seed_jax.report``, ``seed_jax.export``, ``seed_jax.chat`` (entry points)
====  =========  ==================================================================

Beside and above the library:

- ``seed_jax.envs`` imports nothing else of ``seed_jax`` (the library, ``configs``,
  ``experiments``); the library may import ``seed_jax.envs`` from the rollout layer up (the
  rollout drives environments; models and train know nothing of them).
- Nothing in the library imports ``seed_jax.experiments`` (the studies on top of the library)
  or ``seed_jax.configs`` (run configs import the library, not the reverse).
- The library's import graph has no cycle (an import inside a function that closes a cycle
  counts: it hides the cycle rather than breaking it).

A module under ``seed_jax`` that is in no layer is reported too: a new module takes a place
in `LAYERS` on purpose.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

# rewrite_imports: skip  (old top-level import names are test data in this file)
REPO = Path(__file__).resolve().parents[1]
SCANNED = ("seed_jax", "envs")

LAYER_NAMES = ("models", "train", "rollout", "pipeline", "launch")
LAYERS = {
    "seed_jax.models": 0,
    "seed_jax.losses": 0,
    "seed_jax.buckets": 0,  # static-shape buckets (pure integers), used from models up
    "seed_jax.jsonl": 0,  # crash-safe jsonl records (standard library and seed_jax.paths)
    "seed_jax.paths": 0,  # run-directory paths, local or gs:// (standard library and etils.epath)
    "seed_jax.lenient_json": 0,  # the tolerant JSON reader of analyzer answers (standard library only)
    "seed_jax.procmem": 0,  # process memory: peak RSS, malloc arenas (standard library only)
    "seed_jax.transcript_text": 0,  # transcripts as markdown, the tables' number format (standard library only)
    "seed_jax.config_names": 0,  # --config=NAME[:PRESET] -> the config file (standard library only)
    "seed_jax.watchdog": 0,  # the stall watchdog every layer beats (standard library only)
    "seed_jax.train": 1,
    "seed_jax.rollout": 2,
    "seed_jax.sampling": 2,
    "seed_jax.skills": 2,
    "seed_jax.metrics": 2,
    "seed_jax.pipeline": 3,
    "seed_jax.launch": 4,
    "seed_jax.report": 4,
    "seed_jax.export": 4,  # RL checkpoint -> Hugging Face directory
    "seed_jax.chat": 4,  # terminal chat with a policy
    "seed_jax.plan": 4,  # ahead-of-time plan of a run's programs (reads run configs like the launcher)
    "seed_jax.cli": 4,  # the seed-jax command: runs the entry points above (and the retriever server) by name
}
ENVS_FROM_LAYER = LAYERS["seed_jax.rollout"]
ENVS = "seed_jax.envs"  # the top-level envs/ folder (seed_jax/__init__.py)
NOT_FROM_LIBRARY = ("seed_jax.experiments", "seed_jax.configs")
OLD_NAMES = ("envs", "configs", "experiments")  # top-level names before the seed_jax namespace

# ------------------------------------------------------------------ reading imports


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    if parts[0] in OLD_NAMES:  # envs/x.py is seed_jax.envs.x
        parts = ["seed_jax", *parts]
    return ".".join(parts)


def imports_of(source: str, module: str, is_package: bool, known_modules=frozenset()) -> set[str]:
    """Every module ``source`` imports, anywhere in the file, as absolute dotted names.

    ``from a.b import c`` counts as an import of ``a.b.c`` when that is a module (in
    ``known_modules``), else of ``a.b``; relative imports are resolved against ``module``.
    """
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module.split(".") if is_package else module.split(".")[:-1]
                package = package[: len(package) - (node.level - 1)]
                base = ".".join(package + ([node.module] if node.module else []))
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in known_modules else base)
    return found


@functools.cache
def scanned_modules() -> dict[str, Path]:
    return {module_name(p): p for top in SCANNED for p in sorted((REPO / top).rglob("*.py"))}


@functools.cache
def import_graph() -> dict[str, frozenset[str]]:
    """``{module: modules it imports}`` for every .py file under the scanned folders."""
    modules = scanned_modules()
    return {m: frozenset(imports_of(p.read_text(), m, p.name == "__init__.py", frozenset(modules)))
            for m, p in modules.items()}


# ------------------------------------------------------------------ the rules


def _within(module: str, prefix: str) -> bool:
    return prefix == "*" or module == prefix or module.startswith(prefix + ".")


def layer_of(module: str) -> int | None:
    best = max((p for p in LAYERS if _within(module, p)), key=len, default=None)
    return None if best is None else LAYERS[best]


def violations(graph: dict[str, frozenset[str]]) -> set[tuple[str, str, str]]:
    """``(importer, imported, rule)`` for every import that breaks a layer rule."""
    found = set()
    for module, targets in graph.items():
        for t in targets:
            if any(_within(t, p) for p in OLD_NAMES):
                found.add((module, t, "an old top-level name: python tools/rewrite_imports.py"))
        if _within(module, ENVS):
            for t in targets:
                if _within(t, "seed_jax") and not _within(t, ENVS) and t != "seed_jax":
                    found.add((module, t, "envs import no seed_jax, configs or experiments"))
            continue
        if not _within(module, "seed_jax"):
            continue
        layer = layer_of(module)
        if layer is None and module != "seed_jax":
            found.add((module, "", "every seed_jax module has a layer (add it to LAYERS)"))
        for t in targets:
            if any(_within(t, p) for p in NOT_FROM_LIBRARY):
                found.add((module, t, "the library imports no experiments and no top-level configs"))
            elif _within(t, ENVS):
                if layer is not None and layer < ENVS_FROM_LAYER:
                    found.add((module, t, f"envs are imported from the {LAYER_NAMES[ENVS_FROM_LAYER]} layer up"))
            elif _within(t, "seed_jax") and t != "seed_jax" and layer is not None:
                target_layer = layer_of(t)
                if target_layer is None:
                    found.add((module, t, "every seed_jax module has a layer (add it to LAYERS)"))
                elif target_layer > layer:
                    found.add((module, t, f"{LAYER_NAMES[layer]} imports {LAYER_NAMES[target_layer]}, a higher layer"))
    return found


def cycles(graph: dict[str, frozenset[str]]) -> list[list[str]]:
    """The import cycles between library modules (an import of an enclosing package, which
    only re-exports, is not followed), each as the list of modules along it."""
    library = {m for m in graph if _within(m, "seed_jax")}
    edges = {m: sorted(t for t in graph[m] if t in library and not _within(m, t)) for m in library}
    found, state = [], {}  # state: 1 = on the current path, 2 = done

    def visit(m, path):
        state[m] = 1
        for t in edges[m]:
            if state.get(t) == 1:
                found.append(path[path.index(t):] + [t])
            elif t not in state:
                visit(t, path + [t])
        state[m] = 2

    for m in sorted(library):
        if m not in state:
            visit(m, [m])
    return found


# ------------------------------------------------------------------ tests of the tree


def test_the_scan_reads_the_tree():
    graph = import_graph()
    assert "seed_jax.pipeline.rl" in graph and "seed_jax.envs.base" in graph
    assert "seed_jax.pipeline.validate" in graph["seed_jax.launch"]


def test_no_lower_layer_imports_a_higher_one():
    found = sorted(violations(import_graph()))
    assert not found, "import-layer violations:\n" + "\n".join(f"  {a} -> {b}: {why}" for a, b, why in found)


def test_the_library_has_no_import_cycle():
    found = cycles(import_graph())
    assert not found, "import cycles:\n" + "\n".join("  " + " -> ".join(c) for c in found)


# ------------------------------------------------------------------ tests of the checker


def _graph(**files: str) -> dict[str, frozenset[str]]:
    """An import graph of synthetic modules: ``{"seed_jax.models.x": "import ...", ...}``."""
    names = {k.replace("__", "."): v for k, v in files.items()}
    return {m: frozenset(imports_of(src, m, False, frozenset(names))) for m, src in names.items()}


@pytest.mark.parametrize("module,source,rule", [
    ("seed_jax.models.x", "from seed_jax.train.step import build", "models imports train"),
    ("seed_jax.train.x", "def f():\n    from seed_jax.pipeline import rl\n", "train imports pipeline"),
    ("seed_jax.rollout.x", "import seed_jax.launch", "rollout imports launch"),
    ("seed_jax.losses", "from seed_jax.rollout.batch import round_up", "models imports rollout"),
    ("seed_jax.rollout.x", "from seed_jax.experiments.household import bc", "no experiments"),
    ("seed_jax.pipeline.x", "from seed_jax.configs.base import base_config", "no top-level configs"),
    ("seed_jax.pipeline.x", "import seed_jax.configs", "no top-level configs"),
    ("seed_jax.train.x", "from seed_jax.envs.base import EnvSpec", "envs are imported from the rollout layer up"),
    ("seed_jax.envs.x", "from seed_jax.skills import Skill", "envs import no seed_jax"),
    ("seed_jax.envs.x.y", "def f():\n    import seed_jax.configs.search\n", "envs import no seed_jax"),
    ("seed_jax.rollout.x", "from envs.base import EnvSpec", "an old top-level name"),
    ("seed_jax.envs.x", "import configs.search", "an old top-level name"),
    ("seed_jax.newthing", "import numpy", "every seed_jax module has a layer"),
])
def test_an_offending_import_is_reported(module, source, rule):
    found = violations({module: frozenset(imports_of(source, module, False))})
    assert len(found) == 1, found
    (importer, _, why), = found
    assert importer == module and rule in why


@pytest.mark.parametrize("module,source", [
    ("seed_jax.pipeline.x", "from seed_jax.models import Model\nfrom seed_jax.rollout.loop import run_rollouts"),
    ("seed_jax.train.x", "from seed_jax import losses\nfrom seed_jax.models.config import ModelConfig"),
    ("seed_jax.rollout.x", "from seed_jax.envs.base import EnvSpec\nfrom seed_jax.skills import Skill"),
    ("seed_jax.launch", "from seed_jax.pipeline import rl"),
    ("seed_jax.envs.x", "from seed_jax.envs.base import EnvSpec\nimport numpy"),
    ("seed_jax.models.x", "from . import config\nfrom .decoder import forward"),
])
def test_an_allowed_import_is_not_reported(module, source):
    assert violations({module: frozenset(imports_of(source, module, False))}) == set()


def test_relative_and_from_imports_resolve_to_modules():
    known = frozenset({"seed_jax.models.decoder", "seed_jax.losses"})
    src = "from . import decoder\nfrom ..train import step\nfrom seed_jax import losses\nfrom .config import X\n"
    assert imports_of(src, "seed_jax.models.model", False, known) == {
        "seed_jax.models.decoder", "seed_jax.train", "seed_jax.losses", "seed_jax.models.config"}
    assert imports_of("from .world import W", "seed_jax.envs.household", True) == {"seed_jax.envs.household.world"}


def test_a_cycle_is_reported_even_through_a_function_import():
    graph = _graph(seed_jax__pipeline__runtime="def f():\n    from seed_jax.pipeline.validate import switches\n",
                   seed_jax__pipeline__validate="from seed_jax.pipeline.runtime import train_config\n",
                   seed_jax__pipeline="from seed_jax.pipeline.runtime import train_config\n")
    assert cycles(graph) == [["seed_jax.pipeline.runtime", "seed_jax.pipeline.validate", "seed_jax.pipeline.runtime"]]
    del graph["seed_jax.pipeline.runtime"]
    assert cycles({**graph, "seed_jax.pipeline.runtime": frozenset()}) == []
