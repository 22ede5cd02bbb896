"""Scripted demonstrations of the Search QA action format: a format warm-up for small policies.

A policy too small to follow the instruction (SmolLM2-135M writes a valid block in a few percent
of its responses) gives RL nothing to work with. `demonstration` plays a fixed two-turn script
on a real `SearchEnv` and returns each turn's (prompt, response) pair, with the prompt exactly
as the policy will see it in a rollout (``prompt_of``, `envs.demos`):

    turn 1: <think> SEARCH_THOUGHT </think>\\n<search> q </search>           (q: the question)
    turn 2: <think> ANSWER_THOUGHT </think>\\n<answer> g </answer>

where g is the first golden answer the passages of turn 2 hold.

The second turn's prompt holds the passages the retriever returned for q; the golden answer
comes from the task, so demonstrations are built from training tasks only. A task is shown only
when those passages hold a golden answer (`grounded_answer`: SQuAD-normalised, as whole words): the
script then teaches reading the answer off the passages, never stating one they do not give
(for the vendored training split: 42 of 80 questions).
"""

from __future__ import annotations

from seed_jax.envs.demos import PromptOf, env_prompt
from seed_jax.envs.search.env import SearchEnv
from seed_jax.envs.search.reward import normalize_answer

SEARCH_THOUGHT = "I need to look this up."
ANSWER_THOUGHT = "The information answers it."


def grounded_answer(text: str, golden_answers) -> str | None:
    """The first golden answer that occurs in ``text`` as whole words, both SQuAD-normalised
    (`envs.search.reward.normalize_answer`); None when none does."""
    hay = f" {normalize_answer(text)} "
    for a in golden_answers:
        g = normalize_answer(str(a))
        if g and f" {g} " in hay:
            return str(a)
    return None


def demonstration(env: SearchEnv, task: dict, prompt_of: PromptOf = env_prompt) -> list[tuple[str, str]]:
    """``[(prompt_1, search response), (prompt_2, answer response)]`` of the script above (each
    prompt as ``prompt_of`` reads it, `envs.demos`); ``[]`` when the passages the search returns
    hold no golden answer (`grounded_answer`)."""
    env.reset(task)
    first_prompt = prompt_of(env)
    search = f"<think> {SEARCH_THOUGHT} </think>\n<search> {env.task_description} </search>"
    information, *_ = env.step(search)
    golden = grounded_answer(information, task["golden_answers"])
    if golden is None:
        return []
    second_prompt = prompt_of(env)
    answer = f"<think> {ANSWER_THOUGHT} </think>\n<answer> {golden} </answer>"
    return [(first_prompt, search), (second_prompt, answer)]
