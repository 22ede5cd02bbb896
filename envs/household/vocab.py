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

from envs import base
from envs import prompt as layout
from envs.household import annotator, env, prompt, world
from envs.household.tasks import EXTRA_POOL, all_combinations

# the household modules and the shared ones they write text with (prompt layout, spec checks)
TEXT_MODULES = (world, layout, prompt, base, env, annotator)
PARSE_REASONS = ("missing", "duplicated", "mixed", "unclosed", "cjk", "empty")


def _string_literals(module) -> list[str]:
    """String constants of `module`'s source, docstrings left out."""
    tree = ast.parse(inspect.getsource(module))
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                docstrings.add(id(body[0].value))
    return [n.value for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings]


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
    return tuple(texts)
