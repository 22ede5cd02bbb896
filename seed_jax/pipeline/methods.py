"""The methods of a run (docs/METHOD.md §7) and what each one turns on.

``config.method`` names one of `METHODS`; `switches(config)` says which parts of the pipeline
run for it. A new method is one entry in `METHOD_SWITCHES` (and, when it needs a new kind of
skill source, the analyzer that provides it).
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class MethodSwitches:
    """What a method (docs/METHOD.md §7) turns on: stage-1 SFT, OPD, skill source, skills in prompts."""

    sft: bool
    opd: bool
    skill_source: str  # online | static | shuffled (online skills permuted across trajectories) | none
    prompt_skills: bool  # skills shown in the policy's prompts (train and eval)
    train: bool  # run RL updates at all


METHOD_SWITCHES = {
    "seed": MethodSwitches(sft=True, opd=True, skill_source="online", prompt_skills=False, train=True),
    "grpo": MethodSwitches(sft=False, opd=False, skill_source="none", prompt_skills=False, train=True),
    "seed_no_sft": MethodSwitches(sft=False, opd=True, skill_source="online", prompt_skills=False, train=True),
    "sft_grpo": MethodSwitches(sft=True, opd=False, skill_source="none", prompt_skills=False, train=True),
    "seed_static": MethodSwitches(sft=True, opd=True, skill_source="static", prompt_skills=False, train=True),
    "skill_prompt": MethodSwitches(sft=False, opd=False, skill_source="none", prompt_skills=True, train=False),
    "skill_grpo": MethodSwitches(sft=False, opd=False, skill_source="none", prompt_skills=True, train=True),
    # the paper's first baseline row: the base model evaluated, nothing trained, no skills
    "vanilla": MethodSwitches(sft=False, opd=False, skill_source="none", prompt_skills=False, train=False),
    # control: each trajectory gets another trajectory's skill (a wrong hint)
    "seed_shuffled": MethodSwitches(sft=True, opd=True, skill_source="shuffled", prompt_skills=False, train=True),
}

METHODS = tuple(METHOD_SWITCHES)
"""The method names, in the order of the table above (``config.method`` is one of them)."""


def switches(config) -> MethodSwitches:
    """The switches of ``config.method``."""
    return METHOD_SWITCHES[config.method]


def needs_skill_bank(config) -> bool:
    """True when stage 1 must build the skill bank: for SFT, static skills or skills in prompts."""
    s = switches(config)
    return s.sft or s.skill_source == "static" or s.prompt_skills


__all__ = ["METHODS", "METHOD_SWITCHES", "MethodSwitches", "switches", "needs_skill_bank"]
