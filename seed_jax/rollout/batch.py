"""Trajectories + hindsight skills -> the step-samples of one RL update (host arrays).

One row per step of every trajectory without ``env_error``, in the layout of
`seed_jax.train.batch` (prompt LEFT-padded to ``P``, response RIGHT-padded to ``R``, written by
`pack_rows`): response token ``j`` sits at position ``P + j`` in the student row ``h_t`` and
in its teacher twin ``H(h_t, s_tau)`` (own prompt length ``Pt``, the very same response
tokens). ``P``, ``Pt`` and ``R`` are rounded up with `seed_jax.buckets.round_up` so shapes
(and compiled programs) repeat across updates. Log-probs are not part of the samples: the
update's `seed_jax.train.batch.SeedBatch` is made from them and the log-prob passes in one
call (`StepSamples.to_seed_batch`).

OPD mask (``opd.mask``, `OPD_MASKS`): the response tokens the distillation term acts on, before
the row's ``has_skill``. ``"action"`` (the paper's reading: OPD distils the valid action
tokens)::

    opd_mask[i, j] = m[i, j] * valid_i * [token j has a character outside thinking]

with thinking the `envs.actions.think_spans` of the decoded response (a token of no characters,
e.g. the end token, counts when its position is outside thinking), so the thinking and every
token of an invalid-action step are left out; ``"response"``: ``opd_mask = m`` (every response
token, thinking and invalid responses included).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from seed_jax.buckets import BUCKETS, round_up
from seed_jax.envs.actions import think_spans
from seed_jax.losses import step_advantages
from seed_jax.rollout.trajectory import Trajectory
from seed_jax.skills import find_task_line
from seed_jax.skills import insert_skill as default_insert_skill
from seed_jax.train.batch import RowLayout, SeedBatch, pack_rows


@dataclasses.dataclass(frozen=True)
class RowInfo:
    """Where a batch row came from (for the skill audit and skills.jsonl)."""

    traj_id: str
    step_index: int
    has_skill: bool


@dataclasses.dataclass(frozen=True)
class BatchSettings:
    """How step-samples are cut and scored (the run config's ``rollout`` / ``rl`` keys).

    ``max_prompt_tokens``: cap of the ordinary prompt ``h_t`` (left cut, as in the rollout);
    ``max_teacher_prompt_tokens``: cap of the teacher prompt ``H(h_t, s)`` (`teacher_prompt`:
    never cuts the skill block); ``max_response_tokens``: right cut of the response;
    ``advantage_mode`` / ``penalty_mode``: `seed_jax.losses.step_advantages`; ``opd_mask``:
    the tokens OPD acts on (`OPD_MASKS`, module docstring).
    """

    max_prompt_tokens: int
    max_response_tokens: int
    max_teacher_prompt_tokens: int | None = None  # None: max_prompt_tokens
    advantage_mode: str = "mean_std"
    penalty_mode: str = "after_norm"
    opd_mask: str = "action"

    @property
    def teacher_cap(self) -> int:
        return self.max_teacher_prompt_tokens or self.max_prompt_tokens


def teacher_prompt(prompt_text: str, skill: str, encode_prompt: Callable[[str], list[int]], cap: int,
                   insert_skill: Callable[[str, str], str] = default_insert_skill) -> tuple[list[int], bool]:
    """``(ids, cut)``: ``encode_prompt(H(h, s))`` within ``cap`` tokens, the skill block kept whole.

    Over the cap, the fewest lines of ``h`` right after the task line (the oldest history) are
    dropped before H inserts the skill so that the prompt fits, keeping the final line (the
    instruction); if even that is too long, the ids are cut from the left (the chat header first).
    ``cut``: the prompt was shortened.
    """
    ids = encode_prompt(insert_skill(prompt_text, skill))
    if len(ids) <= cap:
        return ids, False
    lines = prompt_text.split("\n")
    start = (find_task_line(lines) or 0) + 1  # the first line that may go
    last = len(lines) - 1  # the final line (the instruction) stays

    def encoded(k: int) -> list[int]:  # H of h without the k lines after the task line
        return encode_prompt(insert_skill("\n".join(lines[:start] + lines[start + k:]), skill))

    lo, hi = 0, max(last - start, 0)  # fewest lines to drop: binary search (length falls with k)
    while lo < hi:
        mid = (lo + hi) // 2
        if len(encoded(mid)) <= cap:
            hi = mid
        else:
            lo = mid + 1
    ids = encoded(lo)
    return ids[-cap:], True


OPD_MASKS = ("action", "response")  # opd.mask: valid steps' action tokens | every response token


def token_char_spans(ids: Sequence[int], decode: Callable[[list[int]], str]) -> tuple[str, list[tuple[int, int]]]:
    """``(text, spans)``: ``text = decode(ids)`` and each token's ``[start, end)`` characters in it.

    Token by token decoding when the pieces add up to ``text``; else (a character split over
    tokens) ``end_j = len(decode(ids[:j + 1]))``, made non-decreasing."""
    ids = list(ids)
    text = decode(ids)
    pieces = [decode([i]) for i in ids]
    if "".join(pieces) == text:
        ends = list(itertools.accumulate(map(len, pieces)))
    else:
        ends = list(itertools.accumulate((len(decode(ids[:j + 1])) for j in range(len(ids))), max))
    return text, list(zip([0, *ends[:-1]], ends))


def action_token_mask(ids: Sequence[int], valid: bool, decode: Callable[[list[int]], str]) -> np.ndarray:
    """``[len(ids)]`` float32: 1 on the tokens of a valid response with a character outside
    thinking (a token of no characters: its position outside thinking); all 0 when invalid."""
    out = np.zeros(len(ids), np.float32)
    if not valid or not len(ids):
        return out
    text, spans = token_char_spans(ids, decode)
    inside = np.zeros(len(text) + 1, bool)
    for a, b in think_spans(text):
        inside[a:b] = True
    for j, (a, b) in enumerate(spans):
        out[j] = float(not inside[a:b].all()) if b > a else float(not inside[a])
    return out


def splice_teacher(full: Sequence[int], full_teacher: Sequence[int], student: Sequence[int],
                   cap: int) -> tuple[list[int], bool] | None:
    """``(ids, cut)``: the teacher twin of a left-cut student prompt, the skill block spliced into
    the ids the student kept, so that the teacher minus the block is the student (None:
    ``student`` is not a left cut of ``full``); ``cut``: ``cap`` cut it further.

    With ``S = full`` (``encode(h)``), ``T = full_teacher`` (``encode(H(h, s))``), ``k`` their
    common prefix, ``q`` their common suffix (``k + q <= min(|S|, |T|)``), the block
    ``B = T[k:|T| - q]`` and the student ``S[c:]``::

        teacher(c) = T[c:]                          if c <= k  (the insertion point survived)
                   = B + S[max(c, |S| - q):]        if c > k   (it was cut: the block leads)

    Over ``cap`` the smallest larger cut ``c`` that fits is taken (the block kept whole); a cap
    below ``|B|`` keeps the last ``cap`` ids. (When the tokenizer merges across the insertion
    point, ``S`` is not ``T`` minus ``B``: the ``S[k:|S| - q]`` the merge changed are replaced by
    ``B``.)
    """
    S, T = list(full), list(full_teacher)
    c = len(S) - len(student)
    if c < 0 or S[c:] != list(student):
        return None
    k = next((i for i, (a, b) in enumerate(zip(S, T)) if a != b), min(len(S), len(T)))
    q = 0
    while q < min(len(S), len(T)) - k and S[-1 - q] == T[-1 - q]:
        q += 1
    block = T[k:len(T) - q]

    def teacher(cut: int) -> list[int]:
        return T[cut:] if cut <= k else block + S[max(cut, len(S) - q):]

    ids = teacher(c)
    if len(ids) <= cap:
        return ids, False
    wider = len(T) - cap
    if not c <= wider <= k:
        wider = max(c, len(S) - max(cap - len(block), 0))
    return teacher(wider)[-cap:], True


@dataclasses.dataclass(frozen=True)
class StepSamples(RowLayout):
    """The step-samples of one update: ``[n, ...]`` numpy arrays (no padding rows) + row origins.

    ``teacher_ids`` / ``teacher_mask`` are None when no teacher twin was built; ``opd_mask``
    ``[n, R]``: the tokens OPD acts on (module docstring; None: ``response_mask``).
    """

    student_ids: np.ndarray
    student_mask: np.ndarray
    response_mask: np.ndarray
    advantages: np.ndarray
    has_skill: np.ndarray
    rows: list[RowInfo]
    teacher_ids: np.ndarray | None = None
    teacher_mask: np.ndarray | None = None
    teacher_cut: int = 0  # teacher prompts (of rows with a skill) that had to be shortened
    opd_mask: np.ndarray | None = None

    def to_seed_batch(self, old_logp: np.ndarray, ref_logp: np.ndarray | None = None,
                      teacher_logp: np.ndarray | None = None, with_teacher_ids: bool = True) -> SeedBatch:
        """The update's `SeedBatch`: these rows plus their log-probs (``[n, R]``).

        ``with_teacher_ids=False`` leaves the teacher twins out (no teacher pass in the step);
        ``opd_mask`` comes along when the step takes OPD (teacher twins or ``teacher_logp``).
        """
        keep_teacher = with_teacher_ids and self.teacher_ids is not None
        opd = keep_teacher or teacher_logp is not None
        return SeedBatch(student_ids=self.student_ids, student_mask=self.student_mask,
                         response_mask=self.response_mask, advantages=self.advantages, has_skill=self.has_skill,
                         old_logp=old_logp, ref_logp=ref_logp,
                         teacher_ids=self.teacher_ids if keep_teacher else None,
                         teacher_mask=self.teacher_mask if keep_teacher else None, teacher_logp=teacher_logp,
                         opd_mask=(self.response_mask if self.opd_mask is None else self.opd_mask) if opd else None)


def build_batch(
    trajectories: Sequence[Trajectory],
    skills: Mapping[str, str | None],
    encode_prompt: Callable[[str], list[int]],
    settings: BatchSettings,
    *,
    pad_id: int,
    with_teacher: bool = True,
    buckets: Sequence[int] = BUCKETS,
    insert_skill: Callable[[str, str], str] = default_insert_skill,
    decode: Callable[[list[int]], str] | None = None,
) -> StepSamples:
    """The step-samples of ``trajectories``.

    ``skills[traj_id]`` is the parsed hindsight skill or None (no OPD signal: has_skill 0).
    ``encode_prompt(user_text)`` chat-templates and tokenizes a user message exactly as the
    rollout did for ``h_t``; teacher prompts are `teacher_prompt` of ``insert_skill(prompt_text,
    s)`` at ``settings.teacher_cap``, except for a student prompt cut from the left (by the
    rollout or here): its teacher is the very ids the student kept with the skill block spliced
    in (`splice_teacher`), so teacher and student differ by the skill alone; a row whose kept
    ids are not a left cut of ``encode_prompt(prompt_text)`` takes no OPD (has_skill 0). Ordinary prompts longer than ``settings.max_prompt_tokens``
    are cut from the left, responses longer than ``settings.max_response_tokens`` from the right
    (both branches identically). Advantages: `seed_jax.losses.step_advantages` over the kept
    trajectories, broadcast to every response token of the step. ``decode(ids)`` (the rollout's
    decoding of a response) finds the action tokens of ``settings.opd_mask == "action"``.
    """
    if settings.opd_mask not in OPD_MASKS:
        raise ValueError(f"opd.mask must be one of {OPD_MASKS}, got {settings.opd_mask!r}")
    kept = [t for t in trajectories if not t.env_error and t.steps]
    if not kept:
        raise ValueError("no trajectory to train on (all empty or env_error)")
    if with_teacher and settings.opd_mask == "action" and decode is None:
        raise ValueError('opd.mask = "action" needs the response decoder (build_batch(decode=...))')
    group_of = {g: i for i, g in enumerate(sorted({t.group_id for t in kept}))}
    step_traj = [j for j, t in enumerate(kept) for _ in t.steps]
    penalties = [s.penalty for t in kept for s in t.steps]
    adv = step_advantages([t.episode_reward for t in kept], [group_of[t.group_id] for t in kept], step_traj,
                          penalties, mode=settings.advantage_mode, penalty_mode=settings.penalty_mode)

    student, teacher, responses, rows, actions = [], [], [], [], []
    teacher_cut = 0
    for t in kept:
        skill = skills.get(t.traj_id)
        for k, s in enumerate(t.steps):
            p = list(s.prompt_ids)[-settings.max_prompt_tokens:]
            student.append(p)
            responses.append(list(s.response_ids)[:settings.max_response_tokens])
            if with_teacher and settings.opd_mask == "action":
                actions.append(action_token_mask(s.response_ids, s.valid, decode)[:settings.max_response_tokens])
            row_skill = bool(skill)
            if with_teacher:
                left_cut = s.prompt_cut or s.prompt_tokens < 0 or len(s.prompt_ids) > len(p)
                full = encode_prompt(s.prompt_text) if skill and left_cut else p
                if skill and len(full) > len(p):  # the student lost ids on the left: splice the skill in
                    spliced = splice_teacher(full, encode_prompt(insert_skill(s.prompt_text, skill)), p,
                                             settings.teacher_cap)
                    row_skill = spliced is not None
                    teacher.append(p if spliced is None else spliced[0])
                    teacher_cut += bool(spliced and spliced[1])
                elif skill:
                    ids, cut = teacher_prompt(s.prompt_text, skill, encode_prompt, settings.teacher_cap, insert_skill)
                    teacher.append(ids)
                    teacher_cut += cut
                else:
                    teacher.append(p)  # no skill: the twin is the ordinary prompt (masked out of OPD anyway)
            rows.append(RowInfo(t.traj_id, k, row_skill))
    P = round_up(max(map(len, student)), buckets)
    R = round_up(max(max(map(len, responses)), 1), buckets)
    ids, mask, rmask = pack_rows(student, responses, P, R, pad_id)
    t_ids = t_mask = opd_mask = None
    if with_teacher:
        t_ids, t_mask, _ = pack_rows(teacher, responses, round_up(max(map(len, teacher)), buckets), R, pad_id)
        opd_mask = rmask
        if actions:
            opd_mask = np.stack([np.pad(a, (0, R - len(a))) for a in actions]) * rmask
    return StepSamples(student_ids=ids, student_mask=mask, response_mask=rmask,
                       advantages=(np.asarray(adv, np.float32)[:, None] * rmask).astype(np.float32),
                       has_skill=np.asarray([float(r.has_skill) for r in rows], np.float32), rows=rows,
                       teacher_ids=t_ids, teacher_mask=t_mask, teacher_cut=teacher_cut, opd_mask=opd_mask)
