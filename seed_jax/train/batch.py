"""The typed batches of the train steps and the one prompt/response layout they share.

Layout (the contract of `seed_jax.train.logprobs`): row ``b`` holds a prompt LEFT-padded to a
static length ``P`` and a response RIGHT-padded to ``R``, so response token ``j`` sits at
position ``P + j`` and is predicted by the hidden state at ``P - 1 + j``. `pack_rows` is the
only function that writes this layout; `grow` widens it (more prompt columns on the left,
response columns and rows on the right) without moving any token relative to its row.

`SeedBatch` (RL step) and `SftBatch` (stage-1 SFT step) are `flax.struct` pytrees of arrays
(numpy on the host, sharded `jax.Array`s inside the step), rows first. Optional fields are
``None`` when the step does not need them (no leaf, no transfer, no compiled input).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import flax.struct
import numpy as np

from seed_jax.train.config import TrainConfig

Array = Any  # numpy.ndarray on the host, jax.Array inside a jitted step


def pack_rows(prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]], prompt_len: int,
              resp_len: int, pad_id: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(ids, mask)`` ``[B, P + R]`` int32 and ``response_mask`` ``[B, R]`` float32.

    ``ids[b, P - len(p_b):P] = p_b``, ``ids[b, P:P + len(r_b)] = r_b``, ``mask`` 1 exactly on
    those tokens, ``response_mask[b, j] = [j < len(r_b)]``; everything else is ``pad_id`` / 0.
    Empty prompt and response give an all-masked (padding) row.
    """
    if len(prompts) != len(responses):
        raise ValueError(f"{len(prompts)} prompts but {len(responses)} responses")
    B = len(prompts)
    ids = np.full((B, prompt_len + resp_len), pad_id, np.int32)
    mask = np.zeros((B, prompt_len + resp_len), np.int32)
    for b, (p, r) in enumerate(zip(prompts, responses)):
        if len(p) > prompt_len or len(r) > resp_len:
            raise ValueError(f"row {b}: prompt {len(p)} / response {len(r)} tokens exceed the layout "
                             f"P={prompt_len}, R={resp_len}")
        if len(p):
            ids[b, prompt_len - len(p):prompt_len] = p
            mask[b, prompt_len - len(p):prompt_len] = 1
        ids[b, prompt_len:prompt_len + len(r)] = r
        mask[b, prompt_len:prompt_len + len(r)] = 1
    return ids, mask, mask[:, prompt_len:].astype(np.float32)


def grow_sequences(x: np.ndarray, prompt_len: int, new_prompt_len: int, new_resp_len: int) -> np.ndarray:
    """``[B, P + R]`` -> ``[B, P' + R']``: zeros prepended to the prompt, appended to the response."""
    resp_len = x.shape[1] - prompt_len
    return np.concatenate([np.zeros((x.shape[0], new_prompt_len - prompt_len), x.dtype), x,
                           np.zeros((x.shape[0], new_resp_len - resp_len), x.dtype)], 1)


def _grow_rows(x, rows: int):
    if x is None:
        return None
    x = np.asarray(x)
    return np.concatenate([x, np.zeros((rows - x.shape[0],) + x.shape[1:], x.dtype)])


def _take(x, idx):
    return None if x is None else np.asarray(x)[idx]


class RowLayout:
    """The static lengths of a batch in this layout, read from its ``student_ids`` ``[B, P + R]``,
    ``response_mask`` ``[B, R]`` and optional ``teacher_ids`` ``[B, Pt + R]``."""

    student_ids: Array
    response_mask: Array
    teacher_ids: Array | None

    @property
    def num_rows(self) -> int:
        return int(self.response_mask.shape[0])

    @property
    def response_len(self) -> int:
        return int(self.response_mask.shape[1])

    @property
    def prompt_len(self) -> int:
        return int(self.student_ids.shape[1]) - self.response_len

    @property
    def teacher_prompt_len(self) -> int | None:
        return None if self.teacher_ids is None else int(self.teacher_ids.shape[1]) - self.response_len


