"""Run report: ``python -m seed_jax.report <workdir> [--out DIR] [--transcripts N]``, and runs
side by side: ``python -m seed_jax.report <workdir> <workdir> ... [--labels A,B,...] [--out DIR]``.

Reads ``<workdir>/metrics.jsonl`` (``seed_jax.metrics.MetricsWriter``), ``<workdir>/skills.jsonl``
(``SkillLog``), ``<workdir>/eval/*.json``, and the transcripts ``<workdir>/rl/transcripts.jsonl``
(``seed_jax.metrics.transcript_json``) and ``<workdir>/eval/*.trajectories.jsonl``, and writes PNG
plots, ``summary.md`` and ``transcripts.md`` (the first ``N`` trajectories of the last RL update's
sample and of the newest evaluation, rendered as markdown) into ``<workdir>/report/`` (or
``--out``). Every input is optional, but at least one must hold data.

With several run directories (e.g. a SEED and a GRPO run) it writes ``compare.png`` (the
`COMPARE_KEYS` any run has, one panel each, one line per run) and ``compare.md`` (last value of
each key per run) into ``--out`` (default ``report_compare``). Labels default to each run's
directory name and method. An unusable run directory exits with code 2 and one line.

Metric-key contract (``step`` = the RL update's number, counted from 1: update n of N is step n,
x = n on every plot, checkpoint ``rl/ckpt/<n>``; a plot or table row exists only when its key
has data, and other keys are listed in the table as well):

==============================  ====================================================================
``rollout/success_rate``        share of training episodes that succeeded (0..1)
``rollout/return``              mean episode return
``rollout/episode_length``      mean number of agent turns per episode
``rollout/invalid_rate``        share of actions that failed to parse / were invalid
``rollout/prompt_cut_rate``     share of steps whose prompt lost tokens to the left truncation
``rollout/env_errors``          number of environment errors in the update
``analysis/parse_rate``         share of analyses whose skill parsed (0..1)
``train/*``                     the PPO steps of the update pooled exactly: token means over every
                                trained token, ``train/optimizer_steps`` / ``train/tokens`` summed
``train/loss``                  total loss
``train/pg_loss``               GRPO policy-gradient loss
``train/opd_loss``              gated on-policy distillation loss
``train/gate_mean``             mean gate g over gated tokens
``train/gate_gt_half``          share of gated tokens with g > 0.5
``train/active_share``          share of response tokens that carry the OPD term
``train/teacher_gap``           mean log-prob shift l_skill - l_ord over gated tokens
``train/kl``                    KL to the reference policy
``train/entropy``               mean token entropy
``train/grad_norm``             global gradient norm (before clipping)
``train/lr``                    learning rate
``perf/rollout_tokens_per_s``   generated response tokens / rollout seconds
``perf/train_tokens_per_s``     trained response tokens (all epochs) / train seconds
``time/rollout``                seconds spent in rollouts this update (also ``time/analysis``,
                                ``time/batch`` (batch and log-prob passes), ``time/train``)
``eval/success_rate``           evaluation success rate (no skills), at evaluation updates
==============================  ====================================================================

Eval file schema (``<workdir>/eval/<name>.json``, one per evaluation)::

    {"stage_or_step": "sft" | 120,                       # what was evaluated (str or int)
     "results": {"overall": {"success": 0.41, "n": 200, ...},       # metric -> number | null
                 "per_type": {"pick": {"success": 0.5, "n": 20}, ...}}}  # optional

Eval files are reported in file-name order: name them so they sort (``00_sft.json``,
``rl_000120.json``, ``zz_final.json``).

Summary values are printed with format ``.4g``; "Last" is the value at the largest step,
"Best" the max (or min, per ``BEST``) over finite values. Within ``metrics.jsonl`` the last value
written for a (key, step) wins, so lines re-written by a resumed run replace the earlier ones.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import ml_collections
import numpy as np

from seed_jax.metrics import (
    METRICS_FILE,
    SKILLS_FILE,
    TB_DIR,
    TRANSCRIPTS_FILE,
    WANDB_ID_FILE,
    MetricsWriter,
    SkillLog,
    read_transcripts,
    transcript_json,
)
from seed_jax.paths import run_path
from seed_jax.pipeline.aggregates import format_aggregates, paper_aggregates
from seed_jax.rollout.trajectory import read_trajectories
from seed_jax.transcript_text import fmt, render_transcript

CONTRACT_KEYS: tuple[str, ...] = (
    "rollout/success_rate", "rollout/return", "rollout/episode_length", "rollout/invalid_rate",
    "rollout/prompt_cut_rate", "rollout/env_errors", "analysis/parse_rate", "train/loss", "train/pg_loss", "train/opd_loss",
    "train/gate_mean", "train/gate_gt_half", "train/active_share", "train/teacher_gap", "train/kl",
    "train/entropy", "train/grad_norm", "train/lr", "perf/rollout_tokens_per_s", "perf/train_tokens_per_s",
    "time/rollout", "time/analysis", "time/batch", "time/train", "eval/success_rate",
)
# Direction of "best" per key; keys absent here show no best value.
BEST: dict[str, str] = {
    "rollout/success_rate": "max", "rollout/return": "max", "analysis/parse_rate": "max",
    "perf/rollout_tokens_per_s": "max", "perf/train_tokens_per_s": "max", "eval/success_rate": "max",
    "rollout/invalid_rate": "min", "rollout/prompt_cut_rate": "min", "rollout/env_errors": "min",
}
EVAL_DIR = "eval"
REPORT_DIR = "report"
COMPARE_DIR = "report_compare"
# what the overlay of several runs shows, in panel order (the keys some run has)
COMPARE_KEYS: tuple[str, ...] = (
    "rollout/success_rate", "eval/success_rate", "rollout/return", "rollout/invalid_rate", "analysis/parse_rate",
    "train/gate_mean", "train/opd_loss", "train/entropy", "train/kl",
)


class ReportError(RuntimeError):
    """Raised when a run directory cannot be reported on (missing, empty, malformed eval file)."""


@dataclasses.dataclass(frozen=True)
class Series:
    """Values of one metric by step (sorted, unique steps); NaN where the value was null."""

    steps: np.ndarray
    values: np.ndarray

    def last(self) -> tuple[int, float]:
        return int(self.steps[-1]), float(self.values[-1])

    def best(self, mode: str) -> tuple[int, float] | None:
        ok = np.isfinite(self.values)
        if not ok.any():
            return None
        idx = np.flatnonzero(ok)
        i = idx[np.argmax(self.values[ok])] if mode == "max" else idx[np.argmin(self.values[ok])]
        return int(self.steps[i]), float(self.values[i])


@dataclasses.dataclass(frozen=True)
class EvalResult:
    name: str
    stage_or_step: str | int
    overall: dict[str, float | None]
    per_type: dict[str, dict[str, float | None]]
    split: str = ""


@dataclasses.dataclass(frozen=True)
class Report:
    out_dir: Path
    summary: Path
    plots: tuple[Path, ...]
    others: tuple[Path, ...] = ()  # further files written (transcripts.md)


# --------------------------------------------------------------------------- loading

def collect_series(records: Iterable[dict]) -> dict[str, Series]:
    """Per metric key: the last value written for each step, sorted by step (null -> NaN)."""
    by_key: dict[str, dict[int, float]] = {}
    for rec in records:
        step = rec.get("step")
        if not isinstance(step, int) or isinstance(step, bool):
            raise ReportError(f"metrics record without an integer 'step': {rec!r:.200}")
        for k, v in rec.items():
            if k in ("step", "time"):
                continue
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
                continue  # not a scalar metric
            by_key.setdefault(k, {})[step] = math.nan if v is None else float(v)
    out = {}
    for k, d in by_key.items():
        steps = np.array(sorted(d), dtype=np.int64)
        out[k] = Series(steps, np.array([d[s] for s in steps.tolist()], dtype=np.float64))
    return out


def _check_metric_dict(d: Any, where: str) -> dict[str, float | None]:
    if not isinstance(d, dict):
        raise ReportError(f"{where} must be an object of metric -> number, got {type(d).__name__}")
    out = {}
    for k, v in d.items():
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
            raise ReportError(f"{where}.{k} must be a number or null, got {v!r:.80}")
        out[str(k)] = None if v is None else float(v)
    return out


def load_eval(path: str | Path) -> EvalResult:
    """Parse and validate one eval json file (schema in the module docstring)."""
    path = run_path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ReportError(f"{path}: not valid JSON ({e.msg}, line {e.lineno})") from e
    if not isinstance(data, dict) or "results" not in data or "stage_or_step" not in data:
        raise ReportError(f"{path}: expected keys 'stage_or_step' and 'results'")
    sos = data["stage_or_step"]
    if isinstance(sos, bool) or not isinstance(sos, (str, int)):
        raise ReportError(f"{path}: 'stage_or_step' must be a string or int, got {sos!r:.80}")
    res = data["results"]
    if not isinstance(res, dict) or "overall" not in res:
        raise ReportError(f"{path}: 'results' must be an object with an 'overall' entry")
    overall = _check_metric_dict(res["overall"], f"{path.name}: results.overall")
    per_type_raw = res.get("per_type") or {}
    if not isinstance(per_type_raw, dict):
        raise ReportError(f"{path}: results.per_type must be an object of type -> metrics")
    per_type = {str(t): _check_metric_dict(m, f"{path.name}: results.per_type.{t}")
                for t, m in per_type_raw.items()}
    return EvalResult(path.stem, sos, overall, per_type, str(data.get("split") or ""))


# --------------------------------------------------------------------------- formatting

# fmt: seed_jax.transcript_text (shared with the tracking writers)


def _table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return lines


# --------------------------------------------------------------------------- plots

def new_figure(nrows: int = 1, ncols: int = 1, size: tuple[float, float] = (7.0, 4.0)):
    """``(figure, axes)``: a matplotlib figure of ``nrows x ncols`` panels of ``size`` inches
    each, on its own Agg canvas (no pyplot, so no global backend or figure registry); ``axes``
    is always a 2-d array (``axes[row, col]``)."""
    # deferred: matplotlib takes about a second to import and only plotting needs it
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(size[0] * ncols, size[1] * nrows))
    FigureCanvasAgg(fig)
    axes = fig.subplots(nrows, ncols, squeeze=False)
    return fig, axes


def save_figure(fig, path: Path, dpi: int = 100) -> Path:
    """Lay out and write ``fig`` as a PNG to ``path``; returns ``path``."""
    fig.tight_layout()
    with path.open("wb") as f:  # a local or a gs:// path (epath)
        fig.savefig(f, dpi=dpi, format="png")
    return path


def update_axis(ax) -> None:
    """An axis over RL updates: x labelled "update" with integer ticks only (update n is x = n,
    counted from 1, as everywhere else), and no offset or scientific notation on either axis (a
    "+1e3" corner label would shift every tick the reader sees)."""
    from matplotlib.ticker import MaxNLocator, ScalarFormatter

    ax.set_xlabel("update")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    for axis in (ax.xaxis, ax.yaxis):
        fmt = ScalarFormatter(useOffset=False)
        fmt.set_scientific(False)
        axis.set_major_formatter(fmt)


def _line_plot(path: Path, title: str, lines: list[tuple[str, Series]], ylabel: str,
               ylim: tuple[float, float] | None = None) -> Path:
    return save_figure(line_figure(title, lines, ylabel, ylim), path)


def line_figure(title: str, lines: list[tuple[str, Series]], ylabel: str, ylim: tuple[float, float] | None = None):
    """One panel, one line per series, over updates (`update_axis`)."""
    fig, ax = new_figure()
    ax = ax[0, 0]
    for label, s in lines:
        marker = "o" if len(s.steps) < 30 else None
        ax.plot(s.steps, s.values, label=label, marker=marker, markersize=3)
    ax.set_title(title)
    update_axis(ax)
    ax.set_ylabel(ylabel)
    if ylim:
        ax.set_ylim(*ylim)
    ax.grid(alpha=0.3)
    if len(lines) > 1:
        ax.legend()
    return fig


def _grid_plot(path: Path, title: str, panels: list[tuple[str, Series]]) -> Path:
    return save_figure(grid_figure(title, panels), path)


def grid_figure(title: str, panels: list[tuple[str, Series]]):
    """One panel per series (two columns) over updates (`update_axis`)."""
    ncols = 2 if len(panels) > 1 else 1
    nrows = math.ceil(len(panels) / ncols)
    fig, axes = new_figure(nrows, ncols, size=(5.5, 2.8))
    for i, ax in enumerate(axes.flat):
        if i >= len(panels):
            ax.set_visible(False)
            continue
        key, s = panels[i]
        ax.plot(s.steps, s.values, marker="o" if len(s.steps) < 30 else None, markersize=3)
        ax.set_title(key, fontsize=10)
        update_axis(ax)
        ax.grid(alpha=0.3)
    fig.suptitle(title)
    return fig


def _gate_hist(path: Path, skills: list[dict]) -> Path | None:
    groups: dict[str, list[float]] = {"success": [], "failure": []}
    for r in skills:
        g = r.get("gate")
        if isinstance(g, dict) and isinstance(g.get("mean"), (int, float)) and \
                r.get("outcome") in groups:
            groups[r["outcome"]].append(float(g["mean"]))
    if not any(groups.values()):
        return None
    fig, ax = new_figure()
    ax = ax[0, 0]
    bins = np.linspace(0.0, 1.0, 21)
    for outcome, color in (("success", "tab:green"), ("failure", "tab:red")):
        if groups[outcome]:
            ax.hist(np.clip(groups[outcome], 0, 1), bins=bins, alpha=0.55, color=color,
                    label=f"{outcome} (n={len(groups[outcome])})")
    ax.set_title("Per-trajectory gate mean by outcome")
    ax.set_xlabel("gate mean over gated tokens")
    ax.set_ylabel("trajectories")
    ax.legend()
    return save_figure(fig, path)


def _eval_plot(path: Path, evals: list[EvalResult]) -> Path | None:
    pts = [(str(e.stage_or_step), e.overall.get("success")) for e in evals]
    pts = [(n, v) for n, v in pts if v is not None and math.isfinite(v)]
    if not pts:
        return None
    fig, ax = new_figure()
    ax = ax[0, 0]
    ax.bar([n for n, _ in pts], [v for _, v in pts], color="tab:blue")
    ax.set_title("Evaluation success (overall)")
    ax.set_ylabel("success")
    ax.set_ylim(0, max(1.0, max(v for _, v in pts)))
    return save_figure(fig, path)


CAPTIONS = {
    "success.png": "training-rollout success per update (with the evaluations' success at the updates they were made)",
    "episode_length.png": "mean agent turns per training episode",
    "opd_loss.png": "gated on-policy distillation loss of each update",
    "gate.png": "OPD gate: mean over gated tokens, share above 0.5, share of tokens carrying the term",
    "gate_hist.png": "per-trajectory mean gate, successful vs failed trajectories (all updates)",
    "parse_rate.png": "share of the policy's analyses whose skill parsed",
    "rollout.png": "rollout return, invalid-action rate and environment errors per update",
    "train.png": "losses, KL, entropy, gradient norm, learning rate and teacher gap per update",
    "time.png": "seconds per phase of an update and token throughput",
    "eval.png": "evaluation success of each evaluated model (no skills)",
}
"""One caption per plot file, written under its figure in summary.md (x: the update number, 1-based)."""


def make_plots(series: dict[str, Series], skills: list[dict], evals: list[EvalResult],
               out: Path) -> list[tuple[str, Path]]:
    """Draw every plot whose data exist; returns (title, path) pairs."""
    made: list[tuple[str, Path]] = []

    def have(*keys: str) -> list[tuple[str, Series]]:
        return [(k, series[k]) for k in keys if k in series]

    if s := have("rollout/success_rate", "eval/success_rate"):
        made.append(("Success rate", _line_plot(out / "success.png", "Success rate", s,
                                                "success rate", (-0.02, 1.02))))
    if s := have("rollout/episode_length"):
        made.append(("Episode length", _line_plot(out / "episode_length.png",
                                                  "Mean episode length", s, "turns")))
    if s := have("train/opd_loss"):
        made.append(("OPD loss", _line_plot(out / "opd_loss.png", "OPD loss", s, "loss")))
    if s := have("train/gate_mean", "train/gate_gt_half", "train/active_share"):
        made.append(("Gate distribution", _line_plot(out / "gate.png", "OPD gate over updates", s,
                                                     "value", (-0.02, 1.02))))
    if (p := _gate_hist(out / "gate_hist.png", skills)) is not None:
        made.append(("Gate mean per trajectory", p))
    if s := have("analysis/parse_rate"):
        made.append(("Skill parse rate", _line_plot(out / "parse_rate.png", "Skill parse rate", s,
                                                    "parse rate", (-0.02, 1.02))))
    if s := have("rollout/return", "rollout/invalid_rate", "rollout/env_errors"):
        made.append(("Rollouts", _grid_plot(out / "rollout.png", "Rollouts", s)))
    if s := have("train/loss", "train/pg_loss", "train/kl", "train/entropy", "train/grad_norm",
                 "train/lr", "train/teacher_gap"):
        made.append(("Training", _grid_plot(out / "train.png", "Training", s)))
    if s := have("time/rollout", "time/analysis", "time/batch", "time/train", "perf/rollout_tokens_per_s",
                 "perf/train_tokens_per_s"):
        made.append(("Time and throughput", _grid_plot(out / "time.png", "Time split (s) and "
                                                       "throughput", s)))
    if (p := _eval_plot(out / "eval.png", evals)) is not None:
        made.append(("Evaluation", p))
    return made


# --------------------------------------------------------------------------- summary

def _metrics_section(series: dict[str, Series]) -> list[str]:
    keys = [k for k in CONTRACT_KEYS if k in series]
    keys += sorted(k for k in series if k not in CONTRACT_KEYS)
    rows = []
    for k in keys:
        s = series[k]
        step, last = s.last()
        best = s.best(BEST[k]) if k in BEST else None
        rows.append([f"`{k}`", fmt(last), str(step),
                     "—" if best is None else f"{fmt(best[1])} ({BEST[k]})",
                     "—" if best is None else str(best[0]), str(len(s.steps))])
    return ["## Metrics", ""] + _table(
        ["Metric", "Last", "Last step", "Best", "Best step", "Points"], rows) + [""]


def _skills_section(skills: list[dict]) -> list[str]:
    rows = []
    for outcome in ("success", "failure"):
        rs = [r for r in skills if r.get("outcome") == outcome]
        if not rs:
            continue
        parse = sum(bool(r.get("parse_ok")) for r in rs) / len(rs)
        gm = [r["gate"]["mean"] for r in rs if isinstance(r.get("gate"), dict)
              and isinstance(r["gate"].get("mean"), (int, float))]
        rows.append([outcome, str(len(rs)), fmt(parse), fmt(float(np.mean(gm))) if gm else "—"])
    if not rows:
        return []
    updates = sorted({r.get("update") for r in skills if isinstance(r.get("update"), int)})
    span = f" over updates {updates[0]}..{updates[-1]}" if updates else ""
    return ["## Skills", "", f"{len(skills)} skill records{span} (`{SKILLS_FILE}`).", ""] + _table(
        ["Outcome", "Skills", "Parse OK", "Mean gate mean"], rows) + [""]


def _paper_section(evals: list[EvalResult], env: str) -> list[str]:
    """The paper's aggregates (`seed_jax.pipeline.aggregates`) of each evaluated model, from its
    per-split files."""
    by_model: dict[str, dict[str, dict]] = {}
    for e in evals:
        by_model.setdefault(str(e.stage_or_step), {})[e.split or e.name] = {
            "overall": e.overall, "per_type": {t: {**m, "n": m.get("n", 1)} for t, m in e.per_type.items()}}
    lines: list[str] = []
    for model, results in by_model.items():
        table = format_aggregates(env, paper_aggregates(env, results))
        if table:
            lines += [f"### The paper's aggregates: {model}", "", *table, ""]
    return lines


def _eval_section(evals: list[EvalResult], env: str = "") -> list[str]:
    if not evals:
        return []
    lines = ["## Evaluation", ""] + _paper_section(evals, env)
    for e in evals:
        lines += [f"### {e.stage_or_step} (`{EVAL_DIR}/{e.name}.json`)", ""]
        lines += _table(["Metric", "Value"], [[k, fmt(v)] for k, v in e.overall.items()]) + [""]
        if e.per_type:
            cols: list[str] = []
            for m in e.per_type.values():
                cols += [c for c in m if c not in cols]
            lines += _table(["Type"] + cols, [[t] + [fmt(m.get(c)) for c in cols]
                                              for t, m in e.per_type.items()]) + [""]
    return lines


# --------------------------------------------------------------------------- transcripts

# render_transcript: seed_jax.transcript_text (TensorBoard and W&B show the same text)


def _tracking_section(workdir: Path) -> list[str]:
    """Where the run's tracking lives: TensorBoard's directory (scalars, the config and transcripts
    as text, hparams) and the W&B run (its URL when ``tracking.wandb_entity`` is set, else the
    project and run id; ``wandb sync`` for offline runs)."""
    lines = []
    if (workdir / TB_DIR).is_dir():
        lines.append(f"- TensorBoard: `tensorboard --logdir {workdir / TB_DIR}`: scalars, TEXT `config` (the resolved "
                     "config) and `transcripts` (each RL update's sample), HPARAMS")
    if (workdir / WANDB_ID_FILE).exists():
        rid = (workdir / WANDB_ID_FILE).read_text().strip()
        try:
            t = json.loads((workdir / "config.json").read_text()).get("tracking") or {}
        except (OSError, ValueError):
            t = {}
        project, entity = t.get("wandb_project") or "seed_jax", t.get("wandb_entity") or ""
        where = (f"[{entity}/{project}/{rid}](https://wandb.ai/{entity}/{project}/runs/{rid})" if entity
                 else f"project `{project}`, run id `{rid}`")
        lines.append(f"- Weights & Biases: {where}: metrics, the config, a `transcripts` table per RL update")
        offline = sorted((workdir / "wandb").glob("offline-run-*")) if (workdir / "wandb").is_dir() else []
        if offline:
            lines.append(f"  (offline: `wandb sync {offline[-1]}` uploads it)")
    return ["## Tracking", "", *lines, ""] if lines else []


def _eval_transcripts(workdir: Path) -> tuple[str, list[dict]]:
    """(file name, transcript records) of the newest evaluation's trajectories ("final_*" first)."""
    files = sorted((workdir / EVAL_DIR).glob("*.trajectories.jsonl")) if (workdir / EVAL_DIR).is_dir() else []
    if not files:
        return "", []
    final = [f for f in files if f.name.startswith("final_")]
    f = (final or files)[-1]
    try:
        trajs = read_trajectories(f)
    except ValueError as e:
        raise ReportError(str(e)) from e
    return f.name, [transcript_json(-1, t) for t in trajs]


