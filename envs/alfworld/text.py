"""Pure text helpers for ALFWorld observations."""

from __future__ import annotations

from seed_jax.envs.prompt import TASK_PREFIX

BANNER = "-= Welcome to TextWorld, ALFRED! =-"


def strip_banner(text: str) -> str:
    """The observation without TextWorld's welcome header: the text after `BANNER`, stripped.

    Text without the header is only stripped of surrounding whitespace.
    """
    head, sep, tail = text.partition(BANNER)
    return (tail if sep else head).strip()


def extract_task(observation: str) -> str:
    """The task sentence of an initial observation: the rest of the 'Your task is to:' line.

    'Your task is to: put a clean mug in cabinet.' -> 'put a clean mug in cabinet.'
    Raises ValueError when the observation states no task.
    """
    for line in observation.splitlines():
        line = line.strip()
        if line.startswith(TASK_PREFIX):
            task = line[len(TASK_PREFIX):].strip()
            if task:
                return task
    raise ValueError(f"no '{TASK_PREFIX} ...' line in observation {observation[:200]!r}")

