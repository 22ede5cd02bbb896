"""What a run shows a user: the search format warm-up's demonstrations, the per-update RL log
line, and the end-of-run summary."""

from __future__ import annotations

import re

import pytest

from seed_jax.envs.actions import parse_action
from seed_jax.envs.search import BM25Retriever, SearchEnv, default_corpus_path, load_default_tasks
from seed_jax.envs.search.demos import demonstration


@pytest.fixture(scope="module")
def search_env(tmp_path_factory):
    return SearchEnv(BM25Retriever(default_corpus_path(), cache_dir=str(tmp_path_factory.mktemp("bm25"))))


def test_search_demonstration_is_what_the_env_accepts_and_rewards(search_env):
    """Each scripted turn parses as a valid action of the env's own parser, the second turn's
    prompt is the env's prompt after the search (the retrieved passages in it), and replaying
    the two responses on a fresh episode wins (exact match with the golden answer)."""
    task = next(t for t in load_default_tasks() if demonstration(search_env, t))  # one the passages answer
    (p1, r1), (p2, r2) = demonstration(search_env, task)
    a1, a2 = parse_action(r1, ("search", "answer")), parse_action(r2, ("search", "answer"))
    assert (a1.valid, a1.kind, a1.text) == (True, "search", " ".join(task["question"].split()))
    assert (a2.valid, a2.kind, a2.text) == (True, "answer", task["golden_answers"][0])
    assert task["question"].split()[0] in p1 and "<information>" not in p1
    assert "<information>" in p2 and "Doc 1(Title:" in p2 and "Step 1: <search>" in p2
    search_env.reset(task)
    assert search_env.build_prompt() == p1
    _, r, done, info = search_env.step(r1)
    assert (r, done, info["valid"]) == (0.0, False, True) and search_env.build_prompt() == p2
    _, r, done, info = search_env.step(r2)
    assert (r, done, info["won"]) == (1.0, True, True)


def test_demonstrations_only_answer_from_the_passages(search_env):
    """A task is demonstrated only when its golden answer is in the retrieved passages (checked
    here by plain lower-case search in the prompt, independently of the SQuAD normalisation),
    and then the answer turn gives that answer; the split holds both kinds."""
    shown = hidden = 0
    for task in load_default_tasks()[:30]:
        turns = demonstration(search_env, task)
        search_env.reset(task)
        search_env.step(f"<search> {' '.join(task['question'].split())} </search>")
        info = search_env.build_prompt().split("<information>", 1)[1].split("</information>")[0].lower()
        present = [g for g in task["golden_answers"] if g.lower() in info]
        if turns:
            shown += 1
            assert parse_action(turns[1][1], ("search", "answer")).text.lower() in info
        else:
            hidden += 1
            assert not any(f" {g.lower()} " in f" {info} " for g in present if g.isalnum())
    assert shown >= 8 and hidden >= 8


def test_grounded_answer_normalises_and_needs_whole_words():
    from seed_jax.envs.search.demos import grounded_answer

    assert grounded_answer('Doc 1(Title: "X") It was the Pizza Hut, founded 1958.', ["pizza hut"]) == "pizza hut"
    assert grounded_answer("Doc 1 Botswana.", ["Angola", "Botswana"]) == "Botswana"
    assert grounded_answer("born in 19650 somewhere", ["1965"]) is None  # not a whole word
    assert grounded_answer("nothing here", ["yes"]) is None


def test_format_demonstrations_follow_the_config(tmp_path):
    from seed_jax.configs.search import get_config
    from seed_jax.pipeline.run import Run
    from seed_jax.pipeline.stage1 import format_demonstrations

    c = get_config("tiny")
    c.stage1.format_warmup_tasks = 3
    demos = format_demonstrations(Run(c, tmp_path))
    assert len(demos) == 6
    assert [parse_action(d.answer, ("search", "answer")).kind for d in demos] == ["search", "answer"] * 3
    # every answer is read off the passages of its own prompt
    assert all(parse_action(a.answer, ("answer",)).text.lower()
               in a.prompt.split("<information>", 1)[1].split("</information>")[0].lower() for a in demos[1::2])
    c.stage1.format_warmup_tasks = 200  # more than the split has demonstrations for: all of them, once
    many = format_demonstrations(Run(c, tmp_path))
    assert 16 <= len(many) // 2 < 80 and len({d.prompt for d in many}) == len(many)
    c.stage1.format_warmup_tasks = 0
    assert format_demonstrations(Run(c, tmp_path)) == []


