"""The format warm-up's scripted demonstrations of ALFWorld and WebShop (docs/METHOD.md §2.4),
held against the games' own files and the envs' own verdicts.

References: ALFWorld's expert walkthrough read straight from the game file's JSON (not through
the project's loader), the env's admissible list and ``won``; WebShop's goal fields (asin,
options) and the env's purchase verdict (``purchased_asin``, ``score``).
"""

from __future__ import annotations

import json

import pytest

from seed_jax.envs.actions import parse_action
from seed_jax.envs.alfworld.games import vendored_data_dir

ALFWORLD_DATA = vendored_data_dir()
needs_alfworld = pytest.mark.skipif(not (ALFWORLD_DATA / "json_2.1.1").is_dir(),
                                    reason=f"ALFWorld data not found at {ALFWORLD_DATA}")


@needs_alfworld
def test_alfworld_demonstration_plays_the_games_walkthrough_to_a_win():
    from seed_jax.envs.alfworld import list_games, make_alfworld_env
    from seed_jax.envs.alfworld.demos import demonstration

    env = make_alfworld_env(data_dir=ALFWORLD_DATA)
    try:
        for task in list_games(ALFWORLD_DATA, "train")[::6]:  # 3 games of different task types
            with open(task["game_file"], encoding="utf-8") as f:
                walkthrough = json.load(f)["walkthrough"]
            turns = demonstration(env, task)
            assert [parse_action(r, ("action",)).text for _, r in turns] == walkthrough
            for prompt, response in turns:
                # the command is one the prompt lists as admissible, the task line is there
                assert f"'{parse_action(response, ('action',)).text}'" in prompt
                assert f"Your task is to: {env.task_description}" in prompt
            # the demonstrated episode is won: replayed on a fresh env, the last turn wins
            env.reset(task)
            for _, response in turns:
                _, _, done, info = env.step(response)
            assert done and info["won"]
    finally:
        env.close()


@needs_alfworld
def test_alfworld_demonstration_skips_a_walkthrough_longer_than_the_step_limit():
    from seed_jax.envs.alfworld import list_games, make_alfworld_env
    from seed_jax.envs.alfworld.demos import demonstration

    task = list_games(ALFWORLD_DATA, "train")[0]
    with open(task["game_file"], encoding="utf-8") as f:
        n = len(json.load(f)["walkthrough"])
    short = make_alfworld_env(data_dir=ALFWORLD_DATA, max_steps=n - 1)
    exact = make_alfworld_env(data_dir=ALFWORLD_DATA, max_steps=n)
    try:
        assert demonstration(short, task) == []
        assert len(demonstration(exact, task)) == n
    finally:
        short.close()
        exact.close()


def test_webshop_demonstration_buys_the_goals_product_with_its_options():
    from seed_jax.envs.webshop import load_goals, make_webshop_env
    from seed_jax.envs.webshop.demos import demonstration

    env = make_webshop_env()
    shown = 0
    for task in load_goals(split="train", limit=20):
        turns = demonstration(env, task)
        if not turns:
            continue
        shown += 1
        goal = env.goal
        options = list(goal.goal_options.values()) if isinstance(goal.goal_options, dict) else list(goal.goal_options)
        actions = [parse_action(r, ("action",)).text for _, r in turns]
        assert actions[0].startswith("search[") and "price" not in actions[0]
        assert actions[1:] == [f"click[{goal.asin.lower()}]", *[f"click[{o.lower()}]" for o in options],
                               "click[buy now]"]
        for prompt, _ in turns:
            assert f"Your task is to: {goal.instruction_text}." in prompt
        env.reset(task)
        for _, response in turns:
            _, reward, done, info = env.step(response)
        assert done and info["won"] and info["score"] == 1.0 and reward == 10.0
        assert info["purchased_asin"] == goal.asin
    assert shown >= 15  # the generated catalog lists nearly every goal's product first


def test_webshop_query_drops_only_the_price_clause():
    from seed_jax.envs.webshop.demos import goal_query

    assert goal_query("Find me slim fit jeans with color: blue, and price lower than 40.00 dollars") \
        == "find me slim fit jeans with color: blue"
    assert goal_query("i want a red mug") == "i want a red mug"


@needs_alfworld
@pytest.mark.parametrize("name", ["alfworld", "webshop"])
def test_local_warmup_prompts_fit_the_cap_as_the_rollout_fits_them(name, tmp_path, smol_tokenizer):
    """`format_demonstrations` with the policy's encoder: each turn's prompt is the one the
    rollout would show (`fit_prompt` over the env's variants at ``rollout.max_prompt_tokens``), so
    ALFWorld's all fit the local cap; at a tighter cap, past steps are dropped, the task kept."""
    import importlib

    from seed_jax.pipeline.run import Run
    from seed_jax.pipeline.stage1 import format_demonstrations
    from seed_jax.rollout.loop import make_prompt_encoder

    c = importlib.import_module(f"seed_jax.configs.{name}").get_config("local")
    c.unlock()
    c.stage1.format_warmup_tasks = 3
    encode = make_prompt_encoder(smol_tokenizer)
    full = format_demonstrations(Run(c, tmp_path))  # uncapped: the env's whole prompt
    full_len = [len(encode(d.prompt)) for d in full]
    demos = format_demonstrations(Run(c, tmp_path), encode)
    assert sum(d.turn == 0 for d in demos) == 3
    assert [d.answer for d in demos] == [d.answer for d in full]
    fits = [len(encode(d.prompt)) <= c.rollout.max_prompt_tokens for d in demos]
    assert all(fits) if name == "alfworld" else sum(fits) >= len(fits) - 2
    # a cap below the longest uncapped prompt: the turns over it show fewer past steps (shorter,
    # the task line kept), the ones within it are unchanged
    cap = sorted(full_len)[len(full_len) // 2]
    c.rollout.max_prompt_tokens = cap
    tight = format_demonstrations(Run(c, tmp_path), encode)
    assert [d.answer for d in tight] == [d.answer for d in full]
    for d, n_full, t in zip(full, full_len, tight):
        if n_full <= cap:
            assert t.prompt == d.prompt
        else:
            assert len(encode(t.prompt)) < n_full and "Your task is to: " in t.prompt
    assert sum(n > cap for n in full_len) > 0
    assert sum(len(encode(t.prompt)) <= cap for t in tight) > sum(n <= cap for n in full_len)
