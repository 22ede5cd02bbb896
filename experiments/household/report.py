"""The study's results: markdown table, results.json, PNG learning curves, gate curves and the
audit plot (gate vs expert-consistency, all-fail GRPO groups).

Success figures are evaluation success rates (temperature ``eval.temperature``, no skills in
the prompt, every task of the split once) of

- the stage-0 BC policy and the stage-1 checkpoint (the common start of every arm);
- each arm at the mid-point (``rl.eval_every``) (``eval/rl_<eval_every>_<split>.json``, written inside the
  RL stage) and at the final update (``eval/final_<split>.json``, the eval stage).

Across seeds: mean and sample standard deviation (ddof = 1; '-' for one seed), in percent.
The audit table is `experiments.household.audit.summarize` pooled over seeds: every joined
step-sample of the arm's seeds in that window, token-weighted. The Delta audit
(`experiments.household.audit.delta_audit`) is computed per seed and reported as the mean over
seeds with its 95 % t-interval; the all-fail share of GRPO groups (`audit.group_outcomes`) is
pooled over seeds.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from seed_jax.experiments.household.audit import (
    GATE_BINS,
    audit_run,
    consistency_by_update,
    group_outcomes,
    read_step_actions,
    skill_accuracy_by_update,
)
from seed_jax.metrics import METRICS_FILE, MetricsWriter
from seed_jax.pipeline.environments import make_benchmark
from seed_jax.report import collect_series, new_figure, save_figure
from seed_jax.rollout.trajectory import iter_trajectories

ARM_LABELS = {"sft_grpo": "GRPO (stage-1 SFT, lambda_opd=0)", "seed": "SEED", "seed_static": "SEED-static",
              "seed_shuffled": "SEED-shuffled", "oracle": "SEED-oracle (expert skills)"}


def arm_label(arm: str) -> str:
    if "@" in arm:
        m, lam = arm.split("@", 1)
        return f"{ARM_LABELS.get(m, m)} (lambda_opd={lam})"
    return ARM_LABELS.get(arm, arm)


def arm_color(arms: Sequence[str], arm: str) -> str:
    """The arm's matplotlib colour: its place in the report's ``arms``, so every figure agrees."""
    return f"C{list(arms).index(arm) % 10}"


def arm_dir(out: Path, arm: str, seed: int) -> Path:
    return out / "arms" / arm.replace("@", "_l") / f"seed{seed}"


def finished(workdir: Path) -> bool:
    """A study run (a start evaluation or an arm's RL + evaluation) is finished when the pipeline
    has written its last stage marker, ``stages/eval.json``; a run killed part-way is not."""
    return (Path(workdir) / "stages" / "eval.json").exists()


def eval_success(workdir: Path, tag: str, split: str) -> float | None:
    f = workdir / "eval" / f"{tag}_{split}.json"
    if not f.exists():
        return None
    return float(json.loads(f.read_text())["results"]["overall"]["success_rate"])


def repeat_share(workdir: Path, tag: str, split: str) -> float | None:
    """Share of evaluation steps whose command repeats the step before's (same valid command
    twice in a row: in the household a repeat is never needed, and a repeated command that is
    not admissible loops on 'Nothing happens.'). None when the trajectories file is missing."""
    f = workdir / "eval" / f"{tag}_{split}.trajectories.jsonl"
    if not f.exists():
        return None
    rep = n = 0
    for t in iter_trajectories(f):
        acts = [s.action if s.valid else "" for s in t.steps]
        rep += sum(1 for a, b in zip(acts, acts[1:]) if b and a == b)
        n += len(acts)
    return rep / n if n else None


def mean_std(values: Sequence[float | None]) -> tuple[float | None, float | None, int]:
    """(mean, sample std (ddof 1; None for fewer than 2 values), n) over the non-None values."""
    v = [x for x in values if x is not None]
    if not v:
        return None, None, 0
    return float(np.mean(v)), (float(np.std(v, ddof=1)) if len(v) > 1 else None), len(v)


# Two-sided 95 % quantiles of Student's t, t_{0.975, df}, for df = 1..30 (printed tables; above 30
# the normal 1.960 is used, at most 2 % below the true quantile).
T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
        2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
        2.045, 2.042)


def ci95(values: Sequence[float | None]) -> tuple[float | None, float | None, int]:
    """(mean, half-width, n) of the 95 % t-interval of the mean over the non-None values:
    half = t_{0.975, n-1} * s / sqrt(n), s the sample std (ddof 1); half is None for n < 2."""
    m, s, n = mean_std(values)
    if s is None:
        return m, None, n
    t = T975[n - 2] if n - 1 <= len(T975) else 1.960
    return m, t * s / math.sqrt(n), n


def fmt_pct(mean: float | None, std: float | None) -> str:
    if mean is None:
        return "-"
    return f"{100 * mean:.1f}" + (f" ± {100 * std:.1f}" if std is not None else "")


def metric_series(records: list[dict]) -> dict[str, dict[int, float]]:
    """metric key -> {step: last value of the key at that step} (steps without a value left out)."""
    return {k: {int(st): float(v) for st, v in zip(ser.steps, ser.values) if np.isfinite(v)}
            for k, ser in collect_series(records).items()}


def collect_results(config, out: Path, arms: Sequence[str], seeds: Sequence[int]) -> dict:
    splits = tuple(config.env.eval_splits)
    mid_tag = f"rl_{config.rl.eval_every:06d}" if config.rl.eval_every else None
    res: dict = {"splits": list(splits), "num_updates": config.rl.num_updates, "mid_update": config.rl.eval_every,
                 "seeds": list(seeds), "arms": {},
                 "eval_tasks_per_split": int(config.eval.num_tasks or config.env.num_eval_tasks),
                 "rollout_temperature": float(config.rollout.temperature)}
    res["stage0"] = {s: eval_success(out / "stage0" / "eval_run", "checkpoint", s) for s in splits}
    res["start_base"] = {s: eval_success(out / "base", "final", s) for s in splits}
    # the stage-1 checkpoint evaluated with each seed's tasks and sampling streams (start/seed<k>)
    res["start_by_seed"] = {str(k): {s: eval_success(out / "start" / f"seed{k}", "checkpoint", s) for s in splits}
                            for k in seeds if finished(out / "start" / f"seed{k}")}
    res["start_repeats"] = {s: mean_std([repeat_share(out / "start" / f"seed{k}", "checkpoint", s)
                                         for k in res["start_by_seed"]])[0] for s in splits}
    res["start"] = {s: (mean_std([v[s] for v in res["start_by_seed"].values()])[0] if res["start_by_seed"]
                        else res["start_base"][s]) for s in splits}
    res["probe"] = json.loads((out / "probe.json").read_text()) if (out / "probe.json").exists() else None
    for name, p in (("stage0_summary", out / "stage0" / "policy" / "stage0.json"),
                    ("stage1_collect", out / "base" / "stages" / "collect.json"),
                    ("stage1_annotate", out / "base" / "stages" / "annotate.json"),
                    ("stage1_sft", out / "base" / "stages" / "sft.json")):
        res[name] = json.loads(p.read_text()) if p.exists() else None
    bench = make_benchmark(config.env)
    tasks_by_id = {t["task_id"]: t for t in bench.tasks(bench.train_split)}
    for arm in arms:
        per_seed = {}
        for seed in seeds:
            wd = arm_dir(out, arm, seed)
            if not finished(wd):
                continue
            recs = metric_series(MetricsWriter.read(wd)) if (wd / METRICS_FILE).exists() else {}
            actions = read_step_actions(wd)
            per_seed[str(seed)] = {
                "final": {s: eval_success(wd, "final", s) for s in splits},
                "final_repeats": {s: repeat_share(wd, "final", s) for s in splits},
                "mid": {s: eval_success(wd, mid_tag, s) for s in splits} if mid_tag else {},
                "train_success": recs.get("rollout/success_rate", {}),
                "parse_rate": recs.get("analysis/parse_rate", {}),
                "opd_gate_mean": recs.get("train/gate_mean", {}),
                "opd_active_share": recs.get("train/active_share", {}),
                "teacher_gap": recs.get("train/teacher_gap", {}),
                "consistency": {str(u): v for u, v in consistency_by_update(actions, tasks_by_id).items()},
                "audit": audit_run(wd, tasks_by_id, config.rl.num_updates, actions),
                "groups": {str(u): v for u, v in group_outcomes(actions).items()},
                "skill_accuracy": {str(u): v for u, v in skill_accuracy_by_update(wd, tasks_by_id, actions).items()},
            }
        res["arms"][arm] = per_seed
    return res


def _agg(res: dict, arm: str, point: str, split: str):
    vals = [d[point].get(split) for d in res["arms"][arm].values() if d.get(point)]
    return mean_std(vals)


def pooled_audit(res: dict, arm: str, window: str) -> dict:
    """Token-weighted pooling of one window's audit stats over the arm's seeds."""
    out = {}
    for kind in ("consistent", "inconsistent"):
        w = g = h = rows = 0.0
        for d in res["arms"][arm].values():
            a = d.get("audit")
            if not a:
                continue
            st = a["summary"][window][kind]
            if st["tokens"]:
                w += st["tokens"]
                g += st["tokens"] * st["gate_mean"]
                h += st["tokens"] * st["gate_gt_half"]
                rows += st["rows"]
        out[kind] = {"rows": int(rows), "gate_mean": g / w if w else None, "gate_gt_half": h / w if w else None}
    return out


# per-update counts of a seed's results: field -> ({numerator key: its denominator key}, the field's count)
POOLED = {"consistency": ({"consistent": "steps"}, "steps"),  # `audit.consistency_by_update`
          "groups": ({"all_fail": "groups", "all_win": "groups"}, "groups"),  # `audit.group_outcomes`
          # `audit.skill_accuracy_by_update`: names_place among the skills whose episode showed the place
          "skill_accuracy": ({"names_place": "skills", "parsed": "skills", "seen": "skills",
                              "seen_names_place": "seen"}, "skills")}


def pooled_share(per_seed: Sequence[dict], field: str, key: str, lo: int, hi: int) -> float | None:
    """sum k / sum n over updates [lo, hi) of all seeds, with k = ``d[field][u][key]`` and n
    the key's denominator (`POOLED`): e.g. the share of expert-consistent rollout actions
    (``consistency``, ``consistent``), of all-fail GRPO groups (``groups``, ``all_fail``), of RL
    skills naming the object's place (``skill_accuracy``, ``names_place``), of those whose episode
    showed it (``seen_names_place``); None without any. A count missing from a run recorded
    before its key existed reads as 0."""
    keys = POOLED[field][0]
    if key not in keys:
        raise KeyError(f"{field} counts {tuple(keys)}, not {key!r}")
    k = n = 0
    for d in per_seed:
        for u, v in (d.get(field) or {}).items():
            if lo <= int(u) < hi:
                k += v.get(key, 0)
                n += v.get(keys[key], 0)
    return k / n if n else None


def edge_windows(per_seed: Sequence[dict], field: str, width: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """[lo, hi) of the first and of the last ``width`` updates present in ``field`` of any seed
    (runs number their updates from 1, runs recorded before that from 0)."""
    ups = sorted({int(u) for d in per_seed for u in (d.get(field) or {})}) or [0]
    first, last = ups[:width], ups[-width:]
    return (first[0], first[-1] + 1), (last[0], last[-1] + 1)


def window_table(res: dict, arms: Sequence[str], field: str, columns: Sequence[tuple[str, str]],
                 head: Sequence[str]) -> list[str]:
    """A table of `pooled_share` per arm that has ``field``: the arm, the field's denominator
    summed over updates and seeds, then one cell per (key, window), window 'first' / 'last' =
    the first / last third of the updates present (`edge_windows`), 'all' = every update;
    ``head``: the lines above the rows, the column header last. [] when no arm has the field."""
    rows = []
    for arm in arms:
        ds = [d for d in res["arms"].get(arm, {}).values() if d.get(field)]
        if not ds:
            continue
        total = POOLED[field][1]
        n = sum(v[total] for d in ds for v in d[field].values())
        first, last = edge_windows(ds, field, max(1, res["num_updates"] // 3))
        span = {"first": first, "last": last, "all": (first[0], last[1])}
        cells = [pooled_share(ds, field, key, *span[window]) for key, window in columns]
        rows.append(f"| {arm_label(arm)} | {n} | " + " | ".join(map(_f, cells)) + " |")
    return ["", *head, "|" + "---|" * (len(columns) + 2), *rows] if rows else []


def delta_table(res: dict, arms: Sequence[str]) -> list[str]:
    """The Delta audit per arm: each correlation is computed per seed (`audit.delta_audit`) and
    reported as its mean over seeds with the 95 % t-interval (`ci95`); mean Deltas pooled the same way."""
    rows = []
    for arm in arms:
        ds = [d["audit"]["delta"] for d in res["arms"].get(arm, {}).values()
              if (d.get("audit") or {}).get("delta", {}).get("steps")]
        if not ds:
            continue
        cells = [fmt_r(ci95([d[k] for d in ds])) for k in ("r_expert", "r_outcome")]
        cells += [_f(mean_std([d[k] for d in ds])[0], 2) for k in
                  ("delta_consistent", "delta_inconsistent", "delta_won", "delta_lost")]
        rows.append(f"| {arm_label(arm)} | {len(ds)} | {sum(d['steps'] for d in ds)} | " + " | ".join(cells) + " |")
    if not rows:
        return []
    return ["", "## Delta audit: does the skill-induced shift follow the expert and the outcome?", "",
            "Delta = mean over a step's response tokens of l_skill - l_ord under theta_old (nats per token), "
            "one value per step-sample with a skill; r = Pearson (point-biserial) correlation of Delta with the "
            "step being the exact expert's action, and with its trajectory's success; per seed, then mean "
            "[95 % t-interval] over seeds.", "",
            "| arm | seeds | step-samples | r(Delta, expert action) | r(Delta, success) | mean Delta, expert "
            "actions | other actions | won trajectories | lost |", "|---|---|---|---|---|---|---|---|---|", *rows]


def fmt_r(stat: tuple[float | None, float | None, int]) -> str:
    mean, half, n = stat
    if mean is None:
        return "-"
    return f"{mean:+.3f}" + (f" [{mean - half:+.3f}, {mean + half:+.3f}]" if half is not None and n >= 2 else "")


def start_changes(res: dict, arm: str, split: str, point: str = "final") -> list[float]:
    """Per seed k, the arm's success at ``point`` minus the stage-1 start's on ``split``: the
    start evaluated with seed k (``start_by_seed``) when there is one, else the common start."""
    out = []
    for seed, d in res["arms"].get(arm, {}).items():
        if not d.get(point) or d[point].get(split) is None:
            continue
        start = (res.get("start_by_seed") or {}).get(seed, {}).get(split)
        start = res["start"].get(split) if start is None else start
        if start is not None:
            out.append(d[point][split] - start)
    return out


def fmt_ci(mean: float | None, half: float | None) -> str:
    """Points of success: '+12.3 [+4.1, +20.5]' (no interval for one value)."""
    if mean is None:
        return "-"
    text = f"{100 * mean:+.1f}"
    return text + (f" [{100 * (mean - half):+.1f}, {100 * (mean + half):+.1f}]" if half is not None else "")


def change_table(res: dict, arms: Sequence[str]) -> list[str]:
    """Markdown lines: each arm's change from the stage-1 start at the final update, per split,
    mean over seeds with its 95 % t-interval (`ci95`)."""
    splits = res["splits"]
    rows = []
    for arm in arms:
        cells = [ci95(start_changes(res, arm, s)) for s in splits]
        if any(n for _, _, n in cells):
            rows.append(f"| {arm_label(arm)} | " + " | ".join(fmt_ci(m, h) for m, h, _ in cells)
                        + f" | {max(n for _, _, n in cells)} |")
    if not rows:
        return []
    paired = bool(res.get("start_by_seed"))
    how = ("each seed's final evaluation minus the stage-1 checkpoint's evaluation with the same seed (same "
           "tasks and sampling streams)" if paired else
           "the start is one evaluation, whose own error is the noise floor below")
    return (["", f"Change from the stage-1 start at the final update (points; mean over seeds [95 % t-interval "
             f"of the mean]; {how}):", "",
             "| arm | " + " | ".join(splits) + " | seeds |", "|---|" + "---|" * len(splits) + "---|"] + rows)


def paired_differences(res: dict, arm: str, ref: str, split: str, point: str = "final") -> list[float]:
    """Per seed k that both arms ran: success_arm(k) - success_ref(k) on ``split`` at ``point``.
    Both runs of seed k start from the same stage-1 checkpoint and share the seed, so the
    difference cancels what the seed's tasks and start share."""
    a, r = res["arms"].get(arm, {}), res["arms"].get(ref, {})
    out = []
    for seed in a:
        x = (a[seed].get(point) or {}).get(split)
        y = (r.get(seed, {}).get(point) or {}).get(split)
        if x is not None and y is not None:
            out.append(x - y)
    return out


