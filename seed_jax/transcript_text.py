"""Transcripts as markdown text, and the number format of the reports' tables: one renderer for
``report/transcripts.md`` (`seed_jax.report`), TensorBoard's TEXT tab and W&B's transcript table
(`seed_jax.metrics.MetricsWriter.write_transcripts`). Standard library only."""

from __future__ import annotations

import math
import re


def fmt(v: float | int | None) -> str:
    """Table cell: ``—`` for missing, ``nan`` for non-finite, else ``format(v, '.4g')``."""
    if v is None:
        return "—"
    if isinstance(v, float) and not math.isfinite(v):
        return "nan"
    return format(v, ".4g")


def _clip(text: str, limit: int) -> str:
    text = str(text)
    return text if len(text) <= limit else text[:limit] + f" … ({len(text) - limit} more characters)"


def _fence(text: str, limit: int) -> list[str]:
    """A fenced text block, its fence one backtick longer than any backtick run inside."""
    body = _clip(text, limit)
    run = max((len(m) for m in re.findall(r"`+", body)), default=0)
    fence = "`" * max(3, run + 1)
    return [fence + "text", body, fence]


def _gate_text(g: dict | None) -> str:
    if not g or g.get("mean") is None:
        return ""
    return f"gate {fmt(g['mean'])} over {g.get('n_tokens', '?')} tokens"


def render_transcript(rec: dict, title: str, limit: int = 1500) -> list[str]:
    """Markdown lines of one transcript record (`seed_jax.metrics.transcript_json`): the task, the
    outcome, the skill and its gate, then per step what the environment showed, the policy's
    response and the step's reward; the first step's full prompt folded. Texts longer than
    ``limit`` characters are cut, saying how much was left out."""
    outcome = "success" if rec.get("won") else "failure"
    lines = [f"### {title}: {outcome}, reward {fmt(rec.get('reward'))}", "",
             f"task `{rec.get('task_id')}`, trajectory `{rec.get('traj_id')}`", ""]
    lines += ["**Task**", ""] + _fence(rec.get("task", ""), limit) + [""]
    if rec.get("skill"):
        gate = _gate_text(rec.get("gate"))
        lines += [f"**Skill**{f' ({gate})' if gate else ''}", ""] + _fence(rec["skill"], limit) + [""]
    for i, st in enumerate(rec.get("steps", [])):
        bits = [f"reward {fmt(st.get('reward'))}"]
        if st.get("penalty"):
            bits.append(f"penalty {fmt(st['penalty'])}")
        bits.append("valid" if st.get("valid") else "invalid action")
        if gate := _gate_text(st.get("gate")):
            bits.append(gate)
        lines += [f"**Step {i + 1}** ({', '.join(bits)})", ""]
        if i == 0 and st.get("prompt"):
            lines += ["<details><summary>prompt</summary>", ""] + _fence(st["prompt"], 4 * limit) + ["", "</details>",
                                                                                                      ""]
        lines += ["Observation:", ""] + _fence(st.get("observation", ""), limit) + [""]
        lines += ["Response:", ""] + _fence(st.get("response", ""), limit) + [""]
    if rec.get("final_observation"):
        lines += ["**Final observation**", ""] + _fence(rec["final_observation"], limit) + [""]
    return lines
