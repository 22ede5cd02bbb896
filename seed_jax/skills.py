"""Hindsight skills: the analyzer input x_tau, tolerant parsing of its JSON answer, and H(h, s).

docs/METHOD.md §2 and §4. No JAX: generation is done by the caller (the policy sampler, or an
external chat API through `annotate`).

- `build_analyzer_prompt(traj)` -> x_tau: task, outcome label, then per step its index, the raw
  environment observation, the full model response, whether the action was valid and the
  step's reward (and invalid-action penalty), the episode's final reward (and task score,
  WebShop) in the header, then the instruction (success -> reusable workflow; failure -> avoidance
  rule) and the answer format: ONE JSON object with string fields ``episode_summary`` and
  ``episode_skill``. Long trajectories are cut to ``max_chars`` characters (see the function).
- `parse_skill(text)` -> `SkillParse`; tolerant, never raises; ok iff both fields are strings
  and the skill has >= 5 words.
- `insert_skill(prompt_text, skill)` -> H(h, s): a titled block inserted after the task line.
- `REPAIR_PROMPT`, `annotate(...)`: up to 2 repair turns for an external annotator.
- `SkillRecord`: one stage-1 SFT example (analyzer prompt -> canonical JSON answer).
- `FIXED_TEXTS`: the fixed sentences written into prompts (for tokenizer vocabularies).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import re
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import json_repair

from seed_jax.jsonl import iter_records, write_records
from seed_jax.lenient_json import json_objects
from seed_jax.rollout.trajectory import StepSample, Trajectory

MIN_SKILL_WORDS = 5
DEFAULT_MAX_CHARS = 16000  # ~4k tokens at ~4 characters per token
SKILL_HEADING = "## Episode-level skill"
SKILL_SENTENCE = "Use the following skill to guide your decisions in this episode."
REPAIR_PROMPT = (
    "Your answer could not be parsed. Return only one valid JSON object with exactly two "
    'string fields, "episode_summary" and "episode_skill" (the skill at least 5 words), '
    "and nothing else: no code fences, no text before or after it."
)

_OBS_OMITTED = "[observation omitted to save space]"
_RESP_OMITTED = "[... earlier part of the response omitted to save space] "
_RESP_TAIL_CHARS = 300


# ----------------------------------------------------------------------------------------------
# x_tau


def is_success(traj: Trajectory, success_threshold: float | None = None) -> bool:
    """Success iff R(tau) >= success_threshold when given, else the trajectory's `won` flag."""
    if success_threshold is None:
        return bool(traj.won)
    return traj.episode_reward >= success_threshold


def outcome_label(traj: Trajectory, success_threshold: float | None = None) -> str:
    return "success" if is_success(traj, success_threshold) else "failure"


_INSTRUCTION = {
    "success": (
        "The agent SUCCEEDED. Write a reusable workflow for this kind of task: the core "
        "decision rule and the order of actions that led to success, stated generally enough "
        "to reuse in a new episode of the same kind."
    ),
    "failure": (
        "The agent FAILED. Write an avoidance rule for this kind of task: the core mistake that "
        "led to failure and the warning signs that should make the agent change course, stated "
        "generally enough to reuse in a new episode of the same kind."
    ),
}

FIXED_TEXTS: tuple[str, ...] = (SKILL_HEADING, SKILL_SENTENCE, REPAIR_PROMPT, _OBS_OMITTED,
                                _RESP_OMITTED, *_INSTRUCTION.values())
"""The fixed sentences this module writes into prompts besides the prompt layout itself (the
skill block's heading and sentence, the repair prompt, the budget placeholders, the two
instructions), e.g. for the corpus of a closed-vocabulary tokenizer. The layout's own words
are covered by building a prompt (`build_analyzer_prompt`, `skill_block`)."""


def _reward_line(traj: Trajectory) -> str:
    """``Final reward: R(tau)``, with the environment's task score in [0, 1] when it has one
    (WebShop's partial score, ``traj.info['score']``)."""
    score = traj.info.get("score")
    return f"Final reward: {traj.episode_reward:g}" + ("" if score is None else f" (task score {float(score):g} of 1)")