def paired_table(res: dict, arms: Sequence[str], ref: str = "sft_grpo") -> list[str]:
    """Markdown lines: each arm minus ``ref`` at the final update, per split, paired by seed
    (`paired_differences`), mean with its 95 % t-interval (`ci95`); none unless some arm
    shares a seed with ``ref``."""
    splits = res["splits"]
    rows = []
    for arm in arms:
        if arm == ref:
            continue
        cells = [ci95(paired_differences(res, arm, ref, s)) for s in splits]
        if any(n for _, _, n in cells):
            rows.append(f"| {arm_label(arm)} | " + " | ".join(fmt_ci(m, h) for m, h, _ in cells)
                        + f" | {max(n for _, _, n in cells)} |")
    if not rows:
        return []
    return (["", f"Each arm minus {arm_label(ref)} at the final update, paired by seed (points; mean over seeds "
             "[95 % t-interval of the mean]; an interval holding 0 means no difference shown):", "",
             "| arm | " + " | ".join(splits) + " | seeds |", "|---|" + "---|" * len(splits) + "---|"] + rows)


def _find_lift(probe_condition: dict) -> str:
    """'lift_e (n)' on the probe's detour steps whose subgoal is 'find' ('-' when none)."""
    f = (probe_condition.get("by_subgoal") or {}).get("find")
    if not f:
        return "-"
    room = f" / {f['headroom_expert']:.2f}" if f.get("headroom_expert") is not None else ""
    return f"{f['lift_expert']:.2f}{room} ({f['steps']})"