def write_transcripts(workdir: Path, out: Path, n: int) -> tuple[Path, int] | None:
    """``out/transcripts.md``: the first ``n`` transcripts of the last RL update's sample and of the
    newest evaluation; (path, number rendered), or None when the run has none (or ``n`` is 0)."""
    if n <= 0:
        return None
    try:
        rl_recs = read_transcripts(workdir)
    except ValueError as e:  # a corrupt line that is not a torn last line
        raise ReportError(str(e)) from e
    eval_name, eval_recs = _eval_transcripts(workdir)
    if not rl_recs and not eval_recs:
        return None
    lines = [f"# Transcripts: `{workdir}`", ""]
    count = 0
    if rl_recs:
        last = max(r["update"] for r in rl_recs)
        picked = [r for r in rl_recs if r["update"] == last][:n]
        lines += [f"## RL update {last} (`{TRANSCRIPTS_FILE}`)", ""]
        for r in picked:
            lines += render_transcript(r, f"update {last}, `{r['traj_id']}`")
        count += len(picked)
    if eval_recs:
        lines += [f"## Evaluation (`{EVAL_DIR}/{eval_name}`)", ""]
        for r in eval_recs[:n]:
            lines += render_transcript(r, f"eval, `{r['traj_id']}`")
        count += len(eval_recs[:n])
    path = out / "transcripts.md"
    path.write_text("\n".join(lines), encoding="utf-8")
    return path, count


