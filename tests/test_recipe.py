"""The ``paper`` presets against the paper's recipe (docs/METHOD.md §2, §3, §5, §6).

`PAPER` writes the recipe out here, value by value, from the paper's tables (the benchmark
table of the environments and the training recipe); nothing is read from the code to build
it. Each test compares one group of settings of ``configs/<env>.py:paper`` (and of what the
pipeline builds from it: the benchmark, the rollout settings, the RL `TrainConfig` and its
learning-rate schedule) with it.
"""

from __future__ import annotations

import importlib

import numpy as np
import pytest

from seed_jax.pipeline.environments import make_benchmark
from seed_jax.pipeline.runtime import rollout_settings, sft_train_config, train_config
from seed_jax.train.state import make_schedule
from tests.conftest import official_webshop_dir

ENVS = ("alfworld", "webshop", "search")

# The paper's recipe. Per benchmark: the environment table (max steps, history window, prompt /
# response caps, invalid-action penalty, evaluation) and the training table (tasks x group per
# update, PPO mini-batch, KL and entropy coefficients, schedule).
PAPER = {
    "alfworld": dict(max_steps=30, history_window=5, prompt_tokens=2048, response_tokens=512, penalty=0.1,
                     tasks_per_update=16, mini_batch=256, c_kl=0.01, c_ent=0.001, warmup_updates=0),
    "webshop": dict(max_steps=15, history_window=2, prompt_tokens=4096, response_tokens=512, penalty=0.1,
                    tasks_per_update=16, mini_batch=64, c_kl=0.01, c_ent=0.001, warmup_updates=0),
    "search": dict(max_steps=4, history_window=4, prompt_tokens=4096, response_tokens=512, penalty=0.01,
                   tasks_per_update=128, mini_batch=512, c_kl=0.001, c_ent=0.0, warmup_updates=15),
}
# Shared by the three benchmarks.
UPDATES = 150
GROUP_SIZE = 8
EPOCHS = 1
LR, WEIGHT_DECAY, GRAD_CLIP = 1e-6, 0.01, 1.0
KL_ESTIMATOR = "low_var_kl"  # k3 = exp(l_ref - l) - (l_ref - l) - 1
LAMBDA_OPD, BETA_OPD = 0.01, 5.0
OPD_MASK = "action"  # OPD distils the valid action tokens (not the thinking, not invalid responses)
CLIP, DUAL_CLIP = 0.2, 3.0
ROLLOUT_TEMPERATURE, EVAL_TEMPERATURE = 1.0, 0.4
ANALYZER_NEW_TOKENS = 4096
STAGE1 = dict(num_tasks=180, group_size=8, temperature=0.4, sft_epochs=3, sft_lr=5e-6, sft_batch_size=8,
              heldout_fraction=0.1, max_repairs=2)
# Evaluation: ALFWorld's two validation splits (140 seen and 134 unseen games, all of them),
# 128 WebShop test goals, the seven QA test sets of Search-R1 (each whole).
ALFWORLD_EVAL = {"valid_seen": 140, "valid_unseen": 134}
ALFWORLD_TRAIN_GAMES = 3553  # the official ALFWorld release
WEBSHOP_EVAL_GOALS = 128
SEARCH_EVAL_SETS = {"nq", "triviaqa", "popqa", "hotpotqa", "2wikimultihopqa", "musique", "bamboogle"}


def paper(env: str):
    return importlib.import_module(f"seed_jax.configs.{env}").get_config("paper")


@pytest.mark.parametrize("env", ENVS)
def test_episode_limits_history_and_caps(env):
    c, want = paper(env), PAPER[env]
    bench = make_benchmark(c.env)
    assert c.rollout.max_steps == want["max_steps"]
    assert bench.spec.max_steps == want["max_steps"]
    assert rollout_settings(c, bench).max_steps == want["max_steps"]  # what the rollouts run
    assert bench.spec.history_window == want["history_window"]
    assert bench.spec.invalid_penalty == want["penalty"]
    assert c.rollout.max_prompt_tokens == want["prompt_tokens"]
    assert c.rollout.max_response_tokens == want["response_tokens"]
    settings = rollout_settings(c, bench)
    assert settings.max_prompt_tokens == want["prompt_tokens"]
    assert settings.sampling.max_new_tokens == want["response_tokens"]


@pytest.mark.parametrize("env", ENVS)
def test_updates_groups_and_mini_batches(env):
    c, want = paper(env), PAPER[env]
    assert c.method == "seed"
    assert c.rl.num_updates == UPDATES
    assert c.rollout.group_size == GROUP_SIZE
    assert c.rl.tasks_per_update == want["tasks_per_update"]
    assert c.rl.mini_batch_size == want["mini_batch"]
    assert c.rl.epochs == EPOCHS
    assert c.rl.advantage_mode == "mean_std"  # group mean and std over the N trajectories of a task