def _f(x, digits=3):
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def markdown(res: dict, arms: Sequence[str], timings: dict | None = None) -> str:
    splits = res["splits"]
    U, mid = res["num_updates"], res["mid_update"]
    n_seeds = len(res["seeds"])
    lines = ["# Household study: SEED vs GRPO from one stage-1 checkpoint", "",
             f"Success rate (%) on the evaluation splits, mean ± std over {n_seeds} seed(s); "
             f"{U} RL updates, columns @{mid} = the evaluation after update {mid}.", ""]
    head = ["arm"] + [f"{s} @{mid}" for s in splits] + [f"{s} @{U}" for s in splits]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    n_start = len(res.get("start_by_seed") or {})
    start_name = "stage-1 checkpoint (start of every arm)" + (f", mean of {n_start} seeded evals" if n_start > 1 else "")
    for name, key in (("stage-0 BC policy", "stage0"), (start_name, "start")):
        vals = [fmt_pct(res[key].get(s), None) for s in splits]
        lines.append("| " + " | ".join([name] + vals + vals) + " |")
    for arm in arms:
        if not res["arms"].get(arm):
            continue
        cells = [fmt_pct(*_agg(res, arm, "mid", s)[:2]) for s in splits]
        cells += [fmt_pct(*_agg(res, arm, "final", s)[:2]) for s in splits]
        lines.append("| " + " | ".join([arm_label(arm)] + cells) + " |")
    lines += change_table(res, arms)
    lines += paired_table(res, arms)
    if any(v is not None for v in (res.get("start_repeats") or {}).values()):
        lines += ["", "Repeated commands in the evaluation (share of steps repeating the step before's command; "
                  "mean over seeds): start " + ", ".join(f"{s} {_f(res['start_repeats'].get(s))}" for s in splits)
                  + "; " + "; ".join(
                      f"{arm_label(arm)} " + ", ".join(
                          f"{s} {_f(mean_std([d.get('final_repeats', {}).get(s) for d in res['arms'][arm].values()])[0])}"
                          for s in splits) for arm in arms if res["arms"].get(arm)) + "."]
    n_eval = res.get("eval_tasks_per_split")
    p0 = [res["start"].get(s) for s in splits if res["start"].get(s) is not None]
    if n_eval and p0:
        p = float(np.mean(p0))
        lines += ["", f"Noise floor: one evaluation is {n_eval} tasks per split, so its binomial standard error "
                  f"at the starting success {100 * p:.0f} % is {100 * math.sqrt(p * (1 - p) / n_eval):.1f} points "
                  f"(the std over seeds above also contains the evaluation's sampling, T = eval temperature)."]
    lines += ["", "Per seed (final update):", "", "| arm | seed | " + " | ".join(splits) + " |",
              "|---|---|" + "---|" * len(splits)]
    for arm in arms:
        for seed, d in res["arms"].get(arm, {}).items():
            lines.append(f"| {arm_label(arm)} | {seed} | " + " | ".join(
                fmt_pct(d["final"].get(s), None) for s in splits) + " |")
    audited = [a for a in arms if any(d.get("audit") for d in res["arms"].get(a, {}).values())]
    if audited:
        lines += ["", "## Skill audit: OPD gate on expert-consistent vs inconsistent step-samples", "",
                  "Gate g = sigmoid(beta (l_skill - l_ord)) under theta_old, token-weighted over step-samples with "
                  "a skill, pooled over seeds; w1..w3 = thirds of the updates.", "",
                  "| arm | window | consistent: rows | mean g | share g>0.5 | inconsistent: rows | mean g | "
                  "share g>0.5 |", "|---|---|---|---|---|---|---|---|"]
        for arm in audited:
            for window in ("w1", "w2", "w3", "all"):
                p = pooled_audit(res, arm, window)
                c, i = p["consistent"], p["inconsistent"]
                lines.append(f"| {arm_label(arm)} | {window} | {c['rows']} | {_f(c['gate_mean'])} | "
                             f"{_f(c['gate_gt_half'])} | {i['rows']} | {_f(i['gate_mean'])} | "
                             f"{_f(i['gate_gt_half'])} |")
    lines += delta_table(res, arms)
    lines += window_table(res, arms, "groups", [("all_fail", "first"), ("all_fail", "last"), ("all_fail", "all"),
                                                 ("all_win", "all")],
                          ["## GRPO signal: groups whose rollouts all fail (or all win) have zero advantage", "",
                           "A group = the rollouts of one task in one update; shares pooled over seeds.", "",
                           "| arm | groups | all-fail, first third | last third | all updates | all-win, all updates |"])
    lines += window_table(res, arms, "skill_accuracy", [("names_place", "first"), ("names_place", "last"),
                                                        ("names_place", "all"), ("parsed", "all"), ("seen", "all"),
                                                        ("seen_names_place", "all")],
                          ["## Analyzer accuracy: do the RL skills name where the task object was?", "",
                           "Share of the skills the teacher read (one per trajectory) that parse and name the task "
                           "object's start place (an expert skill does); pooled over seeds. 'Showed it': share of "
                           "the episodes that showed the place (the agent saw the object there or took it; "
                           "`envs.household.start_place_seen`), and among them the share of skills naming it "
                           "(reading accuracy; about an episode that never showed it, a skill can only guess).", "",
                           "| arm | skills | names the place, first third | last third | all updates | "
                           "parsed, all updates | episode showed it | names it when shown |"])
    if res.get("probe"):
        lines += ["", "## Teacher probe: does the hint H(h, s) favour the expert's action?", "",
                  "Fresh noisy demonstrations (30 % detours; the demonstrator searches for the object when "
                  "stage0.search is set, as stage 0's did) on training tasks; s = the scripted skill of "
                  "the same demonstration (own), of another one (shuffled), or the policy's own greedy skill (self). "
                  "Gates token-averaged over the demonstrated response; lifts = summed log-prob change from the "
                  "hint on steps where the demonstrator took a detour, for the expert's response (e) and the "
                  "detour (a); headroom e = -log-prob of the expert's response without a hint on those steps (no "
                  "hint can lift it more); 'find' steps: the object not yet in sight, where a hint naming its "
                  "place helps most; names the place = the self-written skill names the object's start place.",
                  "",
                  "| policy | skill | gate, consistent steps | gate, detour steps | lift e | lift a | "
                  "headroom e | lift e / headroom e, 'find' steps (n) | self-skill parse rate | self-skill names the place |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for name, p in res["probe"].items():
            for cond in ("own", "shuffled", "self"):
                q = p.get(cond) or {}
                lines.append(f"| {arm_label(name) if name in res['arms'] else name} | {cond} | "
                             f"{_f(q.get('gate_consistent'))} | {_f(q.get('gate_inconsistent'))} | "
                             f"{_f(q.get('lift_expert'), 2)} | {_f(q.get('lift_sampled'), 2)} | "
                             f"{_f(q.get('headroom_expert'), 2)} | {_find_lift(q)} | "
                             f"{_f(p.get('self_parse_rate'), 2)} | {_f(p.get('self_place_rate'), 2)} |")
    lines += ["", "## Training diagnostics (mean over seeds and updates)", "",
              "| arm | train-rollout success, first 3 updates | last 3 updates | expert-consistent actions, "
              "first third | last third | analyzer parse rate | OPD active share | teacher gap "
              "sg(l_skill - l_ord) |", "|---|---|---|---|---|---|---|---|"]
    for arm in arms:
        ds = list(res["arms"].get(arm, {}).values())
        if not ds:
            continue

        def avg(key, sl=slice(None), ds=ds):
            vals = [v for d in ds for _, v in sorted(d[key].items())[sl]]
            return float(np.mean(vals)) if vals else None

        first, last = edge_windows(ds, "consistency", max(1, U // 3))
        lines.append(f"| {arm_label(arm)} | {_f(avg('train_success', slice(0, 3)))} | "
                     f"{_f(avg('train_success', slice(-3, None)))} | "
                     f"{_f(pooled_share(ds, 'consistency', 'consistent', *first))} | "
                     f"{_f(pooled_share(ds, 'consistency', 'consistent', *last))} | {_f(avg('parse_rate'))} | "
                     f"{_f(avg('opd_active_share'))} | {_f(avg('teacher_gap'))} |")
    s1 = res.get("stage1_annotate") or {}
    s0 = res.get("stage0_summary") or {}
    lines += ["", f"Stage 0: {s0.get('examples', '-')} BC pairs ({s0.get('hint_examples', '-')} hint-reading), "
              f"{s0.get('params', '-')} parameters, vocabulary {s0.get('vocab', '-')}; random-policy success "
              f"{_f(s0.get('random_policy_success'))}. Stage 1: {s1.get('records', '-')} scripted skill records "
              f"(parse rate {_f(s1.get('parse_rate'))}); stage-1 SFT held-out NLL "
              f"{_f((res.get('stage1_sft') or {}).get('heldout_nll_before'))} -> "
              f"{_f((res.get('stage1_sft') or {}).get('heldout_nll_after'))}."]
    if timings:
        lines += ["", "Timings (wall s / process CPU s): " + ", ".join(
            f"{k} {v['wall_s']}/{v['cpu_s']}" for k, v in timings.items() if isinstance(v, dict))]
    return "\n".join(lines) + "\n"


def plot_curves(res: dict, arms: Sequence[str], path: Path) -> Path:
    """Left: training-rollout success per update (mean over seeds, band = ±1 std, 3-update
    moving average). Middle: share of expert-consistent rollout actions per update (pooled
    over seeds). Right: evaluation success at the mid-point and final update minus the same
    seed's start (`start_changes`), per split, mean over seeds with its 95 % t-interval (`ci95`)
    as error bars (none under 3 seeds, where t_{0.975,1} = 12.7 makes the bar fill the panel);
    one colour per arm in all three panels."""
    fig, axes = new_figure(1, 3, (17.0 / 3, 4.4))
    ax, ax3, ax2 = axes[0]
    U, mid = res["num_updates"], res["mid_update"]
    for i, arm in enumerate(arms):
        ds = list(res["arms"].get(arm, {}).values())
        if not ds:
            continue
        steps = sorted(set.intersection(*[set(d["train_success"]) for d in ds])) if ds else []
        if not steps:
            continue
        color = arm_color(arms, arm)
        m = np.array([[d["train_success"][s] for s in steps] for d in ds])
        k = 3
        kern = np.ones(k) / k
        sm = np.array([np.convolve(np.pad(r, (k - 1, 0), mode="edge"), kern, "valid") for r in m])
        mu, sd = sm.mean(0), sm.std(0)
        x = np.array(steps) + 1
        ax.plot(x, mu, color=color, label=arm_label(arm))
        ax.fill_between(x, mu - sd, mu + sd, color=color, alpha=0.15)
        ups = sorted({int(u) for d in ds for u in (d.get("consistency") or {})})
        if ups:
            ax3.plot(np.array(ups) + 1, [pooled_share(ds, "consistency", "consistent", u, u + 1) for u in ups],
                     color=color,
                     label=arm_label(arm))
        for j, (split, style) in enumerate(zip(res["splits"], ("-o", "--s"))):
            xs, ys, hs = [0.0], [0.0], [0.0]
            for point, u in (("mid", mid), ("final", U)):
                if not u:
                    continue
                m, h, n = ci95(start_changes(res, arm, split, point))
                xs.append(float(u))
                ys.append(np.nan if m is None else 100 * m)
                hs.append(0.0 if h is None or n < 3 else 100 * h)
            shift = (i - (len(arms) - 1) / 2) * 0.5 + (j - 0.5) * 0.2  # keep the error bars apart
            ax2.errorbar(np.array(xs) + shift, ys, yerr=hs, fmt=style, color=color, ms=4, capsize=2,
                         label=f"{arm_label(arm)} / {split}")
    ax.set_xlabel("RL update")
    ax.set_ylabel(f"training-rollout success (T={res.get('rollout_temperature', 1.0):g})")
    ax.set_title("Learning curves (mean ± std over seeds, 3-update average)")
    ax.legend(fontsize=7)
    ax3.set_xlabel("RL update")
    ax3.set_ylabel("share of expert-optimal actions")
    ax3.set_title("Rollout actions the exact expert would take")
    ax3.legend(fontsize=7)
    ax2.set_xlabel("RL update")
    ax2.axhline(0.0, color="0.6", lw=0.8)
    ax2.set_ylabel("eval success minus the same seed's start (points)")
    ax2.set_title("Evaluation change, mean and 95 % t-interval over seeds\n"
                  + " (solid) / ".join(res["splits"]) + " (dashed)")
    ax2.legend(fontsize=6)
    return save_figure(fig, path, dpi=110)


def plot_gates(res: dict, arms: Sequence[str], path: Path) -> Path | None:
    """Mean gate per update on expert-consistent (solid) vs inconsistent (dashed) step-samples,
    one colour per arm, the arm's colour in `plot_curves`."""
    audited = [a for a in arms if any(d.get("audit") for d in res["arms"].get(a, {}).values())]
    if not audited:
        return None
    fig, axes = new_figure(1, 1, (7.0, 4.2))
    ax = axes[0, 0]
    for arm in audited:
        for kind, style in (("consistent", "-"), ("inconsistent", "--")):
            acc: dict[int, list[tuple[float, float]]] = {}
            for d in res["arms"][arm].values():
                for u, st in (d.get("audit") or {}).get("per_update", {}).items():
                    s = st[kind]
                    if s["tokens"]:
                        acc.setdefault(int(u), []).append((s["tokens"], s["gate_mean"]))
            if not acc:
                continue
            xs = sorted(acc)
            ys = [sum(w * g for w, g in acc[u]) / sum(w for w, _ in acc[u]) for u in xs]
            ax.plot(np.array(xs) + 1, ys, style, color=arm_color(arms, arm), label=f"{arm_label(arm)}: {kind}")
    ax.axhline(0.5, color="gray", lw=0.5)
    ax.set_xlabel("RL update")
    ax.set_ylabel("mean OPD gate (theta_old)")
    ax.set_title("Skill audit: gate on expert-consistent vs inconsistent actions")
    ax.legend(fontsize=7)
    return save_figure(fig, path, dpi=110)


def plot_audit(res: dict, arms: Sequence[str], path: Path) -> Path | None:
    """Left: distribution of the step gate (token mean of g over a step's response, theta_old)
    on the exact expert's actions (solid) and on other actions (dashed), per audited arm, pooled
    over seeds (`audit.delta_audit` histograms, each normalized to a density). Right: share of
    all-fail GRPO groups per update, pooled over seeds (`audit.group_outcomes`). One colour per
    arm, as in `plot_curves`."""
    audited = [a for a in arms if any((d.get("audit") or {}).get("delta") for d in res["arms"].get(a, {}).values())]
    grouped = [a for a in arms if any(d.get("groups") for d in res["arms"].get(a, {}).values())]
    if not audited and not grouped:
        return None
    fig, axes = new_figure(1, 2, (6.5, 4.2))
    ax, ax2 = axes[0]
    centers = (np.arange(GATE_BINS) + 0.5) / GATE_BINS
    for arm in audited:
        for kind, style in (("consistent", "-"), ("inconsistent", "--")):
            h = np.sum([d["audit"]["delta"]["gate_hist"][kind] for d in res["arms"][arm].values()
                        if (d.get("audit") or {}).get("delta")], axis=0).astype(float)
            if h.sum() > 0:
                ax.plot(centers, h / h.sum() * GATE_BINS, style, color=arm_color(arms, arm),
                        label=f"{arm_label(arm)}: {'expert' if kind == 'consistent' else 'other'} actions")
    ax.axvline(0.5, color="gray", lw=0.5)
    ax.set_xlabel("step gate g = sigmoid(beta Delta), token mean")
    ax.set_ylabel("density over step-samples")
    ax.set_title("Gate vs expert-consistency")
    ax.legend(fontsize=7)
    for arm in grouped:
        ds = list(res["arms"][arm].values())
        ups = sorted({int(u) for d in ds for u in (d.get("groups") or {})})
        ax2.plot(ups, [pooled_share(ds, "groups", "all_fail", u, u + 1) for u in ups], color=arm_color(arms, arm),
                 label=arm_label(arm))
    ax2.set_xlabel("RL update")
    ax2.set_ylabel("share of groups whose rollouts all fail")
    ax2.set_ylim(-0.02, 1.02)
    ax2.set_title("GRPO groups with no signal (all fail)")
    ax2.legend(fontsize=7)
    return save_figure(fig, path, dpi=110)


def write_report(config, out: str | Path, arms: Sequence[str], seeds: Sequence[int]) -> dict:
    out = Path(out)
    res = collect_results(config, out, arms, seeds)
    timings_path = out / "timings.json"
    timings = json.loads(timings_path.read_text()) if timings_path.exists() else None
    md = markdown(res, arms, timings)
    (out / "results.md").write_text(md)
    (out / "results.json").write_text(json.dumps(res, indent=1, default=str))
    plot_curves(res, arms, out / "curves.png")
    plot_gates(res, arms, out / "gates.png")
    plot_audit(res, arms, out / "audit.png")
    res["markdown"] = md
    return res