@flax.struct.dataclass
class SeedBatch(RowLayout):
    """Step-samples of one RL mini-batch (or update), rows over ('data', 'fsdp').

    ``student_ids`` / ``student_mask`` ``[B, P + R]``: the ordinary prompt ``h_t`` and the
    sampled response; ``response_mask`` ``[B, R]``; ``advantages`` ``[B, R]`` (or ``[B]``);
    ``has_skill`` ``[B]`` (1: the trajectory has a hindsight skill, the row takes OPD);
    ``old_logp`` ``[B, R]`` (theta_old on the ordinary prompt). Optional: ``ref_logp``
    ``[B, R]`` (frozen reference; needed when ``c_kl > 0``), ``teacher_ids`` / ``teacher_mask``
    ``[B, Pt + R]`` (``H(h_t, s)`` and the same response; needed for a teacher pass),
    ``teacher_logp`` ``[B, R]`` (theta_old on the teacher prompt; ``teacher_from_old``),
    ``opd_mask`` ``[B, R]`` (the tokens OPD acts on, ``opd.mask``; None: ``response_mask``).
    """

    student_ids: Array
    student_mask: Array
    response_mask: Array
    advantages: Array
    has_skill: Array
    old_logp: Array
    ref_logp: Array | None = None
    teacher_ids: Array | None = None
    teacher_mask: Array | None = None
    teacher_logp: Array | None = None
    opd_mask: Array | None = None

    def validate(self, train_cfg: TrainConfig) -> None:
        """Raise ValueError naming the field when the batch does not fit the step's needs."""
        tc = train_cfg
        need = {"ref_logp": tc.c_kl > 0}
        if tc.use_teacher:
            need["teacher_logp" if tc.teacher_from_old else "teacher_ids"] = True
        missing = [k for k, needed in need.items() if needed and getattr(self, k) is None]
        if missing:
            raise ValueError(f"batch is missing {missing} (c_kl={tc.c_kl}, lambda_opd={tc.lambda_opd}, "
                             f"teacher_from_old={tc.teacher_from_old})")
        B, R = tuple(self.response_mask.shape)
        checks = {
            "student_ids": lambda s: len(s) == 2 and s[0] == B and s[1] > R,
            "student_mask": lambda s: s == tuple(self.student_ids.shape),
            "has_skill": lambda s: s == (B,),
            "advantages": lambda s: s in ((B,), (B, R)),
            "old_logp": lambda s: s == (B, R),
            "ref_logp": lambda s: s == (B, R),
            "teacher_ids": lambda s: len(s) == 2 and s[0] == B and s[1] > R,
            "teacher_mask": lambda s: self.teacher_ids is not None and s == tuple(self.teacher_ids.shape),
            "teacher_logp": lambda s: s == (B, R),
            "opd_mask": lambda s: s == (B, R),
        }
        for k, ok in checks.items():
            v = getattr(self, k)
            if v is not None and not ok(tuple(v.shape)):
                raise ValueError(f"batch.{k} has shape {tuple(v.shape)}; response_mask is [B, R] = {(B, R)} "
                                 f"(ids are [B, prompt_len + R] with prompt_len >= 1)")
        if (self.teacher_ids is None) != (self.teacher_mask is None):
            raise ValueError("batch.teacher_ids and batch.teacher_mask come together")

    def take(self, idx) -> SeedBatch:
        """The rows ``idx`` (host arrays)."""
        return SeedBatch(*(_take(getattr(self, f), idx) for f in _SEED_FIELDS))

    def grow(self, prompt_len: int, teacher_prompt_len: int | None, resp_len: int, rows: int) -> SeedBatch:
        """The same rows in a wider layout ``(P', Pt', R')`` with ``rows`` rows (padding rows masked)."""
        P, Pt, R = self.prompt_len, self.teacher_prompt_len, self.response_len
        if prompt_len < P or resp_len < R or rows < self.num_rows or (Pt is not None and teacher_prompt_len < Pt):
            raise ValueError(f"grow cannot shrink: ({P}, {Pt}, {R}, {self.num_rows}) -> "
                             f"({prompt_len}, {teacher_prompt_len}, {resp_len}, {rows})")
        per_token = lambda x: None if x is None else np.pad(  # noqa: E731
            np.asarray(x), ((0, 0), (0, resp_len - R)) if np.ndim(x) == 2 else ((0, 0),))
        out = {
            "student_ids": grow_sequences(np.asarray(self.student_ids), P, prompt_len, resp_len),
            "student_mask": grow_sequences(np.asarray(self.student_mask), P, prompt_len, resp_len),
            "teacher_ids": None if Pt is None else grow_sequences(np.asarray(self.teacher_ids), Pt,
                                                                   teacher_prompt_len, resp_len),
            "teacher_mask": None if Pt is None else grow_sequences(np.asarray(self.teacher_mask), Pt,
                                                                    teacher_prompt_len, resp_len),
            "has_skill": self.has_skill,
        }
        for k in ("response_mask", "advantages", "old_logp", "ref_logp", "teacher_logp", "opd_mask"):
            out[k] = per_token(getattr(self, k))
        return SeedBatch(**{k: _grow_rows(v, rows) for k, v in out.items()})


_SEED_FIELDS = tuple(f for f in SeedBatch.__dataclass_fields__)


@flax.struct.dataclass
class SftBatch:
    """Stage-1 SFT rows: ``input_ids`` / ``attention_mask`` ``[B, P + R]`` (analyzer prompt x_tau
    and the answer), ``loss_mask`` ``[B, R]`` (1 on answer tokens that count)."""

    input_ids: Array
    attention_mask: Array
    loss_mask: Array

    @property
    def num_rows(self) -> int:
        return int(self.loss_mask.shape[0])

    def validate(self, train_cfg: TrainConfig | None = None) -> None:
        B, R = tuple(self.loss_mask.shape)
        s = tuple(self.input_ids.shape)
        if len(s) != 2 or s[0] != B or s[1] <= R:
            raise ValueError(f"batch.input_ids has shape {s}; expected [B, P + R] with B={B}, "
                             f"R={R} (from loss_mask) and P >= 1")
        if tuple(self.attention_mask.shape) != s:
            raise ValueError(f"batch.attention_mask has shape {tuple(self.attention_mask.shape)}, "
                             f"input_ids has {s}")

    @staticmethod
    def pack(prompts: Sequence[Sequence[int]], answers: Sequence[Sequence[int]], prompt_len: int,
             answer_len: int, pad_id: int) -> SftBatch:
        ids, mask, loss_mask = pack_rows(prompts, answers, prompt_len, answer_len, pad_id)
        return SftBatch(ids, mask, loss_mask)
