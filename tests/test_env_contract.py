"""The `info` contract of `envs.base` held against every environment, and what the rollout
loop records from it.

Every environment's ``reset`` and ``step`` info must carry the keys of `envs.base.INFO_KEYS`
(plus the optional keys the environment has: ``task_type``, ``score``, ``data_source``), and
``action_text`` must be the action the response carried: written out here by hand for each
environment (its normalisation: lower-cased, whitespace collapsed...), '' for an invalid
response and at reset. The rollout-level check drives `run_rollouts` with scripted responses
(no model) and reads `StepSample.action`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest

from seed_jax.envs.actions import THINK_TAGS
from seed_jax.envs.alfworld.games import vendored_data_dir
from seed_jax.envs.base import INFO_KEYS, OPTIONAL_INFO_KEYS, missing_info_keys
from seed_jax.rollout import loop
from seed_jax.rollout.loop import RolloutSettings, make_prompt_encoder, run_rollouts
from seed_jax.rollout.pool import EnvFactory, open_env_pool
from seed_jax.sampling import GenerationResult, SamplingParams

ALFWORLD_DATA = vendored_data_dir()  # the subset vendored in envs/alfworld/data
needs_alfworld = pytest.mark.skipif(not (ALFWORLD_DATA / "json_2.1.1").is_dir(),
                                    reason=f"ALFWorld data not found at {ALFWORLD_DATA}")

# a hand-made household heat task (the apple is in the closed fridge)
HOUSEHOLD_TASK = {
    "task_id": "hand-heat", "split": "seen", "task_type": "heat", "object": "apple", "target": "countertop",
    "task_description": "put a hot apple in countertop.", "target_object": "apple 1",
    "receptacles": ["cabinet 1", "countertop 1", "fridge 1", "microwave 1", "sinkbasin 1"],
    "objects": {"apple 1": "fridge 1", "mug 1": "countertop 1"}, "opened": [],
}


@dataclasses.dataclass
class Case:
    """One environment: how to build it and a task, a valid response and the action it
    carries (as the env must report it), an invalid response, the optional keys it has."""

    make_env: Callable
    task: Callable[[], dict]
    valid_response: str
    action_text: str
    invalid_response: str
    optional_keys: tuple[str, ...]


def _search_case() -> Case:
    from seed_jax.envs.search import load_default_tasks, make_search_env

    return Case(make_search_env, lambda: load_default_tasks(limit=1)[0],
                "<think>look it up</think>\n<search>  Lilu (mythology) </search>", "Lilu (mythology)",
                "<think>maybe <search>x</search></think> I do not know", ("data_source",))


def _alfworld_case() -> Case:
    from seed_jax.envs.alfworld import list_games, make_alfworld_env

    return Case(lambda: make_alfworld_env(data_dir=ALFWORLD_DATA), lambda: list_games(ALFWORLD_DATA, "valid_seen")[0],
                "<think>first look around</think><action> Look </action>", "look",
                "<think>x</think><action>look</action><action>inventory</action>", ("task_type",))


def _webshop_case() -> Case:
    from seed_jax.envs.webshop import load_goals, make_webshop_env

    return Case(make_webshop_env, lambda: load_goals(split="test", limit=1)[0],
                "<think>search first</think><action>search[Red Running Shoes]</action>", "search[red running shoes]",
                "<think>x</think><action>click[no such item]</action>", ("score",))


def _household_case() -> Case:
    from seed_jax.envs.household import make_household_env

    return Case(make_household_env, lambda: dict(HOUSEHOLD_TASK),
                "<think>the apple is in the fridge</think><action>  Go To   Fridge 1 </action>", "go to fridge 1",
                "<think>go</think> go to fridge 1", ("task_type", "data_source"))


CASES = {"search": _search_case, "alfworld": _alfworld_case, "webshop": _webshop_case,
         "household": _household_case}
PARAMS = [pytest.param(name, marks=needs_alfworld) if name == "alfworld" else name for name in CASES]


def _check_keys(info: dict, case: Case, where: str) -> None:
    assert missing_info_keys(info, case.optional_keys) == [], where
    for key in (*INFO_KEYS, *case.optional_keys):
        assert key in info, f"{where}: no {key!r}"
    assert isinstance(info["valid"], bool) and isinstance(info["won"], bool), where
    assert isinstance(info["raw_observation"], str) and info["raw_observation"], where
    assert isinstance(info["action_text"], str) and isinstance(info["reason"], str), where
    assert isinstance(info["task_id"], str) and info["task_id"], where
    assert isinstance(info["step"], int), where
    if "task_type" in case.optional_keys:
        assert isinstance(info["task_type"], str) and info["task_type"], where
    if "score" in case.optional_keys:
        assert isinstance(info["score"], float), where


def test_every_benchmark_environment_is_held_to_the_contract():
    from seed_jax.pipeline.environments import BENCHMARKS

    assert set(CASES) == set(BENCHMARKS)


def test_the_contract_names_each_key_once():
    assert not set(INFO_KEYS) & set(OPTIONAL_INFO_KEYS)
    assert {"valid", "won", "raw_observation", "action_text", "reason", "task_id", "step"} == set(INFO_KEYS)
    assert {"task_type", "score", "data_source"} == set(OPTIONAL_INFO_KEYS)
    assert set(missing_info_keys({"valid": True, "score": 0.5})) == set(INFO_KEYS) - {"valid"}
    assert set(missing_info_keys({"valid": True}, ("score",))) == set(INFO_KEYS) - {"valid"} | {"score"}


@pytest.mark.parametrize("name", PARAMS)
def test_every_env_reports_the_contract_keys_and_the_action_it_took(name):
    case = CASES[name]()
    env = case.make_env()
    try:
        task = case.task()
        _, info = env.reset(task)
        _check_keys(info, case, f"{name} reset")
        assert info["valid"] and info["action_text"] == "" and info["reason"] == "" and info["step"] == 0
        assert info["task_id"] == str(task["task_id"])

        _, _, done, info = env.step(case.valid_response)
        _check_keys(info, case, f"{name} valid step")
        assert info["valid"] and info["reason"] == ""
        assert info["action_text"] == case.action_text
        assert info["step"] == 1 and not done

        _, reward, _, info = env.step(case.invalid_response)
        _check_keys(info, case, f"{name} invalid step")
        assert not info["valid"] and info["reason"]
        assert info["action_text"] == ""
        assert info["step"] == 2
        assert reward == pytest.approx(-env.spec.invalid_penalty)
    finally:
        env.close()


@pytest.mark.parametrize("name", PARAMS)
def test_every_env_gives_shorter_prompts_that_keep_the_task_and_the_current_observation(name):
    """After two steps, `prompt_variants` are the prompt with fewer past steps, longest first:
    each strictly shorter than the one before (the full prompt first), each still holding the
    task sentence and the current observation as the env shows it (written out per env: ALFWorld
    and household drop the observation's task line, WebShop shows the page after its instruction
    field); every env but search goes down to no past step (search keeps its last step: its
    <information> is the observation)."""
    from seed_jax.envs.prompt import without_task_line
    from seed_jax.envs.webshop.env import format_observation

    case = CASES[name]()
    env = case.make_env()
    try:
        env.reset(case.task())
        env.step(case.valid_response)
        _, _, _, info = env.step(case.invalid_response)
        raw = info["raw_observation"]
        current = format_observation(raw, env.task_description) if name == "webshop" else without_task_line(raw)
        prompts = [env.build_prompt(), *env.prompt_variants()]
        assert len(prompts) == (2 if name == "search" else 3)  # 2 steps shown (search: its window holds both)
        assert all(len(a) > len(b) for a, b in zip(prompts, prompts[1:]))
        for p in prompts:
            assert env.task_description in p and current in p
    finally:
        env.close()


# ------------------------------------------------------------------ what the rollout records


def _scripted_generate(responses: list[str]):
    """A stand-in for `seed_jax.sampling.generate`: turn t answers every prompt with responses[t]."""
    calls = []

    def generate(model, tokenizer, prompts, **kwargs):
        text = responses[len(calls)]
        calls.append(kwargs)
        # stop strings count outside thinking only, by the action parser's rule
        assert kwargs["think_tags"] == THINK_TAGS and kwargs["stop_strings"] == ("</action>",)
        return GenerationResult([[7, 8]] * len(prompts), [text] * len(prompts), [[-1.0, -1.0]] * len(prompts),
                                ["stop"] * len(prompts))

    return generate


@pytest.mark.parametrize("name", [pytest.param("alfworld", marks=needs_alfworld), "webshop"])
def test_step_samples_record_the_action_of_valid_steps(name, monkeypatch, smol_tokenizer):
    case = CASES[name]()
    factory = EnvFactory(lambda seed: case.make_env())
    monkeypatch.setattr(loop, "generate", _scripted_generate([case.valid_response, case.invalid_response]))
    settings = RolloutSettings(group_size=2, max_steps=2, max_prompt_tokens=256,
                               sampling=SamplingParams(max_new_tokens=8))
    with open_env_pool(factory, num_workers=0, seed=0) as pool:
        trajs = run_rollouts(pool, None, smol_tokenizer, [case.task()], settings,
                             encode_prompt=make_prompt_encoder(smol_tokenizer), progress=False)
    assert len(trajs) == 2
    for t in trajs:
        assert not t.env_error and len(t.steps) == 2
        first, second = t.steps
        assert first.valid and first.action == case.action_text
        assert not second.valid and second.action == ""