def _header(traj: Trajectory, outcome: str) -> str:
    label = ("SUCCESS: the agent completed the task." if outcome == "success"
             else "FAILURE: the agent did not complete the task.")
    return (
        "You are reviewing one finished episode of an AI agent acting in a text environment, "
        "to extract one lesson for future episodes.\n\n"
        f"## Task\n{traj.task_description.strip()}\n\n"
        f"## Outcome\n{label}\n{_reward_line(traj)}\n\n"
        f"## Episode ({traj.num_steps} steps)"
    )


def _footer(traj: Trajectory, outcome: str) -> str:
    final = ""
    if traj.final_observation.strip():
        final = f"## Final observation\n{traj.final_observation.strip()}\n\n"
    return (
        f"{final}## Your job\n{_INSTRUCTION[outcome]}\n"
        "Answer with ONE JSON object and nothing else. It has two string fields: "
        f'"episode_summary" (what happened, one or two sentences) and "episode_skill" (the '
        f"{'workflow' if outcome == 'success' else 'avoidance rule'}, at least 5 words):\n"
        '{"episode_summary": string, "episode_skill": string}'
    )


def _step_block(index: int, observation: str, response: str, step: StepSample) -> str:
    validity = "yes" if step.valid else "no (invalid format; the environment ignored this step)"
    penalty = f", invalid-action penalty {step.penalty:g}" if step.penalty else ""
    return (f"### Step {index}\nObservation:\n{observation.strip()}\n"
            f"Agent response:\n{response.strip()}\nAction valid: {validity}\n"
            f"Reward: {step.reward:g}{penalty}")


def build_analyzer_prompt(traj: Trajectory, success_threshold: float | None = None,
                          max_chars: int | None = DEFAULT_MAX_CHARS) -> str:
    """x_tau, the user message given to the analyzer (`render_analyzer_prompt` without its flag)."""
    return render_analyzer_prompt(traj, success_threshold, max_chars)[0]


def middle_out(n: int, k: int) -> tuple[int, int]:
    """The ``k``-th range ``[lo, hi)`` of steps to omit out of ``n``: it starts at the middle step
    ``n // 2`` and grows one step at a time, alternately towards the end and towards the start,
    never over the first (0) or the last (n - 1) step; ``k = 0`` is the empty range."""
    lo = hi = n // 2
    for i in range(k):
        if (i % 2 == 0 and hi < n - 1) or lo <= 1:
            hi = min(hi + 1, n - 1)
        else:
            lo -= 1
    return lo, hi


def render_analyzer_prompt(traj: Trajectory, success_threshold: float | None = None,
                           max_chars: int | None = DEFAULT_MAX_CHARS) -> tuple[str, bool]:
    """``(x_tau, cut)``: x_tau of docs/METHOD.md §4.2 (the user message given to the analyzer)
    and whether the budget (§4.4) shortened it.

    Layout: header (task, outcome with the final reward ``R(tau)`` and, where the environment
    has one, its task score), one block per step (1-based index, raw observation, full response,
    validity, the step's reward ``r_t`` and invalid-action penalty ``p_t`` when charged), the
    final observation when the trajectory has one, the instruction.

    Budget: when the text exceeds ``max_chars`` (None = no limit), it is shortened in stages,
    each stopping as soon as the text fits: (1) steps are dropped from the middle of the
    trajectory outwards (`middle_out`: the first and the last step always stay), leaving a note
    of which; (2) the observations of the remaining steps are replaced by a placeholder, oldest
    first; (3) their responses are cut to their last 300 characters (the action block sits at
    the end), oldest first. Header and instruction are never cut, so the result can still exceed
    the budget for extreme inputs.
    """
    outcome = outcome_label(traj, success_threshold)
    header, footer = _header(traj, outcome), _footer(traj, outcome)
    n = len(traj.steps)
    obs = [s.raw_observation for s in traj.steps]
    resp = [s.response_text for s in traj.steps]
    lo = hi = 0  # the omitted steps [lo, hi)

    def render() -> str:
        blocks = [_step_block(i + 1, obs[i], resp[i], traj.steps[i]) for i in range(lo)]
        if hi > lo:
            blocks.append(f"[steps {lo + 1}-{hi} omitted to save space]")
        blocks += [_step_block(i + 1, obs[i], resp[i], traj.steps[i]) for i in range(hi, n)]
        return "\n\n".join([header, *blocks, footer])

    text = render()
    if max_chars is None or len(text) <= max_chars:
        return text, False
    for k in range(1, max(n - 1, 0)):
        lo, hi = middle_out(n, k)
        text = render()
        if len(text) <= max_chars:
            return text, True
    for i in [*range(lo), *range(hi, n)]:
        obs[i] = _OBS_OMITTED
        text = render()
        if len(text) <= max_chars:
            return text, True
    for i in [*range(lo), *range(hi, n)]:
        if len(resp[i]) > _RESP_TAIL_CHARS + len(_RESP_OMITTED):
            resp[i] = _RESP_OMITTED + resp[i].strip()[-_RESP_TAIL_CHARS:]
            text = render()
            if len(text) <= max_chars:
                return text, True
    return text, True


