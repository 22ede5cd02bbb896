"""What the scripted demonstrations of the action format share (the format warm-up,
docs/METHOD.md §2.4): how a demonstration turn's prompt is read off the environment, and the
response layout of the ``<action>`` environments.

A demonstration plays a fixed script on a real environment and returns each turn's
``(prompt, response)``; ``prompt_of(env)`` gives the prompt as the policy would see it at that
state. The default is the env's own prompt (`env_prompt`); the pipeline passes one that fits it
to the rollout's token cap the way the rollout does (`seed_jax.rollout.loop.fit_prompt`).
"""

from __future__ import annotations

from collections.abc import Callable

from seed_jax.envs.base import Environment

PromptOf = Callable[[Environment], str]


def env_prompt(env: Environment) -> str:
    """``env.build_prompt()``: the prompt of the current state, uncapped."""
    return env.build_prompt()


def action_response(thought: str, action: str) -> str:
    """``<think> thought </think>\\n<action> action </action>``: a well-formed response of the
    environments whose actions are ``<action>`` blocks (ALFWorld, WebShop, household)."""
    return f"<think> {thought} </think>\n<action> {action} </action>"
