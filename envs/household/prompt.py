"""The household agent prompt `HOUSEHOLD_PROMPT`: ALFWorld's layout (verl-agent template,
`envs.prompt.HistoryPrompt`) in shorter sentences.

    You are an expert agent in a household.
    Your task is to: {task}
    Prior to this step, you took {n} step(s). Your last {k} observations and actions:
    [Observation {i}: '{obs_i}', Action {i}: '{act_i}']        (one line per kept step, i = n-k+1 .. n)
    You are now at step {n+1}. Observation: {observation}
    Your admissible actions are: ['{a_1}'
     '{a_2}' ...].

    Think inside <think> </think>, then give one admissible action inside <action> </action>.

The history sentence is left out at step 1. The 'Your task is to:' line is the anchor after
which H(h, s) inserts a skill; observations are shown without their own task line.
"""

from __future__ import annotations

from seed_jax.envs.prompt import HistoryPrompt

ROLE_LINE = "You are an expert agent in a household."
INSTRUCTION = "Think inside <think> </think>, then give one admissible action inside <action> </action>."
HOUSEHOLD_PROMPT = HistoryPrompt(
    role_line=ROLE_LINE,
    history_sentence="Prior to this step, you took {n} step(s). Your last {k} observations and actions:",
    current_sentence="You are now at step {step}. Observation: {observation}",
    admissible_sentence="Your admissible actions are: {actions}.",
    instruction=INSTRUCTION,
)