# ----------------------------------------------------------------------------------------------
# tolerant parsing of the answer


@dataclasses.dataclass(frozen=True)
class SkillParse:
    summary: str
    skill: str
    ok: bool
    reason: str = ""  # why not ok ('' when ok)


def _judge(obj: dict) -> SkillParse:
    summary, skill = obj.get("episode_summary"), obj.get("episode_skill")
    for name, val in (("episode_summary", summary), ("episode_skill", skill)):
        if val is None:
            return SkillParse("", "", False, f"missing field {name}")
        if not isinstance(val, str):
            return SkillParse("", "", False, f"field {name} is {type(val).__name__}, not a string")
    summary, skill = summary.strip(), skill.strip()
    n = len(skill.split())
    if n < MIN_SKILL_WORDS:
        return SkillParse(summary, skill, False, f"skill has {n} words (< {MIN_SKILL_WORDS})")
    return SkillParse(summary, skill, True, "")


def parse_skill(text: Any) -> SkillParse:
    """Read the analyzer's JSON answer; never raises.

    Candidates: the objects of `seed_jax.lenient_json.json_objects` (inside ```json fences
    first, then starting at each '{' of the text, nested ones included; each read with `json`
    and, failing that, leniently: single or smart quotes, trailing commas, bare keys, Python
    literals and escapes, then as cut off by the token limit: a missing final ``}`` or ``"}``,
    a dangling ',' or half-written last member), and last the object that the ``json_repair``
    library makes of the whole text (missing commas, unquoted values, ...). The first candidate
    with string fields ``episode_summary`` and ``episode_skill`` whose skill has >= 5 words wins
    (fields stripped). Otherwise ok=False with the reason of the first candidate that had both
    fields, else of the first object, else 'no JSON object'.
    """
    if not isinstance(text, str):
        return SkillParse("", "", False, f"answer is {type(text).__name__}, not text")
    first_failure: SkillParse | None = None
    first_with_fields: SkillParse | None = None
    try:
        for obj in itertools.chain(json_objects(text), _repaired(text)):
            res = _judge(obj)
            if res.ok:
                return res
            first_failure = first_failure or res
            if first_with_fields is None and "episode_summary" in obj and "episode_skill" in obj:
                first_with_fields = res
    except Exception as e:
        return SkillParse("", "", False, f"parser error: {type(e).__name__}")
    return first_with_fields or first_failure or SkillParse("", "", False, "no JSON object")


def _repaired(text: str) -> Iterator[dict]:
    """The dicts that ``json_repair.repair_json`` reads from ``text`` (the object itself, or
    the objects of a list); nothing when it finds none."""
    if "{" not in text:
        return
    value = json_repair.repair_json(text, return_objects=True)
    for obj in value if isinstance(value, list) else [value]:
        if isinstance(obj, dict):
            yield obj


# ----------------------------------------------------------------------------------------------
# H(h, s)


_TASK_LINE = re.compile(r"Your task is to:|Your question:")


def skill_block(skill: str) -> str:
    """The titled block that H inserts: heading, one sentence, the skill text."""
    return f"{SKILL_HEADING}\n{SKILL_SENTENCE}\n{skill.strip()}"


def find_task_line(lines: list[str]) -> int | None:
    """Index of the first line containing 'Your task is to:' or 'Your question:', or starting
    (after indentation) with 'Your goal'; None when there is none."""
    for i, line in enumerate(lines):
        if _TASK_LINE.search(line) or line.lstrip().startswith("Your goal"):
            return i
    return None


