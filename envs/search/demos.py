"""Scripted demonstrations of the Search QA action format: a format warm-up for small policies.

A policy too small to follow the instruction (SmolLM2-135M writes a valid block in a few percent
of its responses) gives RL nothing to work with. `demonstration` plays a fixed two-turn script
on a real `SearchEnv` and returns each turn's (prompt, response) pair, with the prompt exactly
as the policy will see it in a rollout (``env.build_prompt()``):

    turn 1: <think> SEARCH_THOUGHT </think>\\n<search> q </search>           (q: the question)
    turn 2: <think> ANSWER_THOUGHT </think>\\n<answer> golden_answers[0] </answer>

The second turn's prompt holds the passages the retriever returned for q; the golden answer
comes from the task, so demonstrations are built from training tasks only.
"""

from __future__ import annotations

from envs.search.env import SearchEnv

SEARCH_THOUGHT = "I need to look this up."
ANSWER_THOUGHT = "The information answers it."


def demonstration(env: SearchEnv, task: dict) -> list[tuple[str, str]]:
    """``[(prompt_1, search response), (prompt_2, answer response)]`` of the script above."""
    env.reset(task)
    first_prompt = env.build_prompt()
    search = f"<think> {SEARCH_THOUGHT} </think>\n<search> {env.task_description} </search>"
    env.step(search)
    second_prompt = env.build_prompt()
    answer = f"<think> {ANSWER_THOUGHT} </think>\n<answer> {task['golden_answers'][0]} </answer>"
    return [(first_prompt, search), (second_prompt, answer)]
