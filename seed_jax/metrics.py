"""Run observability: metrics (jsonl + TensorBoard), the skill audit log, time splits, progress bars.

Files written under a run directory ``<workdir>``:

- ``metrics.jsonl``: one JSON object per ``MetricsWriter.write`` call,
  ``{"step": int, "time": unix seconds, "<key>": float | null, ...}``. Non-finite values are
  written as ``null`` so every line is strict JSON. Several lines may share a step (e.g. one
  write per stage with different prefixes), and a resumed run appends lines for steps it
  redoes; readers take, per key, the last value written for each step
  (``seed_jax.report.collect_series``). The metric-key contract is in ``seed_jax.report``.
- ``tb/``: TensorBoard event files (tensorboardX), one scalar per key, ``global_step = step``.
- ``skills.jsonl``: one ``SkillLogEntry`` per analysed trajectory (``SkillLog``).

Appends are crash-safe: each record is one ``write`` of a full line followed by flush and
``os.fsync``; a line torn by a kill is removed when the file is reopened for appending and is
skipped (with a warning) by the readers.

Multi-host: construct writers with ``enabled=jax.process_index() == 0`` (disabled writers are
no-ops). Timing JAX work: block on results (``jax.block_until_ready``) inside the ``Timer``
section, otherwise asynchronous dispatch moves the time into a later section.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import sys
import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from seed_jax.jsonl import append_jsonl, read_jsonl, repair_torn_tail

METRICS_FILE = "metrics.jsonl"
SKILLS_FILE = "skills.jsonl"
TB_DIR = "tb"
_RESERVED = ("step", "time")


def _to_float(key: str, value: Any) -> float | None:
    """A metric value as a finite float, or ``None`` when non-finite. Accepts Python/numpy/JAX
    scalars and one-element arrays; anything else raises ``TypeError`` naming the key."""
    if isinstance(value, (str, bytes)) or value is None:
        raise TypeError(f"metric {key!r}: expected a number, got {type(value).__name__}")
    try:
        arr = np.asarray(value)
    except Exception as e:
        raise TypeError(f"metric {key!r}: cannot convert {type(value).__name__} to a number") from e
    if arr.size != 1 or not (np.issubdtype(arr.dtype, np.number) or arr.dtype == np.bool_):
        raise TypeError(f"metric {key!r}: expected a scalar number, got dtype {arr.dtype} "
                        f"shape {arr.shape}")
    x = float(arr.reshape(()))
    return x if math.isfinite(x) else None


# --------------------------------------------------------------------------- metrics

class MetricsWriter:
    """Appends scalar metrics to ``<workdir>/metrics.jsonl`` and TensorBoard ``<workdir>/tb``.

    ``write(step, {"success_rate": 0.5}, prefix="rollout")`` records key ``rollout/success_rate``
    (``prefix`` is joined with ``/``; keys are used as given when it is empty). Opening an
    existing run appends (a resumed run continues the same file).
    """

    def __init__(self, workdir: str | os.PathLike, tensorboard: bool = True, enabled: bool = True):
        self.workdir = Path(workdir)
        self.enabled = enabled
        self.path = self.workdir / METRICS_FILE
        self._tb = None
        self._closed = False
        if not enabled:
            return
        self.workdir.mkdir(parents=True, exist_ok=True)
        repair_torn_tail(self.path)
        if tensorboard:
            try:  # optional: only runs that write TensorBoard events need it
                from tensorboardX import SummaryWriter
            except ImportError as e:
                raise ImportError("MetricsWriter(tensorboard=True) needs tensorboardX "
                                  "(pip install tensorboardX) or pass tensorboard=False") from e
            # tensorboardX names files by the second: a unique suffix keeps a quick resume
            # from overwriting the previous event file.
            self._tb = SummaryWriter(logdir=str(self.workdir / TB_DIR),
                                     filename_suffix=f".{os.getpid()}.{time.time_ns()}")

    def write(self, step: int, metrics: Mapping[str, Any], prefix: str = "") -> dict:
        """Append one record; returns it as written (non-finite values as ``None``)."""
        if self._closed:
            raise RuntimeError(f"MetricsWriter for {self.workdir} is closed")
        if isinstance(step, bool) or not isinstance(step, (int, np.integer)):
            raise TypeError(f"step must be an int, got {type(step).__name__}")
        step = int(step)
        pre = prefix.strip("/")
        record: dict[str, Any] = {"step": step, "time": time.time()}
        for k, v in metrics.items():
            if not isinstance(k, str) or not k:
                raise TypeError(f"metric keys must be non-empty strings, got {k!r}")
            key = f"{pre}/{k}" if pre else k
            if key in _RESERVED:
                raise ValueError(f"metric key {key!r} is reserved (record fields: {_RESERVED})")
            record[key] = _to_float(key, v)
        if not self.enabled:
            return record
        append_jsonl(self.path, [record])
        if self._tb is not None:
            for key, v in record.items():
                if key not in _RESERVED and v is not None:
                    self._tb.add_scalar(key, v, global_step=step, walltime=record["time"])
            self._tb.flush()
        return record

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()
            self._tb = None
        self._closed = True

    def __enter__(self) -> MetricsWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @staticmethod
    def read(workdir: str | os.PathLike) -> list[dict]:
        """All records of ``<workdir>/metrics.jsonl`` in file order (torn last line skipped)."""
        path = Path(workdir) / METRICS_FILE
        if not path.exists():
            raise FileNotFoundError(f"no {METRICS_FILE} in {workdir}")
        return read_jsonl(path)


# --------------------------------------------------------------------------- skills audit

@dataclasses.dataclass(frozen=True)
class GateSummary:
    """Token-level OPD gate of one trajectory over its gated tokens (mask m):
    ``mean = sum(g m) / sum(m)``, ``share_gt_half = sum([g > 0.5] m) / sum(m)``, ``n_tokens = sum(m)``."""

    mean: float
    share_gt_half: float
    n_tokens: int

    @staticmethod
    def from_arrays(gate: Any, mask: Any = None) -> GateSummary | None:
        """Summary of gate values ``gate`` over ``mask`` (all tokens when None); None if no token."""
        g = np.asarray(gate, dtype=np.float64)
        m = np.ones_like(g) if mask is None else np.asarray(mask, dtype=np.float64)
        if g.shape != m.shape:
            raise ValueError(f"gate shape {g.shape} != mask shape {m.shape}")
        n = float(m.sum())
        if n <= 0:
            return None
        return GateSummary(mean=float((g * m).sum() / n),
                           share_gt_half=float(((g > 0.5) * m).sum() / n), n_tokens=int(round(n)))


@dataclasses.dataclass(frozen=True)
class SkillLogEntry:
    """One hindsight skill as audited in ``skills.jsonl``.

    JSON form: ``{"update", "traj_id", "task_id", "outcome": "success"|"failure", "parse_ok",
    "skill", "summary", "gate": {"mean", "share_gt_half", "n_tokens"} | null}``.
    """

    update: int
    traj_id: str
    task_id: str
    success: bool
    parse_ok: bool
    skill: str
    summary: str
    gate: GateSummary | None = None

    def to_json(self) -> dict:
        return {"update": int(self.update), "traj_id": str(self.traj_id),
                "task_id": str(self.task_id), "outcome": "success" if self.success else "failure",
                "parse_ok": bool(self.parse_ok), "skill": self.skill, "summary": self.summary,
                "gate": None if self.gate is None else {
                    "mean": _to_float("gate.mean", self.gate.mean),
                    "share_gt_half": _to_float("gate.share_gt_half", self.gate.share_gt_half),
                    "n_tokens": int(self.gate.n_tokens)}}


class SkillLog:
    """Appends ``SkillLogEntry``s to ``<workdir>/skills.jsonl`` (one fsync per ``write`` call)."""

    def __init__(self, workdir: str | os.PathLike, enabled: bool = True):
        self.workdir = Path(workdir)
        self.path = self.workdir / SKILLS_FILE
        self.enabled = enabled
        if enabled:
            self.workdir.mkdir(parents=True, exist_ok=True)
            repair_torn_tail(self.path)

    def write(self, records: SkillLogEntry | Iterable[SkillLogEntry]) -> None:
        if isinstance(records, SkillLogEntry):
            records = [records]
        rows = []
        for r in records:
            if not isinstance(r, SkillLogEntry):
                raise TypeError(f"SkillLog.write expects SkillLogEntry, got {type(r).__name__}")
            rows.append(r.to_json())
        if self.enabled:
            append_jsonl(self.path, rows)

    @staticmethod
    def read(workdir: str | os.PathLike) -> list[dict]:
        """All skill records (JSON form) of ``<workdir>/skills.jsonl``; [] if the file is absent."""
        path = Path(workdir) / SKILLS_FILE
        return read_jsonl(path) if path.exists() else []


# --------------------------------------------------------------------------- timing / progress

class Timer:
    """Accumulates wall-clock seconds per named section.

    >>> t = Timer()
    >>> with t("rollout"): ...
    >>> t.metrics()          # {"time/rollout": seconds}; t.pop() returns it and resets
    """

    def __init__(self, totals: dict[str, float] | None = None):
        self.totals: dict[str, float] = {} if totals is None else totals

    @contextlib.contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.totals[name] = self.totals.get(name, 0.0) + (time.perf_counter() - t0)

    def metrics(self, prefix: str = "time") -> dict[str, float]:
        pre = prefix.strip("/")
        return {(f"{pre}/{k}" if pre else k): v for k, v in self.totals.items()}

    def reset(self) -> None:
        self.totals.clear()

    def pop(self, prefix: str = "time") -> dict[str, float]:
        out = self.metrics(prefix)
        self.reset()
        return out


def progress_enabled(requested: bool = True) -> bool:
    """Whether to draw a progress bar: ``requested``, and then the environment variable
    ``TQDM_DISABLE`` decides when set (``1``: never, ``0``: always); unset, bars are drawn only
    when stderr is a terminal, so logs written to files get no bar updates."""
    if not requested:
        return False
    flag = os.environ.get("TQDM_DISABLE", "")
    if flag:
        return flag == "0"
    return sys.stderr.isatty()


class StageProgress:
    """A tqdm progress bar for a long loop; with ``total`` known tqdm shows rate and ETA.

    ``initial`` starts a resumed loop part-way (e.g. RL resumed at update k of N).
    Use as a context manager; ``update(n, **postfix)`` advances and shows key metrics.
    """

    def __init__(self, total: int | None, desc: str, unit: str = "it", initial: int = 0,
                 disable: bool = False, **tqdm_kwargs: Any):
        self._bar = tqdm(total=total, desc=desc, unit=unit, initial=initial,
                         disable=not progress_enabled(not disable),
                         dynamic_ncols=True, **tqdm_kwargs)
        self._t0 = time.perf_counter()
        self._initial = initial
        self.total = total
        self.n = initial

    def update(self, n: int = 1, **postfix: Any) -> None:
        self.n += n
        if postfix:
            self._bar.set_postfix({k: (f"{v:.4g}" if isinstance(v, float) else v)
                                   for k, v in postfix.items()}, refresh=False)
        self._bar.update(n)

    def eta_seconds(self) -> float | None:
        """Remaining seconds at the mean rate of this session:
        ``(total - n) * elapsed / (n - initial)``; None when unknown."""
        done = self.n - self._initial
        if self.total is None or done <= 0:
            return None
        return max(self.total - self.n, 0) * (time.perf_counter() - self._t0) / done

    def write(self, msg: str) -> None:
        """Print a line without breaking the bar."""
        self._bar.write(msg)

    def close(self) -> None:
        self._bar.close()

    def __enter__(self) -> StageProgress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
