"""Every word the household environment and its scripted annotator can write (tokenizer corpus).

`household_texts()` returns texts whose words cover all environment output (observations,
prompts, admissible commands, task sentences, notes on invalid responses) and all annotator
output: the names of the catalogue, sample sentences, and every string literal (f-string parts
included, docstrings excluded) of the modules that produce text. The word tokenizer adds the
spacing and case variants of each word, so covering each word once is enough.
"""

from __future__ import annotations

import ast
import functools
import inspect

from seed_jax.envs import base
from seed_jax.envs import prompt as layout
from seed_jax.envs.household import annotator, env, prompt, world
from seed_jax.envs.household.tasks import EXTRA_POOL, all_combinations

# the household modules and the shared ones they write text with (prompt layout, spec checks)
TEXT_MODULES = (world, layout, prompt, base, env, annotator)
PARSE_REASONS = ("missing", "duplicated", "mixed", "unclosed", "cjk", "empty")
# Type names that the scraper below once read from quoted return annotations of world.py and
# annotator.py (they write no text with them). The published household study was trained with
# them in its 1972-token vocabulary; listed here so that vocabulary, and so the study's figures,
# stay reproducible now that annotations are neither quoted nor scraped.
RECORDED_EXTRA_WORDS = ("EpisodeRecord", "WorldState")


def _string_literals(module) -> list[str]:
    """String constants of `module`'s source, docstrings, annotations and the names of the info
    contract's keys (`envs.base.INFO_KEYS`, `OPTIONAL_INFO_KEYS`: dict keys, never shown) left out."""
    tree = ast.parse(inspect.getsource(module))
    skipped = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                skipped.add(id(body[0].value))
        annotations = []
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args
            annotations = [node.returns] + [a.annotation for a in (*args.posonlyargs, *args.args,
                                                                    *args.kwonlyargs, args.vararg, args.kwarg) if a]
        elif isinstance(node, ast.AnnAssign):
            annotations = [node.annotation]
        for ann in annotations:
            if ann is not None:
                skipped.update(id(n) for n in ast.walk(ann))
    contract = set(base.INFO_KEYS) | set(base.OPTIONAL_INFO_KEYS)
    return [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
            and id(n) not in skipped and not (module is base and n.value in contract)]


@functools.lru_cache(maxsize=1)
def household_texts() -> tuple[str, ...]:
    texts: list[str] = []
    for module in TEXT_MODULES:
        texts += _string_literals(module)
    names = sorted(set(world.OBJECT_KINDS) | set(world.RECEPTACLE_KINDS) | set(EXTRA_POOL))
    texts += names
    texts += [world.task_sentence(*c) for c in all_combinations()]
    texts += [env.invalid_note(r) for r in PARSE_REASONS]
    texts.append("0 1 2 3 4 5 6 7 8 9 in/on ['go to cabinet 1'\n 'look']. 'a', (b)")
    texts += RECORDED_EXTRA_WORDS
    return tuple(texts)
