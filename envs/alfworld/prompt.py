"""The ALFWorld agent prompt (verl-agent / GiGPO template, task on its own line):
`ALFWORLD_PROMPT`, ALFWorld's sentences in the shared layout of `envs.prompt.HistoryPrompt`.

Layout (the history sentence is left out at step 1, when nothing has been done yet):

    You are an expert agent operating in the ALFRED Embodied Environment.
    Your task is to: {task}
    Prior to this step, you have already taken {n} step(s). Below are the most recent {k} observations and the corresponding actions you took:
    [Observation {i}: '{obs_i}', Action {i}: '{act_i}']        (one line per kept step, i = n-k+1 .. n)
    You are now at step {n+1} and your current observation is: {observation}
    Your admissible actions of the current situation are: ['{a_1}'
     '{a_2}' ...].

    Now it's your turn to take an action.
    You should first reason step-by-step ... <think> </think> tags.
    Once you've finished your reasoning, ... within <action> </action> tags.

The 'Your task is to:' line is the anchor after which H(h, s) inserts a skill (docs/METHOD.md §4.1);
observations are shown without their own task line so the anchor is unique.
"""

from __future__ import annotations

from seed_jax.envs.prompt import HistoryPrompt

ROLE_LINE = "You are an expert agent operating in the ALFRED Embodied Environment."
INSTRUCTION = (
    "Now it's your turn to take an action.\n"
    "You should first reason step-by-step about the current situation. "
    "This reasoning process MUST be enclosed within <think> </think> tags.\n"
    "Once you've finished your reasoning, you should choose an admissible action for current step "
    "and present it within <action> </action> tags."
)
ALFWORLD_PROMPT = HistoryPrompt(
    role_line=ROLE_LINE,
    history_sentence="Prior to this step, you have already taken {n} step(s). Below are the most recent "
                     "{k} observations and the corresponding actions you took:",
    current_sentence="You are now at step {step} and your current observation is: {observation}",
    admissible_sentence="Your admissible actions of the current situation are: {actions}.",
    instruction=INSTRUCTION,
)