@pytest.mark.parametrize("env", ENVS)
def test_optimizer_and_loss_coefficients(env):
    c, want = paper(env), PAPER[env]
    # the RL step's settings; the micro-batch is left to the plan of the run's slice (-1: exact
    # gradient accumulation, any size makes the same update)
    assert c.train.micro_batch_size == -1
    tc = train_config(c, micro_batch_size=c.rl.mini_batch_size)
    assert (tc.lr, tc.weight_decay, tc.grad_clip) == (LR, WEIGHT_DECAY, GRAD_CLIP)
    assert (tc.c_kl, tc.c_ent, tc.kl_kind) == (want["c_kl"], want["c_ent"], KL_ESTIMATOR)
    assert (tc.lambda_opd, tc.beta_opd) == (LAMBDA_OPD, BETA_OPD)
    assert c.opd.mask == OPD_MASK
    assert (tc.clip_low, tc.clip_high, tc.dual_clip) == (CLIP, CLIP, DUAL_CLIP)
    assert not tc.teacher_from_old  # the teacher pass runs on the trained parameters
    assert (c.train.lr, c.train.c_kl, c.train.c_ent, c.train.lambda_opd) == (LR, want["c_kl"], want["c_ent"],
                                                                           LAMBDA_OPD)


@pytest.mark.parametrize("env", ENVS)
def test_learning_rate_schedule_in_updates(env):
    """Constant at 1e-6, except search: a linear warm-up over the first 15 of the 150 updates
    (10 %), then constant. Read from the schedule the RL step uses, at update positions."""
    c, warmup = paper(env), PAPER[env]["warmup_updates"]
    assert c.train.warmup_updates == warmup
    tc = train_config(c, micro_batch_size=c.rl.mini_batch_size)  # the micro-batch: the plan's (-1)
    assert tc.schedule_unit == "update"
    lr = np.array([float(make_schedule(tc)(u)) for u in range(UPDATES)])
    np.testing.assert_allclose(lr[warmup:], LR, rtol=1e-6)
    if warmup:
        assert np.all(np.diff(lr[:warmup]) > 0), "the warm-up rises over its 15 updates"
        assert lr[0] <= 0.1 * LR and lr[warmup - 1] <= LR * (1 + 1e-6)


@pytest.mark.parametrize("env", ENVS)
def test_temperatures_and_analyzer(env):
    c = paper(env)
    assert c.rollout.temperature == ROLLOUT_TEMPERATURE
    assert c.eval.temperature == EVAL_TEMPERATURE
    assert c.analysis.analyzer == "self"  # theta_old writes the skills in RL
    # stage 1 is annotated by a strong external model (GLM-5.2, T=0) behind an OpenAI-compatible
    # endpoint, which the run is given (no default model, no default URL)
    assert c.stage1.analyzer == "openai" and c.stage1.openai_model == "" and c.stage1.openai_base_url == ""
    assert c.analysis.max_new_tokens == ANALYZER_NEW_TOKENS


@pytest.mark.parametrize("env", ENVS)
def test_stage1(env):
    c = paper(env)
    for key, value in STAGE1.items():
        assert c.stage1[key] == value, key
    sft = sft_train_config(c)
    assert sft.lr == STAGE1["sft_lr"] and sft.lambda_opd == 0 and sft.c_kl == 0 and sft.c_ent == 0


def _fake_alfworld(root, sizes: dict[str, int]):
    """An ALFWorld data directory with ``sizes[split]`` (empty) games per split."""
    for split, n in sizes.items():
        for i in range(n):
            game = root / "json_2.1.1" / split / f"pick_and_place_simple-Mug-None-Desk-{i}" / "trial_T0" / "game.tw-pddl"
            game.parent.mkdir(parents=True)
            game.write_text("")
    return root


def test_alfworld_evaluates_every_game_of_both_validation_splits(tmp_path):
    c = paper("alfworld")
    # the paper preset checks the full release's counts (3553 train games too)
    c.env.data_dir = str(_fake_alfworld(tmp_path, {"train": ALFWORLD_TRAIN_GAMES, **ALFWORLD_EVAL}))
    bench = make_benchmark(c.env)
    assert tuple(bench.eval_splits) == tuple(ALFWORLD_EVAL)
    assert c.eval.num_tasks == 0  # 0: the whole split
    for split, n in ALFWORLD_EVAL.items():
        assert len(bench.tasks(split, limit=c.eval.num_tasks or None, seed=c.seed)) == n


def test_webshop_evaluates_128_test_goals(tmp_path):
    c = paper("webshop")
    c.env.data_dir = str(official_webshop_dir(tmp_path))  # the paper preset needs the official files
    bench = make_benchmark(c.env)
    assert tuple(bench.eval_splits) == ("test",)
    assert c.eval.num_tasks == WEBSHOP_EVAL_GOALS
    assert len(bench.tasks("test", limit=c.eval.num_tasks, seed=c.seed)) == WEBSHOP_EVAL_GOALS


def test_paper_presets_require_the_real_data():
    """ALFWorld: the full release, never the vendored subset; WebShop: the official files and the
    human goals, never the generated catalog (issue 33 item 1, issue 34 item 1)."""
    alf, shop = paper("alfworld"), paper("webshop")
    assert alf.env.vendored_data is False
    assert shop.env.vendored_data is False and shop.env.human_goals is True
    for env in ("alfworld", "webshop"):
        local = importlib.import_module(f"seed_jax.configs.{env}").get_config("local")
        assert local.env.vendored_data is True


def test_search_trains_on_search_r1_data_and_evaluates_seven_qa_sets_each_whole():
    c = paper("search")
    bench = make_benchmark(c.env)
    assert set(bench.eval_splits) == SEARCH_EVAL_SETS and len(bench.eval_splits) == 7
    assert c.eval.num_tasks == 0
    assert not c.env.vendored_data  # never the vendored HotpotQA sample
