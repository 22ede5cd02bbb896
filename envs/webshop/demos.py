"""Scripted demonstrations of WebShop's action format from the goal itself: a format warm-up
for small policies (docs/METHOD.md §2.4).

A goal names its product and options. `demonstration` plays, on a real `WebShopEnv`:

    turn 1: search[q]             q: the instruction up to its price clause (`goal_query`)
    turn 2: click[asin]           the goal's product, listed on the first results page
    turn 3..: click[v]            each of the goal's option values, in the goal's order
    last:   click[buy now]

each as ``<think> THOUGHT_t </think>\\n<action> a_t </action>``, with each turn's prompt as the
policy sees it (``prompt_of``, `envs.demos`). A goal is shown only when its product is on the
first results page of that search and the purchase scores 1 (a win) within the env's step
limit: the script teaches copying the request into the search, opening a listed product,
choosing its listed options and buying, never a purchase that fails. Demonstrations are built
from training goals only.
"""

from __future__ import annotations

import re

from seed_jax.envs.demos import PromptOf, action_response, env_prompt
from seed_jax.envs.webshop.env import WebShopEnv

SEARCH_THOUGHT = "I search for the product the task asks for."
PRODUCT_THOUGHT = "This result matches the task."
OPTION_THOUGHT = "The task asks for this option."
BUY_THOUGHT = "Everything matches the task, so I buy it."
_PRICE = re.compile(r",? and price lower than .*$", re.IGNORECASE)


def goal_query(instruction: str) -> str:
    """The instruction without its trailing price clause (', and price lower than 40.00
    dollars'), lower-cased: what turn 1 searches for."""
    return _PRICE.sub("", instruction).strip().lower()


def demonstration(env: WebShopEnv, task: dict, prompt_of: PromptOf = env_prompt) -> list[tuple[str, str]]:
    """``[(prompt_t, response_t), ...]`` of the script above; ``[]`` when the goal's product is not
    on the first results page, an option is not offered, or the purchase does not win."""
    env.reset(task)
    goal = env.goal
    options = goal.goal_options if isinstance(goal.goal_options, list) else list(goal.goal_options.values())
    script = [(SEARCH_THOUGHT, f"search[{goal_query(goal.instruction_text)}]"),
              (PRODUCT_THOUGHT, f"click[{goal.asin.lower()}]"),
              *[(OPTION_THOUGHT, f"click[{str(v).lower()}]") for v in options],
              (BUY_THOUGHT, "click[buy now]")]
    if len(script) > env.max_steps:
        return []
    turns, won = [], False
    for thought, action in script:
        prompt = prompt_of(env)
        response = action_response(thought, action)
        _, _, done, info = env.step(response)
        if not info["valid"]:
            return []
        turns.append((prompt, response))
        won = bool(info["won"])
        if done:
            break
    return turns if won else []
