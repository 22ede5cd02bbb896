"""Run observability: metrics (jsonl + TensorBoard), the skill audit log, time splits, progress bars.

Files written under a run directory ``<workdir>``:

- ``metrics.jsonl``: one JSON object per ``MetricsWriter.write`` call,
  ``{"step": int, "time": unix seconds, "<key>": float | null, ...}``. Non-finite values are
  written as ``null`` so every line is strict JSON. ``step`` of an RL update's row is the
  update's number, counted from 1 (`seed_jax.pipeline.rl`). Several lines may share a step (e.g.
  one write per stage with different prefixes); a resumed RL stage drops the rows of the updates
  it redoes before writing them again (`MetricsWriter.drop`), and readers take, per key, the
  last value written for each step
  (``seed_jax.report.collect_series``). ``MetricsWriter.event`` writes ``{"step", "time",
  "event": text}`` lines (e.g. ``config changed: train.lr 0.0001 -> 0.0003 at update 3``), which
  the scalar readers skip. The metric-key contract is in ``seed_jax.report``.
- ``tb/``: TensorBoard event files (tensorboardX), one scalar per key, ``global_step = step``;
  the resolved run config as text (tag ``config``) and its flat keys as hparams (HPARAMS tab,
  `MetricsWriter.write_config`), and each RL update's transcript sample as markdown text (tag
  ``transcripts``, `MetricsWriter.write_transcripts`).
- optional Weights & Biases (`WandbWriter`, off unless ``MetricsWriter(wandb=WandbSettings(...))``):
  every record logged with its ``step`` as the x axis, the run config logged, each RL update's
  transcript sample as a table (``transcripts``), one W&B run per
  run directory (its id kept in ``wandb_run_id``, so a resumed run continues the same W&B run);
  ``wandb`` is imported only when enabled.
- ``skills.jsonl``: one ``SkillLogEntry`` per analysed trajectory (``SkillLog``).
- ``rl/transcripts.jsonl``: a bounded sample of each RL update's trajectories, read in full
  (`transcript_json`, `sample_transcripts`); a resumed run appends the redone updates again and
  readers keep the last record per ``(update, traj_id)``.

Appends are crash-safe: each record is one ``write`` of a full line followed by flush and
``os.fsync``; a line torn by a kill is removed when the file is reopened for appending and is
skipped (with a warning) by the readers.

Remote run directories (``gs://...``, `seed_jax.paths`): the jsonl logs are rewritten whole at
each append (`seed_jax.jsonl`); TensorBoard event files are kept in memory and uploaded whole at
each flush (`_RemoteEventFile`); W&B keeps its local files in ``$WANDB_DIR`` (or its default)
instead of ``<workdir>/wandb``.

Multi-host: construct writers with ``enabled=jax.process_index() == 0`` (disabled writers are
no-ops). Timing JAX work: block on results (``jax.block_until_ready``) inside the ``Timer``
section, otherwise asynchronous dispatch moves the time into a later section.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import math
import os
import random
import sys
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from seed_jax.jsonl import append_jsonl, read_jsonl, repair_torn_tail
from seed_jax.paths import is_remote, run_path, write_text_atomic
from seed_jax.transcript_text import render_transcript
from seed_jax.watchdog import beat

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


# --------------------------------------------------------------------------- Weights & Biases

WANDB_ID_FILE = "wandb_run_id"
TRANSCRIPT_COLUMNS = ("update", "traj_id", "task", "won", "reward", "skill", "transcript")  # W&B table
WANDB_MODES = ("", "online", "offline", "disabled")


@dataclasses.dataclass(frozen=True)
class WandbSettings:
    """Where a `WandbWriter` logs: ``project``, ``entity`` ("" = the user's default), ``mode``
    (one of `WANDB_MODES`; "" leaves it to wandb, e.g. ``WANDB_MODE``), ``config`` (the run
    config, logged once) and ``name`` ("" = the run directory's name)."""

    project: str = "seed_jax"
    entity: str = ""
    mode: str = ""
    config: Mapping[str, Any] | None = None
    name: str = ""


def wandb_run_id(workdir: str | os.PathLike) -> str:
    """The W&B run id of a run directory: read from ``<workdir>/wandb_run_id``, created there on
    first use (16 random hex digits), so every launch on the directory resumes the same W&B run."""
    f = run_path(workdir) / WANDB_ID_FILE
    if f.exists():
        return f.read_text().strip()
    rid = os.urandom(8).hex()
    f.write_text(rid + "\n")
    return rid


class WandbWriter:
    """Logs `MetricsWriter` records to one Weights & Biases run per run directory.

    ``wandb.init(id=wandb_run_id(workdir), resume="allow", dir=workdir, config=...)``; the key
    ``step`` is declared the x axis of every metric (``define_metric``), so stages that count their
    own steps and a resumed run that redoes a step log without wandb's monotonic-step rule.
    """

    def __init__(self, workdir: str | os.PathLike, settings: WandbSettings):
        try:
            import wandb  # deferred: optional dependency, imported only when W&B logging is on
        except ImportError as e:
            raise ImportError("W&B logging (tracking.wandb) needs the wandb package: pip install wandb") from e
        if settings.mode not in WANDB_MODES:
            raise ValueError(f"wandb mode must be one of {WANDB_MODES}, got {settings.mode!r}")
        workdir = run_path(workdir)
        self.run_id = wandb_run_id(workdir)
        self.run = wandb.init(project=settings.project, entity=settings.entity or None, id=self.run_id,
                              resume="allow", dir=None if is_remote(workdir) else str(workdir), name=settings.name or workdir.name,
                              config=dict(settings.config or {}), mode=settings.mode or None)
        self.run.define_metric("step")
        self.run.define_metric("*", step_metric="step")

    def log(self, record: Mapping[str, Any]) -> None:
        """One `MetricsWriter` record: ``step`` and the finite metric values (``time`` dropped)."""
        self.run.log({k: v for k, v in record.items() if k != "time" and v is not None})

    def log_table(self, step: int, key: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        """A ``wandb.Table`` under ``key`` at ``step``."""
        import wandb

        self.run.log({key: wandb.Table(columns=list(columns), data=[list(r) for r in rows]), "step": int(step)})

    def close(self) -> None:
        self.run.finish()


# --------------------------------------------------------------------------- metrics

class MetricsWriter:
    """Appends scalar metrics to ``<workdir>/metrics.jsonl`` and TensorBoard ``<workdir>/tb``, and
    to Weights & Biases when ``wandb`` settings are given (`WandbWriter`).

    ``write(step, {"success_rate": 0.5}, prefix="rollout")`` records key ``rollout/success_rate``
    (``prefix`` is joined with ``/``; keys are used as given when it is empty). Opening an
    existing run appends (a resumed run continues the same file).
    """

    def __init__(self, workdir: str | os.PathLike, tensorboard: bool = True, enabled: bool = True,
                 wandb: WandbSettings | None = None):
        self.workdir = run_path(workdir)
        self.enabled = enabled
        self.path = self.workdir / METRICS_FILE
        self._tb = None
        self._wandb = None
        self._closed = False
        if not enabled:
            return
        self.workdir.mkdir(parents=True, exist_ok=True)
        repair_torn_tail(self.path)
        if wandb is not None:
            self._wandb = WandbWriter(self.workdir, wandb)
        if tensorboard:
            try:  # optional: only runs that write TensorBoard events need it
                from tensorboardX import SummaryWriter, record_writer
            except ImportError as e:
                raise ImportError("MetricsWriter(tensorboard=True) needs tensorboardX "
                                  "(pip install tensorboardX) or pass tensorboard=False") from e
            if is_remote(self.workdir):
                record_writer.register_writer_factory(str(self.workdir).split("://", 1)[0], _RemoteEventFiles())
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
        if self._wandb is not None:
            self._wandb.log(record)
        return record

    def write_config(self, config: Mapping[str, Any], hparams: Mapping[str, Any] | None = None,
                     metrics: Sequence[str] = ()) -> None:
        """The resolved run config on TensorBoard: text ``config`` at step 0 (indented JSON in a
        code block) and, with ``hparams`` (flat ``{"rl.lr": 1e-5, ...}``), the HPARAMS tab's row of
        this run, with the scalar tags ``metrics`` as its columns. Values that are not bool, int,
        float or str (lists, None) are shown as their JSON text. W&B has the config from
        ``wandb.init`` (`WandbSettings.config`)."""
        if not self.enabled or self._tb is None:
            return
        text = json.dumps(config, indent=1, default=str)
        self._tb.add_text("config", "```json\n" + text + "\n```", global_step=0)
        if hparams:
            from tensorboardX.summary import hparams as hparams_summary

            values = {k: v if isinstance(v, (bool, int, float, str)) else json.dumps(v, default=str)
                      for k, v in hparams.items()}
            for summary in hparams_summary(values, dict.fromkeys(metrics, 0.0)):  # metric values unused
                self._tb.file_writer.add_summary(summary)
        self._tb.flush()

    def write_transcripts(self, step: int, records: Sequence[Mapping[str, Any]]) -> None:
        """A sample of transcripts (`transcript_json` records) at ``step``: TensorBoard text
        ``transcripts`` (markdown, `seed_jax.transcript_text.render_transcript`, as the report's
        transcripts.md) and, with W&B, a table ``transcripts`` (update, trajectory, task, won,
        reward, skill, the markdown text)."""
        if not self.enabled or not records:
            return
        texts = ["\n".join(render_transcript(r, f"update {r.get('update')}, `{r.get('traj_id')}`")) for r in records]
        if self._tb is not None:
            self._tb.add_text("transcripts", "\n\n---\n\n".join(texts), global_step=int(step))
            self._tb.flush()
        if self._wandb is not None:
            rows = [[r.get("update"), r.get("traj_id"), r.get("task"), bool(r.get("won")), r.get("reward"),
                     r.get("skill") or "", t] for r, t in zip(records, texts)]
            self._wandb.log_table(step, "transcripts", TRANSCRIPT_COLUMNS, rows)

    def drop(self, predicate) -> int:
        """Remove the records of metrics.jsonl for which ``predicate(record)`` is true (the file
        rewritten atomically, other lines kept in order); returns how many were removed. A resumed
        stage calls it for the rows it is about to write again, so that no step has two rows
        (TensorBoard's event files are append-only: its viewer shows the newest point per step)."""
        if not self.enabled or not self.path.exists():
            return 0
        records = read_jsonl(self.path)
        kept = [r for r in records if not predicate(r)]
        if len(kept) < len(records):
            write_text_atomic(self.path, "".join(json.dumps(r) + "\n" for r in kept))
        return len(records) - len(kept)

    def event(self, step: int, text: str) -> dict:
        """Append one event line ``{"step", "time", "event": text}`` to metrics.jsonl (a thing that
        happened at ``step``, e.g. a config changed by ``--force``); readers of scalars skip it."""
        if isinstance(step, bool) or not isinstance(step, (int, np.integer)):
            raise TypeError(f"step must be an int, got {type(step).__name__}")
        record = {"step": int(step), "time": time.time(), "event": str(text)}
        if self.enabled and not self._closed:
            append_jsonl(self.path, [record])
        return record

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()
            self._tb = None
        if self._wandb is not None:
            self._wandb.close()
            self._wandb = None
        self._closed = True

    def __enter__(self) -> MetricsWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @staticmethod
    def read(workdir: str | os.PathLike) -> list[dict]:
        """All records of ``<workdir>/metrics.jsonl`` in file order (torn last line skipped)."""
        path = run_path(workdir) / METRICS_FILE
        if not path.exists():
            raise FileNotFoundError(f"no {METRICS_FILE} in {workdir}")
        return read_jsonl(path)


class _RemoteEventFile:
    """A TensorBoard event file on a remote path (tensorboardX's writer interface): the records
    kept in memory, the whole file uploaded at each ``flush`` (an object store has no append;
    tensorboardX's own ``gs://`` writer does the same through google-cloud-storage, not installed
    here). An RL update flushes once; its records are a few hundred bytes."""

    def __init__(self, path: str):
        self.path = run_path(path)
        self.buffer = io.BytesIO()

    def write(self, data: bytes) -> None:
        self.buffer.write(data)

    def flush(self) -> None:
        self.path.write_bytes(self.buffer.getvalue())

    def close(self) -> None:
        self.flush()


class _RemoteEventFiles:
    """tensorboardX writer factory for a URL scheme: `_RemoteEventFile`s, no directory to make."""

    def open(self, path: str) -> _RemoteEventFile:
        return _RemoteEventFile(path)

    def directory_check(self, path: str) -> None:
        pass


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
                "gate": _gate_json(self.gate)}


class SkillLog:
    """Appends ``SkillLogEntry``s to ``<workdir>/skills.jsonl`` (one fsync per ``write`` call)."""

    def __init__(self, workdir: str | os.PathLike, enabled: bool = True):
        self.workdir = run_path(workdir)
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
        path = run_path(workdir) / SKILLS_FILE
        return read_jsonl(path) if path.exists() else []


# --------------------------------------------------------------------------- transcripts

TRANSCRIPTS_FILE = "rl/transcripts.jsonl"


def sample_transcripts(trajectories: Iterable[Any], k: int, seed: str | int) -> list[Any]:
    """At most ``k`` of the trajectories, successes and failures alternating (a success first) as
    long as both are left, each kind drawn in an order shuffled by ``random.Random(seed)``;
    trajectories with an environment error are left out. Returned in their input order."""
    ok = [(i, t) for i, t in enumerate(trajectories) if not t.env_error]
    rng = random.Random(seed)
    won = [x for x in ok if x[1].won]
    lost = [x for x in ok if not x[1].won]
    rng.shuffle(won)
    rng.shuffle(lost)
    picked = []
    while len(picked) < k and (won or lost):
        for pool in (won, lost):
            if pool and len(picked) < k:
                picked.append(pool.pop(0))
    return [t for _, t in sorted(picked, key=lambda x: x[0])]


def _gate_json(gate) -> dict | None:
    if gate is None:
        return None
    return {"mean": _to_float("gate.mean", gate.mean), "share_gt_half": _to_float("gate.share_gt_half",
                                                                                    gate.share_gt_half),
            "n_tokens": int(gate.n_tokens)}


def transcript_json(update: int, traj, skill: str | None = None, gate: GateSummary | None = None,
                    step_gates: Mapping[int, Any] | None = None) -> dict:
    """One line of ``rl/transcripts.jsonl``: a trajectory as a reader wants it.

    ``{"update", "traj_id", "task_id", "task", "won", "reward" (R(tau)), "penalty", "skill"
    (None: no skill), "gate" (trajectory gate summary | None), "final_observation", "steps":
    [{"observation" (what the environment showed), "prompt" (the user message, skill-free),
    "response", "action", "valid", "reward", "penalty", "gate" ({"mean", "share_gt_half",
    "n_tokens"} | None)}]}``; ``step_gates`` maps step index -> an object with ``gate_mean``,
    ``gate_gt_half``, ``n_tokens``.
    """
    step_gates = step_gates or {}
    steps = []
    for i, s in enumerate(traj.steps):
        g = step_gates.get(i)
        steps.append({"observation": s.raw_observation, "prompt": s.prompt_text, "response": s.response_text,
                      "action": s.action, "valid": bool(s.valid), "reward": float(s.reward),
                      "penalty": float(s.penalty),
                      "gate": None if g is None else {"mean": _to_float("gate.mean", g.gate_mean),
                                                      "share_gt_half": _to_float("gate.gt_half", g.gate_gt_half),
                                                      "n_tokens": int(g.n_tokens)}})
    return {"update": int(update), "traj_id": str(traj.traj_id), "task_id": str(traj.task_id),
            "task": traj.task_description, "won": bool(traj.won), "reward": float(traj.episode_reward),
            "penalty": float(sum(s.penalty for s in traj.steps)), "skill": skill or None, "gate": _gate_json(gate),
            "final_observation": traj.final_observation, "steps": steps}


def read_transcripts(workdir: str | os.PathLike) -> list[dict]:
    """The records of ``<workdir>/rl/transcripts.jsonl`` (the last one per ``(update, traj_id)``, in
    update order); [] when the file is absent."""
    path = run_path(workdir) / TRANSCRIPTS_FILE
    if not path.exists():
        return []
    last = {(r["update"], r["traj_id"]): r for r in read_jsonl(path)}
    return sorted(last.values(), key=lambda r: r["update"])


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
        self.desc, self.unit = desc, unit

    def update(self, n: int = 1, **postfix: Any) -> None:
        self.n += n
        beat(self.desc, f"{self.n}/{self.total} {self.unit}")
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
