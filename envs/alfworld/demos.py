"""Scripted demonstrations of ALFWorld's action format from the games' expert walkthroughs: a
format warm-up for small policies (docs/METHOD.md §2.4).

Every ALFWorld game file stores its expert's command list (``walkthrough``,
`envs.alfworld.games.load_walkthrough`). `demonstration` plays it on a real `AlfWorldEnv` and
returns each turn's ``(prompt, response)``, the prompt as the policy sees it at that state
(``prompt_of``, `envs.demos`), the response

    <think> THOUGHT </think>\\n<action> c_t </action>            (c_t: the walkthrough's t-th command)

Each command is one of the admissible actions listed in that turn's prompt. A game is shown
only when its walkthrough wins within the env's step limit (``max_steps``): the script then
teaches choosing a listed action turn after turn, and every shown episode ends solved. The
walkthrough is the expert's, who knows where objects are; the warm-up teaches the format and the
use of the admissible list, not where to look. Demonstrations are built from training games only.
"""

from __future__ import annotations

from seed_jax.envs.alfworld.env import AlfWorldEnv
from seed_jax.envs.alfworld.games import load_walkthrough
from seed_jax.envs.demos import PromptOf, action_response, env_prompt

THOUGHT = "I choose the admissible action that brings me closer to the task."


def demonstration(env: AlfWorldEnv, task: dict, prompt_of: PromptOf = env_prompt) -> list[tuple[str, str]]:
    """``[(prompt_t, response_t), ...]`` of the walkthrough's turns; ``[]`` when the game has no
    walkthrough, or it does not win within the env's step limit."""
    env.reset(task)
    walkthrough = load_walkthrough(env.game_file) or []
    if not walkthrough or len(walkthrough) > env.spec.max_steps:
        return []
    turns, won = [], False
    for command in walkthrough:
        prompt = prompt_of(env)
        if command not in env.admissible_commands:
            return []
        response = action_response(THOUGHT, command)
        _, _, done, info = env.step(response)
        turns.append((prompt, response))
        won = bool(info["won"])
        if done:
            break
    return turns if won else []
