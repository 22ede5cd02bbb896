"""A tiny counter environment for the pool tests (module-level so spawned workers import it).

The agent moves a counter towards a target with ``<action>inc</action>`` / ``<action>dec</action>``.
Its start value and a per-step "noise" number come from ``random.Random(seed)``, so transcripts
reveal which seed an environment was built with and how many steps it has taken. Test hooks:
the action ``sleep`` sleeps 1 s, ``hang`` sleeps 60 s, ``raise`` raises RuntimeError.
"""

from __future__ import annotations

import os
import random
import time

from seed_jax.envs.actions import parse_action
from seed_jax.envs.base import Environment, EnvSpec


class CounterEnv(Environment):
    spec = EnvSpec(name="counter", action_kinds=("action",), invalid_penalty=0.1, max_steps=8,
                   history_window=2, success_threshold=10.0)

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.target = 0
        self.value = 0
        self.t = 0
        self.obs = ""

    @property
    def task_description(self) -> str:
        return f"bring the counter to {self.target}"

    def reset(self, task):
        self.target = int(task["target"])
        self.value = self.rng.randint(0, 3)
        self.t = 0
        self.obs = f"Counter at {self.value}."
        return self.obs, {"raw_observation": self.obs, "pid": os.getpid(), "seed": self.seed}

    def step(self, response_text: str):
        parsed = parse_action(response_text, self.spec.action_kinds, lowercase=True)
        self.t += 1
        if parsed.valid:
            if parsed.text == "sleep":
                time.sleep(1.0)
            elif parsed.text == "hang":
                time.sleep(60.0)
            elif parsed.text == "raise":
                raise RuntimeError("boom: the counter broke")
            elif parsed.text == "inc":
                self.value += 1
            elif parsed.text == "dec":
                self.value -= 1
        won = self.value == self.target
        reward = (10.0 if won else 0.0) - (0.0 if parsed.valid else self.spec.invalid_penalty)
        done = won or self.t >= self.spec.max_steps
        self.obs = f"Counter at {self.value}. Noise {self.rng.random():.6f}."
        info = {"valid": parsed.valid, "won": won, "raw_observation": self.obs, "pid": os.getpid()}
        return self.obs, reward, done, info

    def build_prompt(self) -> str:
        return (f"You control a counter.\nYour task is to: {self.task_description}.\n"
                f"Step {self.t}. {self.obs}\nAnswer with <action>inc</action> or <action>dec</action>.")


def hang_once_env(seed: int, *, inner, marker: str, host: str):
    """``inner(seed)`` (an env factory), except that on the host whose ``JAX_PROCESS_ID`` is ``host``
    the first step of the whole test (the one that creates the file ``marker``) sleeps for ever:
    an environment step that hangs once on one host (tests/test_pod_stalls.py)."""
    env = inner(seed)
    if os.environ.get("JAX_PROCESS_ID") != host:
        return env
    step = env.step

    def step_or_hang(response_text: str):
        try:
            os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return step(response_text)
        while True:
            time.sleep(3600)

    env.step = step_or_hang
    return env
