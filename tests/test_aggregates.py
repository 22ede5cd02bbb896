"""The paper's headline aggregates (issue 33 item 7) on hand-computed numbers, in the evaluation's
results.md, the report and the run summary; the ``vanilla`` method (the base model evaluated,
nothing trained)."""

from __future__ import annotations

import json

import pytest

from seed_jax.pipeline.aggregates import format_aggregates, paper_aggregates

# ALFWorld valid_seen, six task types: games won / played per type
ALFWORLD_TYPES = {"pick_and_place_simple": (3, 4), "pick_clean_then_place_in_recep": (1, 2),
                  "pick_heat_then_place_in_recep": (0, 1), "pick_cool_then_place_in_recep": (1, 1),
                  "look_at_obj_in_light": (2, 4), "pick_two_obj_and_place": (1, 3)}
# by hand: per game (3+1+0+1+2+1) / (4+2+1+1+4+3) = 8/15; macro (0.75+0.5+0+1+0.5+1/3) / 6 = 37/72
PER_GAME, MACRO = 8 / 15, 37 / 72


def _alfworld_results():
    per_type = {t: {"success_rate": w / n, "n": n} for t, (w, n) in ALFWORLD_TYPES.items()}
    unseen = {"pick_and_place_simple": {"success_rate": 1.0, "n": 1}, "look_at_obj_in_light": {"success_rate": 0.0, "n": 3}}
    return {"valid_seen": {"overall": {"success_rate": PER_GAME, "n": 15}, "per_type": per_type},
            "valid_unseen": {"overall": {"success_rate": 0.25, "n": 4}, "per_type": unseen}}


def test_alfworld_macro_over_task_types_and_per_game_per_split():
    agg = paper_aggregates("alfworld", _alfworld_results())
    assert agg["valid_seen/success_per_game"] == pytest.approx(PER_GAME)
    assert agg["valid_seen/success_macro_types"] == pytest.approx(MACRO)  # 51.4, not the per-game 53.3
    assert agg["valid_seen/task_types"] == 6
    assert agg["valid_unseen/success_macro_types"] == pytest.approx(0.5)  # (1 + 0) / 2; per game 1/4
    assert agg["valid_unseen/success_per_game"] == pytest.approx(0.25)
    md = "\n".join(format_aggregates("alfworld", agg))
    assert "| valid_seen | 51.4 | 53.3 | 6 |" in md and "| valid_unseen | 50.0 | 25.0 | 2 |" in md


def test_search_equal_weight_mean_over_the_qa_sets():
    res = {"nq": {"overall": {"success_rate": 0.5, "n": 100}}, "bamboogle": {"overall": {"success_rate": 0.25, "n": 4}},
           "hotpotqa": {"overall": {"success_rate": 0.3, "n": 1000}}}
    agg = paper_aggregates("search", res)
    assert agg["qa_mean"] == pytest.approx((0.5 + 0.25 + 0.3) / 3)  # 35.0; pooled over questions it is 32.2
    assert agg["qa_sets"] == 3 and agg["qa/bamboogle"] == 0.25 and agg["qa/nq"] == 0.5
    md = format_aggregates("search", agg)
    assert md[0] == "| QA mean (equal weight, paper) | bamboogle | hotpotqa | nq |" and md[2] == "| 35.0 | 25.0 | 30.0 | 50.0 |"


def test_webshop_score_and_success_over_the_test_goals():
    agg = paper_aggregates("webshop", {"test": {"overall": {"success_rate": 0.25, "score": 0.615, "n": 128}}})
    assert agg == {"score": 0.615, "success": 0.25, "goals": 128.0}
    assert format_aggregates("webshop", agg)[2] == "| 61.5 | 25.0 | 128 |"
    assert paper_aggregates("household", {"test": {"overall": {"success_rate": 1.0}}}) == {}


def test_report_and_summary_give_the_aggregates(tmp_path):
    from seed_jax.pipeline.summary import paper_sentence
    from seed_jax.report import make_report

    (tmp_path / "config.json").write_text(json.dumps({"env": {"name": "alfworld"}, "method": "vanilla"}))
    (tmp_path / "eval").mkdir()
    for split, res in _alfworld_results().items():
        (tmp_path / "eval" / f"final_{split}.json").write_text(
            json.dumps({"stage_or_step": "final", "split": split, "results": res}))
    md = make_report(tmp_path).summary.read_text()
    assert "### The paper's aggregates: final" in md and "| valid_seen | 51.4 | 53.3 | 6 |" in md
    line = paper_sentence("alfworld", paper_aggregates("alfworld", _alfworld_results()))
    assert "macro-averaged over task types: valid_seen 51.4 (per game 53.3), valid_unseen 50.0 (per game 25.0)" in line


def test_vanilla_evaluates_the_base_model_and_needs_no_annotator(monkeypatch):
    import importlib

    from seed_jax.pipeline.methods import METHODS, needs_skill_bank, switches
    from seed_jax.pipeline.validate import check_annotator, check_annotator_keys

    assert "vanilla" in METHODS
    c = importlib.import_module("seed_jax.configs.alfworld").get_config("paper")
    c.method = "vanilla"
    s = switches(c)
    assert not (s.sft or s.opd or s.prompt_skills or s.train) and s.skill_source == "none"
    assert not needs_skill_bank(c)  # no stage 1: collect, annotate and sft are skipped
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    check_annotator_keys(c)  # the paper preset's annotator is not needed without stage 1
    check_annotator(c)  # and no request is made


def test_results_md_gives_the_aggregates_beside_each_split(tmp_path):
    from types import SimpleNamespace

    from seed_jax.pipeline.evaluate import write_results_md

    (tmp_path / "eval").mkdir()
    for split, res in _alfworld_results().items():
        res = {"overall": {**res["overall"], "return": 0.0}, "per_type": res["per_type"]}
        (tmp_path / "eval" / f"final_{split}.json").write_text(
            json.dumps({"stage_or_step": "final", "split": split, "results": res}))
    run = SimpleNamespace(workdir=tmp_path, config=SimpleNamespace(env=SimpleNamespace(name="alfworld")),
                          path=lambda *parts: tmp_path.joinpath(*parts))
    write_results_md(run)
    md = (tmp_path / "eval" / "results.md").read_text()
    assert "| final | valid_seen | 0.533 |" in md  # per game, as before
    assert "The paper's aggregates, model final" in md and "| valid_seen | 51.4 | 53.3 | 6 |" in md
