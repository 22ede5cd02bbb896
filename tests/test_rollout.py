"""Rollout loop + analyzer + batch builder end to end with a tiny random model on each env."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from seed_jax.models import Model, ModelConfig
from seed_jax.models.decoder import init_params
from seed_jax.rollout.analyzer import analyze_trajectories
from seed_jax.rollout.batch import BatchSettings, build_batch
from seed_jax.rollout.loop import RolloutSettings, make_prompt_encoder, run_rollouts
from seed_jax.rollout.pool import EnvFactory, open_env_pool
from seed_jax.sampling import SamplingParams
from seed_jax.skills import insert_skill
from tests.conftest import SHARED_DATA


@pytest.fixture(scope="module")
def tiny_policy(smol_tokenizer):
    cfg = ModelConfig(model_type="llama", vocab_size=len(smol_tokenizer), hidden_size=32, intermediate_size=64,
                      num_layers=2, num_heads=2, num_kv_heads=1, head_dim=16, tie_word_embeddings=True,
                      eos_token_ids=(smol_tokenizer.eos_token_id,))
    return Model(cfg, init_params(cfg, jax.random.PRNGKey(0)))


def _search():
    from envs.search import SEARCH_SPEC, load_default_tasks, make_search_env

    return EnvFactory(make_search_env, seed_kwarg=None), load_default_tasks(limit=2), SEARCH_SPEC, \
        ("</search>", "</answer>")


def _alfworld():
    from envs.alfworld import ALFWORLD_SPEC, list_games, make_alfworld_env

    data = SHARED_DATA / "alfworld"
    return EnvFactory(make_alfworld_env, data_dir=str(data), seed_kwarg=None), \
        list_games(data, "valid_seen")[:1], ALFWORLD_SPEC, ("</action>",)


def _webshop():
    from envs.webshop import WEBSHOP_SPEC, load_goals, make_webshop_env

    return EnvFactory(make_webshop_env, seed_kwarg=None), load_goals(limit=2), WEBSHOP_SPEC, ("</action>",)


ENVS = {"search": _search, "alfworld": _alfworld, "webshop": _webshop}


@pytest.mark.parametrize("name", sorted(ENVS))
def test_rollout_analysis_batch_end_to_end(name, tiny_policy, smol_tokenizer):
    factory, tasks, spec, stops = ENVS[name]()
    settings = RolloutSettings(group_size=2, max_steps=2, max_prompt_tokens=1024,
                               sampling=SamplingParams(max_new_tokens=12), invalid_penalty=spec.invalid_penalty, success_threshold=spec.success_threshold,
                               stop_strings=stops)
    encode = make_prompt_encoder(smol_tokenizer)
    with open_env_pool(factory, num_workers=0, seed=0) as pool:
        trajs = run_rollouts(pool, tiny_policy, smol_tokenizer, tasks, settings, seed=1, tag="u0/",
                             encode_prompt=encode, progress=False)
    assert len(trajs) == len(tasks) * 2
    assert [t.group_id for t in trajs] == [g for g in range(len(tasks)) for _ in range(2)]
    assert len({t.traj_id for t in trajs}) == len(trajs)
    for t in trajs:
        assert not t.env_error and 1 <= len(t.steps) <= 2
        assert t.task_description
        for s in t.steps:
            assert s.prompt_ids == encode(s.prompt_text)[-1024:]
            assert 1 <= len(s.response_ids) <= 12 and len(s.response_logprobs) == len(s.response_ids)
            assert s.penalty == (0.0 if s.valid else spec.invalid_penalty)
        assert t.episode_reward == pytest.approx(sum(s.reward for s in t.steps))
        assert t.steps[0].prompt_text.count(t.task_description.strip()[:20]) >= 1

    parses, prompts, _ = analyze_trajectories(tiny_policy, smol_tokenizer, trajs, encode_prompt=encode,
                                           success_threshold=spec.success_threshold, max_new_tokens=8,
                                           max_prompt_tokens=2048, progress=False)
    assert set(parses) == {t.traj_id for t in trajs}
    for t in trajs:
        assert t.steps[0].raw_observation[:30] in prompts[t.traj_id]

    # Inject a skill for every other trajectory (a random model writes none that parse).
    skill = "Always read the whole observation before choosing the next action carefully."
    skills = {t.traj_id: (skill if i % 2 == 0 else None) for i, t in enumerate(trajs)}
    batch = build_batch(trajs, skills, encode, BatchSettings(max_prompt_tokens=1024, max_response_tokens=12,
                                                             max_teacher_prompt_tokens=2048),
                        pad_id=smol_tokenizer.pad_token_id)
    a = {k: getattr(batch, k) for k in ("student_ids", "student_mask", "teacher_ids", "teacher_mask",
                                        "response_mask", "has_skill", "advantages")}
    P, Pt, R = batch.prompt_len, batch.teacher_prompt_len, batch.response_len
    n_steps = sum(len(t.steps) for t in trajs)
    assert batch.num_rows == n_steps == a["student_ids"].shape[0]  # one row per step, no padding rows
    assert a["student_ids"].shape == (n_steps, P + R)
    assert a["teacher_ids"].shape == (n_steps, Pt + R) and Pt > P - 1
    by_id = {t.traj_id: t for t in trajs}
    for i, row in enumerate(batch.rows):
        s = by_id[row.traj_id].steps[row.step_index]
        n = len(s.response_ids)
        # identical response tokens in both branches, right after each prompt
        assert a["student_ids"][i, P:P + n].tolist() == s.response_ids
        assert a["teacher_ids"][i, Pt:Pt + n].tolist() == s.response_ids
        assert a["response_mask"][i].tolist() == [1.0] * n + [0.0] * (R - n)
        assert a["student_ids"][i, P - len(s.prompt_ids):P].tolist() == s.prompt_ids
        assert a["student_mask"][i].sum() == len(s.prompt_ids) + n
        assert a["has_skill"][i] == (1.0 if skills[row.traj_id] else 0.0)
        teacher_prompt = smol_tokenizer.decode(a["teacher_ids"][i, :Pt][a["teacher_mask"][i, :Pt] == 1])
        assert (skill in teacher_prompt) == bool(skills[row.traj_id])
        if skills[row.traj_id]:
            want = encode(insert_skill(s.prompt_text, skill))
            assert a["teacher_ids"][i, Pt - len(want):Pt].tolist() == want
    # the update's SeedBatch carries the same rows and layout, plus the log-probs
    old = np.full((n_steps, R), -1.0, np.float32)
    sb = batch.to_seed_batch(old)
    assert sb.prompt_len == P and sb.teacher_prompt_len == Pt and sb.old_logp is old and sb.ref_logp is None
    assert batch.to_seed_batch(old, with_teacher_ids=False).teacher_ids is None
    # growing the layout (several hosts, padding rows) moves no token relative to its row
    g = sb.grow(P + 3, Pt + 2, R + 4, n_steps + 5)
    assert g.num_rows == n_steps + 5 and g.prompt_len == P + 3 and g.teacher_prompt_len == Pt + 2
    np.testing.assert_array_equal(g.student_ids[:n_steps, 3:3 + P + R], a["student_ids"])
    np.testing.assert_array_equal(g.teacher_mask[:n_steps, 2:2 + Pt + R], a["teacher_mask"])
    np.testing.assert_array_equal(g.response_mask[:n_steps, :R], a["response_mask"])
    assert g.student_mask[n_steps:].sum() == 0 and g.response_mask[n_steps:].sum() == 0
    assert g.response_mask[:, R:].sum() == 0 and g.old_logp[:n_steps, :R].tolist() == old.tolist()
    # advantages: independent mean/std over each group's episode rewards, minus the step penalty
    for i, row in enumerate(batch.rows):
        t = by_id[row.traj_id]
        group = np.array([u.episode_reward for u in trajs if u.group_id == t.group_id])
        std = group.std(ddof=1)
        base = 0.0 if std == 0 else (t.episode_reward - group.mean()) / (std + 1e-6)
        want = base - t.steps[row.step_index].penalty
        np.testing.assert_allclose(a["advantages"][i, :len(t.steps[row.step_index].response_ids)], want, rtol=1e-5,
                                   atol=1e-6)


def test_env_error_trajectories_are_excluded_from_the_batch(tiny_policy, smol_tokenizer):
    from seed_jax.rollout.trajectory import StepSample, Trajectory

    def traj(tid, g, err, r):
        s = StepSample([5, 6], [7, 8], [-1.0, -1.0], "x", "Your task is to: t", "obs", True, r)
        return Trajectory(tid, g, tid, "t", [s], r, r > 0, env_error=err)

    trajs = [traj("a", 0, False, 10.0), traj("b", 0, True, 0.0), traj("c", 0, False, 0.0)]
    batch = build_batch(trajs, {}, make_prompt_encoder(smol_tokenizer), BatchSettings(64, 8), pad_id=0,
                        with_teacher=False)
    assert [r.traj_id for r in batch.rows] == ["a", "c"]
    assert batch.teacher_ids is None
    with pytest.raises(ValueError, match="no trajectory"):
        build_batch([trajs[1]], {}, make_prompt_encoder(smol_tokenizer), BatchSettings(64, 8), pad_id=0)