def insert_skill(prompt_text: str, skill: str) -> str:
    """H(h, s) of docs/METHOD.md §4.1, on the user-message text (the caller applies the same chat
    template and left truncation as for the ordinary prompt).

    With ``B = skill_block(skill)`` and the prompt split on '\\n' into lines L:
    1. task line at index i (see `find_task_line`): L[:i+1] + ['', B, ''] + L[i+1:];
    2. else, last non-empty line at index j: L[:j] + ['', B, ''] + L[j:] (no leading '' when
       j == 0), i.e. before the final instruction line;
    3. else (blank prompt): prompt + B.
    Lines are joined with '\\n'. Raises ValueError for a blank skill.
    """
    if not isinstance(skill, str) or not skill.strip():
        raise ValueError("insert_skill: the skill is empty; trajectories without a skill get "
                         "no teacher prompt (OPD mask 0)")
    block = skill_block(skill)
    lines = prompt_text.split("\n")
    i = find_task_line(lines)
    if i is not None:
        return "\n".join(lines[: i + 1] + ["", block, ""] + lines[i + 1 :])
    nonempty = [k for k, line in enumerate(lines) if line.strip()]
    if nonempty:
        j = nonempty[-1]
        return "\n".join(lines[:j] + ([] if j == 0 else [""]) + [block, ""] + lines[j:])
    return prompt_text + block


# ----------------------------------------------------------------------------------------------
# external annotation and SFT records


def annotate(analyzer_prompt: str, chat: Callable[[list[dict[str, str]]], str],
             max_repairs: int = 2) -> tuple[SkillParse, list[str]]:
    """Ask `chat` (OpenAI-style messages -> answer text) for the skill; after an answer that
    does not parse, send it back with `REPAIR_PROMPT`, at most `max_repairs` times.
    Returns (the last parse, all raw answers)."""
    messages = [{"role": "user", "content": analyzer_prompt}]
    answers: list[str] = []
    parse = SkillParse("", "", False, "not asked")
    for _ in range(1 + max_repairs):
        answer = chat(list(messages))
        answers.append(answer)
        parse = parse_skill(answer)
        if parse.ok:
            break
        messages += [{"role": "assistant", "content": str(answer)},
                     {"role": "user", "content": REPAIR_PROMPT}]
    return parse, answers


def canonical_answer(summary: str, skill: str) -> str:
    """The SFT target: ``{"episode_summary": ..., "episode_skill": ...}`` (json.dumps, UTF-8)."""
    return json.dumps({"episode_summary": summary, "episode_skill": skill}, ensure_ascii=False)


@dataclasses.dataclass
class SkillRecord:
    """One stage-1 SFT example: analyzer prompt x_tau -> JSON answer (loss on answer only)."""

    prompt: str
    answer: str  # canonical_answer(summary, skill)
    traj_id: str
    outcome: str  # 'success' | 'failure'
    task_id: str = ""

    @classmethod
    def from_parse(cls, traj: Trajectory, prompt: str, parse: SkillParse,
                   success_threshold: float | None = None) -> SkillRecord:
        if not parse.ok:
            raise ValueError(f"SkillRecord.from_parse: trajectory {traj.traj_id} has no valid "
                             f"skill ({parse.reason})")
        return cls(prompt=prompt, answer=canonical_answer(parse.summary, parse.skill),
                   traj_id=traj.traj_id, outcome=outcome_label(traj, success_threshold),
                   task_id=traj.task_id)

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str) -> SkillRecord:
        d = json.loads(text)
        missing = [k for k in ("prompt", "answer", "traj_id", "outcome") if k not in d]
        if missing:
            raise ValueError(f"SkillRecord lacks field(s) {missing}")
        return cls(prompt=str(d["prompt"]), answer=str(d["answer"]), traj_id=str(d["traj_id"]),
                   outcome=str(d["outcome"]), task_id=str(d.get("task_id", "")))


def write_skill_records(path: str | os.PathLike, records: Iterable[SkillRecord]) -> int:
    """One `SkillRecord` per line (UTF-8); returns the number written. Overwrites `path`."""
    return write_records(path, records)


def read_skill_records(path: str | os.PathLike) -> list[SkillRecord]:
    """The records of a file written by `write_skill_records` (blank lines skipped)."""
    return list(iter_records(path, SkillRecord.from_json, "skill"))
