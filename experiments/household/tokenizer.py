"""The household study's word tokenizer (`seed_jax.models.word_tokenizer` over a closed corpus).

The corpus covers every text the policy reads or writes in the study: the household
environment's sentences (`envs.household.vocab.household_texts`: prompts, observations,
commands, the scripted analyzer's phrases), the skill block H(h, s) and the repair prompt
(`seed_jax.skills`), the analyzer prompt x_tau for a success and a failure, whole and cut to a
tiny budget (so its omission notes for observations, responses and steps are in), and the JSON
answer layout (`seed_jax.skills.canonical_answer`).
"""

from __future__ import annotations

from collections.abc import Iterable

from seed_jax.envs.household.vocab import household_texts
from seed_jax.models.word_tokenizer import build_word_tokenizer
from seed_jax.rollout.trajectory import StepSample, Trajectory
from seed_jax.skills import REPAIR_PROMPT, SKILL_HEADING, SKILL_SENTENCE, build_analyzer_prompt, canonical_answer

# longer than the analyzer prompt keeps of a response when it cuts one (its last 300 characters)
_LONG_RESPONSE = " ".join(["x"] * 250)


def analyzer_prompt_texts() -> list[str]:
    """x_tau of a won and a lost three-step trajectory, without a budget and cut to 10 characters:
    the cut one holds every omission note of `build_analyzer_prompt` (observation, response,
    dropped steps: the middle one)."""
    texts = []
    for won in (True, False):
        step = StepSample(prompt_ids=[], response_ids=[], response_logprobs=[], response_text=_LONG_RESPONSE,
                          prompt_text="", raw_observation="x", valid=won, reward=0.0)
        traj = Trajectory(task_id="t", group_id=0, traj_id="t", task_description="x", steps=[step, step, step],
                          episode_reward=10.0 * won, won=won, final_observation="x")
        texts += [build_analyzer_prompt(traj, max_chars=None), build_analyzer_prompt(traj, max_chars=10)]
    return texts


def household_corpus() -> list[str]:
    """Texts covering the household environment, its scripted annotator and the analyzer prompt."""
    return [*household_texts(), SKILL_HEADING, SKILL_SENTENCE, REPAIR_PROMPT, *analyzer_prompt_texts(),
            canonical_answer("x", "x")]


def build_household_tokenizer(extra_texts: Iterable[str] = (), extra_words: Iterable[str] = ()):
    """The word tokenizer of the household study: `household_corpus()` + `extra_texts`."""
    return build_word_tokenizer(list(household_corpus()) + list(extra_texts), extra_words)
