"""The end-of-run summary: what each stage did, in plain words, with its key figures and files.

`describe_run` turns the stage summaries `seed_jax.launch.run_pipeline` collects (each stage's
marker: the dict its stage function returned plus ``wall_s`` and ``peak_rss_mb``) into the text
printed at the end of a run and written to ``<workdir>/summary.md``.
"""

from __future__ import annotations

from collections.abc import Mapping

from seed_jax.paths import run_path
from seed_jax.pipeline.environments import describe_data
from seed_jax.pipeline.run import read_config_history
from seed_jax.procmem import peak_rss_mb

# what each stage does, and where its files are (relative to the run directory)
STAGE_FILES = {"collect": "stage1/trajectories.jsonl", "annotate": "stage1/sft.jsonl, stage1/sft_heldout.jsonl",
               "sft": "sft/model/", "rl": "rl/final_model/, rl/ckpt/, metrics.jsonl, skills.jsonl",
               "eval": "eval/results.md, eval/*.trajectories.jsonl"}


def _pct(x) -> str:
    return f"{100 * float(x):.0f}%"


def _f(x, fmt: str = "{:.2f}") -> str:
    return "-" if x is None else fmt.format(float(x))


def _cut(rate) -> str:
    """The share of prompts the token cap cut (left truncation), when any were."""
    return f", {_pct(rate)} of prompts cut to rollout.max_prompt_tokens" if rate else ""


def stage_sentence(stage: str, s: Mapping, config) -> str:
    """One plain sentence of what ``stage`` did, from its summary ``s``."""
    if "skipped" in s:
        return f"skipped ({s['skipped']})"
    c = config
    if stage == "collect":
        return (f"ran the base policy on {c.stage1.num_tasks} training tasks x {c.stage1.group_size} rollouts "
                f"({_f(s.get('trajectories'), '{:.0f}')} trajectories): success {_f(s.get('success_rate'))}, "
                f"valid actions {_pct(1 - s.get('invalid_rate', 0.0))}{_cut(s.get('prompt_cut_rate'))}")
    if stage == "annotate":
        return (f"the {c.stage1.analyzer} analyzer wrote a skill for {_pct(s.get('parse_rate', 0.0))} of the "
                f"trajectories: {s.get('records', 0)} skill records ({s.get('train', 0)} to train on, "
                f"{s.get('heldout', 0)} held out)")
    if stage == "sft":
        demos = s.get("format_demonstrations", 0)
        what = f"{s.get('records', 0)} skill records" + (f" and {demos} scripted acting turns (format warm-up)"
                                                          if demos else "")
        nll = ""
        if s.get("heldout_nll_before") is not None and s.get("heldout_nll_after") is not None:
            nll = f"; held-out skill NLL {s['heldout_nll_before']:.2f} -> {s['heldout_nll_after']:.2f} nats/token"
        return f"fine-tuned the policy in {s.get('steps', '?')} steps on {what}{nll}"
    if stage == "rl":
        first = (f"first update success {_f(s.get('first/rollout/success_rate'))}, valid actions "
                 f"{_pct(1 - s.get('first/rollout/invalid_rate', 0.0))}; ") if "first/rollout/success_rate" in s else ""
        gate = f", OPD gate mean {s['train/gate_mean']:.2f}" if "train/gate_mean" in s else ""
        return (f"{s.get('num_updates', c.rl.num_updates)} {c.method} updates of {c.rl.tasks_per_update} tasks x "
                f"{c.rollout.group_size} rollouts: {first}last update success {_f(s.get('rollout/success_rate'))}, "
                f"valid actions {_pct(1 - s.get('rollout/invalid_rate', 0.0))}"
                f"{_cut(s.get('rollout/prompt_cut_rate'))}{gate}")
    if stage == "eval":
        parts = []
        for split, o in s.items():
            if isinstance(o, Mapping) and "success_rate" in o:
                valid = f", valid actions {_pct(1 - o['invalid_rate'])}" if "invalid_rate" in o else ""
                valid += _cut(o.get("prompt_cut_rate"))
                parts.append(f"{split}: success {o['success_rate']:.2f} over {o.get('n', '?')} tasks{valid}")
        paper = paper_sentence(c.env.name, s.get("paper") or {})
        what = "the base model (nothing trained)" if c.method == "vanilla" else "the final policy"
        return f"evaluated {what} without skills (T={c.eval.temperature}): " + "; ".join(parts) + paper
    return ", ".join(f"{k} {v}" for k, v in s.items())


def paper_sentence(env: str, agg: Mapping) -> str:
    """The paper's aggregates (`seed_jax.pipeline.aggregates`) in words, '' without any."""
    if env == "alfworld":
        parts = [f"{split} {100 * agg[f'{split}/success_macro_types']:.1f} (per game "
                 f"{100 * agg[f'{split}/success_per_game']:.1f})" for split in sorted({k.split('/')[0] for k in agg})
                 if f"{split}/success_macro_types" in agg and f"{split}/success_per_game" in agg]
        return f"; the paper's figure, success macro-averaged over task types: {', '.join(parts)}" if parts else ""
    if env == "search" and "qa_mean" in agg:
        return f"; the paper's figure, the equal-weight mean over {int(agg['qa_sets'])} QA sets: {100 * agg['qa_mean']:.1f}"
    if env == "webshop" and "score" in agg:
        return (f"; the paper's figures over {int(agg.get('goals', 0))} test goals: score {100 * agg['score']:.1f}, "
                f"success {100 * agg.get('success', 0.0):.1f}")
    return ""


def real_run_hint(config) -> str:
    """What to change for a run at the paper's scale."""
    env = config.env.name
    hint = (f"For a real run: seed-jax train --config={env}:paper --config.model.path=<local HF model dir, e.g. "
            "Qwen2.5-3B-Instruct> on an accelerator (docs/METHOD.md §6 has the recipe)")
    if env == "search":
        hint += ("; a retriever (seed-jax serve-retriever --corpus wiki.jsonl --port 8000) and Search-R1's data "
                 "(--config.env.data_dir=DIR)")
    return hint + "."


def describe_run(config, stages: Mapping[str, Mapping], workdir, preset: str | None = None) -> str:
    """The end-of-run summary (module docstring) as markdown-friendly plain text."""
    workdir = run_path(workdir)
    name = f"configs/{config.env.name}.py" + (f":{preset}" if preset else "")
    lines = [f"Run summary: {name}, method {config.method}, run directory {workdir}", ""]
    data = describe_data(config.env)
    if data:  # the WebShop generated catalog is named as such
        lines[1:1] = [f"Data: {data}"]
    total = 0.0
    for stage, s in stages.items():
        if not s:
            continue
        wall = float(s.get("wall_s", 0.0))
        total += wall
        lines.append(f"- {stage} ({wall:.0f} s): {stage_sentence(stage, s, config)}. "
                     f"Files: {STAGE_FILES.get(stage, '-')}")
    peaks = [float(s["peak_rss_mb"]) for s in stages.values() if s and "peak_rss_mb" in s]
    lines.append("")
    lines.append(f"Wall time of the stages run or reused: {total / 60:.1f} min; peak resident memory "
                 f"{(max(peaks) if peaks else peak_rss_mb()) / 1024:.2f} GB.")
    for rec in read_config_history(workdir):
        lines.append(f"{rec.get('event', 'config changed')} (the replaced config: config.history.jsonl).")
    lines.append(f"Curves and a report: seed-jax report {workdir}")
    lines.append(real_run_hint(config))
    return "\n".join(lines)