def run_data(workdir) -> str | None:
    """The data line of a run (`seed_jax.pipeline.environments.describe_data` of its config.json's
    ``env`` block, resolved now: the WebShop generated catalog named as such), or None."""
    try:
        env = json.loads((workdir / "config.json").read_text()).get("env")
    except (OSError, ValueError):
        return None
    if not isinstance(env, dict) or "name" not in env:
        return None
    from seed_jax.pipeline.environments import describe_data  # the env packages: only when a report asks

    try:
        return describe_data(ml_collections.ConfigDict(env))
    except (OSError, ValueError) as e:
        return f"unknown ({e})"


# --------------------------------------------------------------------------- several runs

def run_env(workdir: Path) -> str:
    """The run's ``env.name`` from its config.json ('' without one)."""
    try:
        return str(json.loads((workdir / "config.json").read_text()).get("env", {}).get("name", ""))
    except (OSError, ValueError, AttributeError):
        return ""


def run_label(workdir: Path) -> str:
    """``<directory name> (<method>)``, the method read from the run's config.json when it has one."""
    try:
        method = json.loads((workdir / "config.json").read_text()).get("method")
    except (OSError, ValueError):
        method = None
    return f"{workdir.name} ({method})" if method else workdir.name


def compare_figure(runs: Sequence[dict[str, Series]], labels: Sequence[str], keys: Sequence[str]):
    """One panel per key (two columns), one line per run that has the key, labelled."""
    ncols = 2 if len(keys) > 1 else 1
    fig, axes = new_figure(math.ceil(len(keys) / ncols), ncols, size=(5.5, 3.2))
    for i, ax in enumerate(axes.flat):
        if i >= len(keys):
            ax.set_visible(False)
            continue
        for label, series in zip(labels, runs):
            if keys[i] in series:
                s = series[keys[i]]
                ax.plot(s.steps, s.values, label=label, marker="o" if len(s.steps) < 30 else None, markersize=3)
        ax.set_title(keys[i], fontsize=10)
        update_axis(ax)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(" vs ".join(labels))
    return fig