def test_local_search_prompts_keep_the_question(smol_tokenizer, search_env):
    """The default run's prompt cap holds the answer turn's whole prompt (question + the three
    passages of a search for it) for every vendored question, so left truncation never cuts the
    question away; the old 512 cap did for most of them."""
    from seed_jax.configs.search import get_config
    from seed_jax.rollout.loop import make_prompt_encoder

    cap = get_config("local").rollout.max_prompt_tokens
    env = search_env
    encode = make_prompt_encoder(smol_tokenizer)
    lengths, kept = [], 0
    for task in load_default_tasks():
        env.reset(task)
        env.step(f"<search> {env.task_description} </search>")
        ids = encode(env.build_prompt())
        lengths.append(len(ids))
        kept += env.task_description in smol_tokenizer.decode(ids[-cap:])
    assert kept == len(lengths) and max(lengths) <= cap
    assert sum(n > 512 for n in lengths) > len(lengths) // 2


def _record(metrics, update=3):
    from seed_jax.pipeline.rl import UpdateRecord

    return UpdateRecord(update, [], {}, {}, {}, metrics)


def test_update_log_line_reads_without_a_terminal():
    from seed_jax.pipeline.rl import update_log_line

    m = {"rollout/success_rate": 0.25, "rollout/return": 0.125, "rollout/invalid_rate": 0.3,
         "analysis/parse_rate": 1.0, "train/gate_mean": 0.45, "train/active_share": 0.6, "train/kl": 0.0012,
         "train/entropy": 1.234, "train/loss": 0.05, "time/rollout": 31.2, "time/analysis": 20.0,
         "time/batch": 9.4, "time/train": 40.0}
    line = update_log_line(_record(m), total=10, eta_s=312.0)
    assert line.startswith("RL update 3/10:") and "\n" not in line
    for part in ("success 0.25", "return 0.12", "invalid 0.30", "OPD gate 0.45 active 0.60", "KL 0.0012",
                 "entropy 1.234", "time rollout 31s analysis 20s batch 9s train 40s", "ETA 5m12s"):
        assert part in line, (part, line)
    grpo = {k: v for k, v in m.items() if not k.startswith(("train/gate", "train/active", "analysis/"))}
    line = update_log_line(_record(grpo), total=10, eta_s=None)
    assert "OPD" not in line and "skills" not in line and line.endswith("ETA -")
    assert update_log_line(_record(m), 10, 3 * 3600 + 300).endswith("ETA 3h05m")


def test_describe_run_names_each_stage_its_figures_and_files(tmp_path):
    from seed_jax.configs.search import get_config
    from seed_jax.pipeline.summary import describe_run

    c = get_config("local")
    stages = {
        "collect": {"success_rate": 0.0, "invalid_rate": 0.93, "trajectories": 16.0, "wall_s": 212.0,
                    "peak_rss_mb": 1500.0},
        "annotate": {"parse_rate": 1.0, "records": 16, "train": 14, "heldout": 2, "wall_s": 0.4, "peak_rss_mb": 1500.0},
        "sft": {"records": 14, "format_demonstrations": 48, "steps": 31, "heldout_nll_before": 2.93,
                "heldout_nll_after": 0.52, "wall_s": 600.0, "peak_rss_mb": 3100.0},
        "rl": {"first/rollout/success_rate": 0.0, "first/rollout/invalid_rate": 0.25, "rollout/success_rate": 0.125,
               "rollout/invalid_rate": 0.1, "train/gate_mean": 0.43, "num_updates": 2, "wall_s": 700.0,
               "peak_rss_mb": 3500.0},
        "eval": {"hotpotqa": {"success_rate": 0.05, "n": 20, "invalid_rate": 0.2}, "wall_s": 150.0,
                 "peak_rss_mb": 3500.0},
    }
    text = describe_run(c, stages, tmp_path / "w", "local")
    assert "configs/search.py:local" in text and "method seed" in text
    for stage in stages:
        assert re.search(rf"^- {stage} \(\d+ s\): ", text, re.M), stage
    for figure in ("valid actions 7%", "14 to train on, 2 held out", "48 scripted acting turns",
                   "2.93 -> 0.52", "first update success 0.00, valid actions 75%", "last update success 0.12",
                   "OPD gate mean 0.43", "hotpotqa: success 0.05 over 20 tasks, valid actions 80%",
                   "sft/model/", "eval/results.md", "peak resident memory 3.42 GB",
                   f"seed-jax report {tmp_path / 'w'}", "seed-jax train --config=search:paper", "model.path"):
        assert figure in text, (figure, text)
    assert f"{(212 + 0.4 + 600 + 700 + 150) / 60:.1f} min" in text
