"""Search QA environment (docs/METHOD.md §5): search with `<search>q</search>`, finish with
`<answer>a</answer>`, reward = exact match (SQuAD normalisation) of the answer.

Episode rules
- A valid ``<search>q</search>`` retrieves the top-`topk` (3) passages; the observation is
  ``<information>Doc 1(Title: ...) ...\\nDoc 2(...) ...</information>``; reward 0.
- A valid ``<answer>a</answer>`` ends the episode with reward EM(a, golden_answers) in {0, 1}.
- An invalid response (missing / duplicated / mixed / unclosed / empty block, CJK text) is a
  no-op for the task (nothing is retrieved) but it consumes one of the `max_steps` turns and
  gets reward ``-invalid_penalty`` (-0.01); the observation tells the model why.
- After `max_steps` (4) turns without an answer the episode ends; the last step's reward is
  0 (or -0.01 when that last response was invalid).

info keys (reset and step): those of the `envs.base` contract (``action_text`` is the query or
the answer as written, stripped; '' when invalid; ``data_source``), and ``action_kind``
('search', 'answer'; only after a step), ``retrieved`` (ids and titles of the passages).
"""

from __future__ import annotations

from seed_jax.envs.actions import parse_action
from seed_jax.envs.base import Environment, EnvSpec, StepRecord
from seed_jax.envs.search.corpus import format_information
from seed_jax.envs.search.data import validate_task
from seed_jax.envs.search.retriever import Retriever
from seed_jax.envs.search.reward import exact_match

SEARCH_SPEC = EnvSpec(name="search", action_kinds=("search", "answer"), invalid_penalty=0.01, max_steps=4,
                      history_window=4, success_threshold=1.0)

_REASONS = {
    "missing": "no <search> or <answer> block was found",
    "duplicated": "it held more than one action block",
    "mixed": "it held both a <search> and an <answer> block",
    "unclosed": "an action tag was not closed",
    "cjk": "it contained Chinese, Japanese or Korean characters",
    "empty": "the action block was empty",
}

_INTRO = "You are an expert agent answering a question step by step with the help of a search engine."
_INSTRUCTION = (
    "Now respond for the current step. First reason inside <think> </think>. Then give exactly one "
    "action: <search> your query </search> to look up missing knowledge, or <answer> your answer "
    "</answer> with a short final answer and no explanation, e.g. <answer>Beijing</answer>."
)


def invalid_message(reason: str) -> str:
    """Observation after an invalid response."""
    why = _REASONS.get(reason, reason or "it could not be parsed")
    return (
        f"Invalid action: {why}. Reply with <think>...</think> followed by exactly one "
        "<search>query</search> or <answer>answer</answer>."
    )


class SearchEnv(Environment):
    """One Search QA episode at a time over a `Retriever` (see module docstring for rules)."""

    def __init__(self, retriever: Retriever, topk: int = 3, max_steps: int | None = None, history_window: int | None = None):
        if topk < 1:
            raise ValueError(f"topk must be >= 1, got {topk}")
        self.retriever = retriever
        self.topk = topk
        self.spec = SEARCH_SPEC.with_overrides(max_steps=max_steps, history_window=history_window)
        self._task: dict | None = None
        self._history: list[StepRecord] = []
        self._steps = 0
        self._done = False

    # -- state ----------------------------------------------------------------------------
    @property
    def task(self) -> dict:
        if self._task is None:
            raise RuntimeError("no task: call reset(task) first")
        return self._task

    @property
    def task_description(self) -> str:
        return " ".join(self.task["question"].split())

    @property
    def step_count(self) -> int:
        return self._steps

    @property
    def done(self) -> bool:
        return self._done

    @property
    def history(self) -> list[StepRecord]:
        return list(self._history)

    # -- contract -------------------------------------------------------------------------
    def reset(self, task: dict) -> tuple[str, dict]:
        """Start an episode; returns (ordinary prompt, info). raw_observation = 'Question: q'."""
        self._task = validate_task(task)
        self._history, self._steps, self._done = [], 0, False
        info = self._info(valid=True, won=False, raw=f"Question: {self.task_description}", retrieved=[], reason="",
                          action_text="")
        return self.build_prompt(), info

    def step(self, response_text: str) -> tuple[str, float, bool, dict]:
        """Apply one raw model response; returns (raw observation, reward, done, info)."""
        task = self.task
        if self._done:
            raise RuntimeError("episode is over: call reset(task) before stepping again")
        parsed = parse_action(response_text, self.spec.action_kinds)
        self._steps += 1
        out_of_turns = self._steps >= self.spec.max_steps
        retrieved: list[dict] = []
        won = False
        if not parsed.valid:
            obs = invalid_message(parsed.reason)
            reward, done = -self.spec.invalid_penalty, out_of_turns
            action = f"(invalid response: {parsed.reason})"
        elif parsed.kind == "search":
            passages = self.retriever.search([parsed.text], self.topk)[0]
            retrieved = [{"id": p.id, "title": p.title} for p in passages]
            obs = format_information(passages)
            reward, done = 0.0, out_of_turns
            action = f"<search> {parsed.text} </search>"
        else:  # answer
            reward = exact_match(parsed.text, task["golden_answers"])
            won = reward >= self.spec.success_threshold
            obs, done = f"Final answer submitted: {parsed.text}", True
            action = f"<answer> {parsed.text} </answer>"
        self._history.append(StepRecord(observation=obs, action=action))
        self._done = done
        info = self._info(valid=parsed.valid, won=won, raw=obs, retrieved=retrieved, reason=parsed.reason,
                          action_text=parsed.text)
        info["action_kind"] = parsed.kind
        return obs, float(reward), done, info

    def build_prompt(self) -> str:
        """Ordinary prompt: intro, 'Your question: q', last `history_window` steps, instruction."""
        return self._prompt(self.spec.history_window)

    def prompt_variants(self) -> list[str]:
        """Fewer past steps, down to the last one: its <information> is the current observation."""
        return [self._prompt(k) for k in range(min(self.spec.history_window, len(self._history)) - 1, 0, -1)]

    def _prompt(self, history_window: int) -> str:
        lines = [_INTRO, f"Your question: {self.task_description}"]
        if self._history:
            n = len(self._history)
            window = self._history[-history_window:] if history_window > 0 else []
            lines.append(
                f"You have taken {n} step(s); {max(self.spec.max_steps - n, 0)} remain. Recent history "
                "(your <search> queries and the <information> the search engine returned):"
            )
            for i, rec in enumerate(window, n - len(window) + 1):
                lines.append(f"Step {i}: {rec.action}\n{rec.observation}")
        lines.append(_INSTRUCTION)
        return "\n".join(lines)

    def _info(self, *, valid: bool, won: bool, raw: str, retrieved: list[dict], reason: str, action_text: str) -> dict:
        return {
            "valid": valid,
            "won": won,
            "raw_observation": raw,
            "action_text": action_text,
            "retrieved": retrieved,
            "reason": reason,
            "data_source": self.task["data_source"],
            "task_id": self.task["task_id"],
            "step": self._steps,
        }