def compare_runs(workdirs: Sequence[str | Path], out_dir: str | Path | None = None,
                 labels: Sequence[str] | None = None) -> Report:
    """Overlay several runs: ``compare.png`` and ``compare.md`` in ``out_dir`` (default `COMPARE_DIR`)."""
    dirs = [run_path(w) for w in workdirs]
    if labels is not None and len(labels) != len(dirs):
        raise ReportError(f"--labels gives {len(labels)} labels for {len(dirs)} run directories")
    labels = list(labels) if labels is not None else [run_label(d) for d in dirs]
    runs = []
    for d in dirs:
        if not d.is_dir():
            raise ReportError(f"workdir {d} does not exist or is not a directory")
        if not (d / METRICS_FILE).exists():
            raise ReportError(f"nothing to compare in {d}: no {METRICS_FILE}")
        try:
            runs.append(collect_series(MetricsWriter.read(d)))
        except ValueError as e:
            raise ReportError(str(e)) from e
    keys = [k for k in COMPARE_KEYS if any(k in r for r in runs)]
    if not keys:
        raise ReportError(f"no run has any of {', '.join(COMPARE_KEYS)}")
    out = run_path(out_dir if out_dir is not None else COMPARE_DIR)
    out.mkdir(parents=True, exist_ok=True)
    png = save_figure(compare_figure(runs, labels, keys), out / "compare.png")
    rows = [[f"`{k}`"] + [fmt(r[k].last()[1]) if k in r else "—" for r in runs] for k in keys]
    lines = ["# Runs compared", ""]
    lines += _table(["Run", "Directory"], [[lab, f"`{d}`"] for lab, d in zip(labels, dirs)]) + [""]
    lines += ["Last value per run:", ""] + _table(["Metric", *labels], rows) + [""]
    lines += ["![runs compared](compare.png)", ""]
    summary = out / "compare.md"
    summary.write_text("\n".join(lines), encoding="utf-8")
    return Report(out, summary, (png,))


