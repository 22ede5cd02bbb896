"""The paper's headline aggregates of an evaluation, beside the per-split figures.

Input: one evaluation's results per split, ``{split: {"overall": {...}, "per_type": {type:
{"success_rate", "n"}}}}`` (what `seed_jax.pipeline.evaluate.summarize` returns and each
``eval/<tag>_<split>.json`` holds). Output: ``{name: value}`` with the paper's figures, fractions
in 0..1 (``format_aggregates`` prints them as the paper does, in percent):

- ALFWorld (splits ``valid_seen``, ``valid_unseen``), per split ``s``:
  ``<s>/success_per_game`` = (games won) / (games played), every game weighing the same (the
  split's ``overall.success_rate``), and ``<s>/success_macro_types`` = (1/T) sum_t success_t,
  the mean over the T task types present (six in ALFWorld) of each type's success rate, every
  type weighing the same: the paper's ALFWorld figure (91.8 for SEED, Qwen2.5-3B).
- Search (one split per QA set): ``qa_mean`` = (1/K) sum_k success_k over the K QA sets, every
  set weighing the same however many questions it has (the paper's 45.7 over seven sets), and
  ``qa/<set>`` each set's success (exact match).
- WebShop (split ``test``): ``score`` = the mean final reward over the evaluated goals (0..1;
  the paper reports it x100) and ``success`` = the share of goals with a full reward, over the
  goals evaluated (the paper's 128; `configs/webshop.py` sets ``eval.num_tasks = 128``, drawn by
  `seed_jax.pipeline.environments.Benchmark.tasks`: a ``random.Random(f"{seed}:test")`` sample of
  the test split's goals, kept in file order, the same goals for every method of a seed).
"""

from __future__ import annotations

from collections.abc import Mapping


def _success(res: Mapping) -> float | None:
    v = (res.get("overall") or {}).get("success_rate")
    return None if v is None else float(v)


def paper_aggregates(env: str, results: Mapping[str, Mapping]) -> dict[str, float]:
    """The paper's aggregates of ``env``'s evaluation ``results`` (module docstring); {} for an
    environment without any (the household study) or no results."""
    out: dict[str, float] = {}
    if env == "alfworld":
        for split, res in results.items():
            per_game = _success(res)
            if per_game is not None:
                out[f"{split}/success_per_game"] = per_game
            types = [float(t["success_rate"]) for t in (res.get("per_type") or {}).values()
                     if t.get("success_rate") is not None and t.get("n", 1)]
            if types:
                out[f"{split}/success_macro_types"] = sum(types) / len(types)
                out[f"{split}/task_types"] = float(len(types))
    elif env == "search":
        sets = {split: s for split, res in results.items() if (s := _success(res)) is not None}
        if sets:
            out["qa_mean"] = sum(sets.values()) / len(sets)
            out["qa_sets"] = float(len(sets))
            out.update({f"qa/{split}": s for split, s in sorted(sets.items())})
    elif env == "webshop":
        for split, res in results.items():
            o = res.get("overall") or {}
            prefix = "" if split == "test" else f"{split}/"
            if o.get("score") is not None:
                out[f"{prefix}score"] = float(o["score"])
            if o.get("success_rate") is not None:
                out[f"{prefix}success"] = float(o["success_rate"])
            if o.get("n") is not None:
                out[f"{prefix}goals"] = float(o["n"])
    return out


def format_aggregates(env: str, agg: Mapping[str, float]) -> list[str]:
    """Markdown lines: the paper's aggregates as the paper prints them (percent, one decimal)."""
    if not agg:
        return []

    def pct(v: float) -> str:
        return f"{100 * v:.1f}"

    rows: list[str] = []
    if env == "alfworld":
        rows += ["| split | success, macro over task types (paper) | success per game | task types |",
                 "|---|---|---|---|"]
        for split in sorted({k.split("/", 1)[0] for k in agg}):
            macro, game = agg.get(f"{split}/success_macro_types"), agg.get(f"{split}/success_per_game")
            rows.append(f"| {split} | {pct(macro) if macro is not None else '-'} | "
                        f"{pct(game) if game is not None else '-'} | {int(agg.get(f'{split}/task_types', 0))} |")
    elif env == "search":
        sets = sorted(k.split("/", 1)[1] for k in agg if k.startswith("qa/"))
        rows += ["| QA mean (equal weight, paper) | " + " | ".join(sets) + " |", "|---" * (len(sets) + 1) + "|",
                 f"| {pct(agg['qa_mean'])} | " + " | ".join(pct(agg[f'qa/{s}']) for s in sets) + " |"]
    elif env == "webshop":
        rows += ["| score (x100) | success | goals |", "|---|---|---|",
                 f"| {pct(agg['score']) if 'score' in agg else '-'} | {pct(agg['success']) if 'success' in agg else '-'} "
                 f"| {int(agg.get('goals', 0))} |"]
    return rows