def make_report(workdir: str | Path, out_dir: str | Path | None = None, transcripts: int = 3) -> Report:
    """Write plots, ``summary.md`` and ``transcripts.md`` (``transcripts`` per source) for run
    ``workdir``; raises ``ReportError`` if it has no data."""
    workdir = run_path(workdir)
    if not workdir.is_dir():
        raise ReportError(f"workdir {workdir} does not exist or is not a directory")
    try:
        records = MetricsWriter.read(workdir) if (workdir / METRICS_FILE).exists() else []
        skills = SkillLog.read(workdir)
    except ValueError as e:  # a corrupt line that is not a torn last line
        raise ReportError(str(e)) from e
    eval_files = sorted((workdir / EVAL_DIR).glob("*.json")) if (workdir / EVAL_DIR).is_dir() else []
    evals = [load_eval(p) for p in eval_files]
    if not records and not skills and not evals:
        raise ReportError(f"nothing to report in {workdir}: no records in {METRICS_FILE} or "
                          f"{SKILLS_FILE} and no {EVAL_DIR}/*.json")
    series = collect_series(records)
    out = run_path(out_dir) if out_dir is not None else workdir / REPORT_DIR
    out.mkdir(parents=True, exist_ok=True)
    plots = make_plots(series, skills, evals, out)
    written = write_transcripts(workdir, out, transcripts)

    lines = [f"# Run report: `{workdir}`", ""]
    data = run_data(workdir)
    if data:
        lines += [f"Data: {data}", ""]
    if records:
        steps = sorted({r["step"] for r in records})
        lines += [f"{len(records)} metric records, {len(steps)} steps ({steps[0]}..{steps[-1]}).", ""]
    if series:
        lines += _metrics_section(series)
    lines += _skills_section(skills)
    lines += _eval_section(evals, run_env(workdir))
    lines += _tracking_section(workdir)
    if written is not None:
        lines += ["## Transcripts", "", f"{written[1]} trajectories read in full: "
                  f"[{written[0].name}]({written[0].relative_to(out).as_posix()}).", ""]
    if plots:
        lines += ["## Plots", ""]
        for i, (title, p) in enumerate(plots, 1):  # each caption right under its own figure
            lines += [f"### {title}", "", f"![{title}]({p.relative_to(out).as_posix()})", "",
                      f"*Figure {i}: {title}: {CAPTIONS.get(p.name, title)}.*", ""]
    summary = out / "summary.md"
    summary.write_text("\n".join(lines), encoding="utf-8")
    extra = (written[0],) if written is not None else ()
    return Report(out, summary, tuple(p for _, p in plots), extra)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m seed_jax.report",
                                 description="Plots, a markdown summary and transcripts of a seed_jax run; "
                                             "with several run directories, their curves on one figure.")
    ap.add_argument("workdirs", nargs="+", metavar="workdir",
                    help="run directory (holds metrics.jsonl, skills.jsonl, eval/, rl/transcripts.jsonl)")
    ap.add_argument("--out", default=None,
                    help=f"output directory (default <workdir>/{REPORT_DIR}; {COMPARE_DIR} for several runs)")
    ap.add_argument("--transcripts", type=int, default=3, help="trajectories rendered per source (0: none)")
    ap.add_argument("--labels", default=None, help="comma-separated run labels for several runs")
    args = ap.parse_args(argv)
    try:
        if len(args.workdirs) == 1:
            rep = make_report(args.workdirs[0], args.out, args.transcripts)
        else:
            labels = [x.strip() for x in args.labels.split(",")] if args.labels else None
            rep = compare_runs(args.workdirs, args.out, labels)
    except ReportError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for p in (rep.summary, *rep.others, *rep.plots):
        print(f"wrote {p}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
