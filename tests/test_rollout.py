"""Rollout loop + analyzer + batch builder end to end with a tiny random model on each env."""

from __future__ import annotations

import dataclasses
import math

import jax
import numpy as np
import pytest

from seed_jax.models import Model, ModelConfig
from seed_jax.models.decoder import init_params
from seed_jax.rollout.analyzer import analyze_trajectories
from seed_jax.rollout.batch import BatchSettings, action_token_mask, build_batch
from seed_jax.rollout.loop import RolloutSettings, make_prompt_encoder, run_rollouts
from seed_jax.rollout.pool import EnvFactory, open_env_pool
from seed_jax.rollout.trajectory import StepSample, Trajectory
from seed_jax.sampling import SamplingParams
from seed_jax.skills import insert_skill

SMOLLM2_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"


def chatml(user_text: str) -> str:
    """SmolLM2-Instruct's chat layout for one user message with its default system line, ready
    for generation (written out; the library applies the tokenizer's template)."""
    return (f"<|im_start|>system\n{SMOLLM2_SYSTEM}<|im_end|>\n<|im_start|>user\n{user_text}<|im_end|>\n"
            "<|im_start|>assistant\n")


@pytest.fixture(scope="module")
def tiny_policy(smol_tokenizer):
    cfg = ModelConfig(model_type="llama", vocab_size=len(smol_tokenizer), hidden_size=32, intermediate_size=64,
                      num_layers=2, num_heads=2, num_kv_heads=1, head_dim=16, tie_word_embeddings=True,
                      eos_token_ids=(smol_tokenizer.eos_token_id,))
    return Model(cfg, init_params(cfg, jax.random.PRNGKey(0)))


def _search():
    from seed_jax.envs.search import SEARCH_SPEC, load_default_tasks, make_search_env

    return EnvFactory(make_search_env, seed_kwarg=None), load_default_tasks(limit=2), SEARCH_SPEC, \
        ("</search>", "</answer>")


def _alfworld():
    from seed_jax.envs.alfworld import ALFWORLD_SPEC, list_games, make_alfworld_env
    from seed_jax.envs.alfworld.games import vendored_data_dir

    data = vendored_data_dir()
    return EnvFactory(make_alfworld_env, data_dir=str(data), seed_kwarg=None), \
        list_games(data, "valid_seen")[:1], ALFWORLD_SPEC, ("</action>",)


def _webshop():
    from seed_jax.envs.webshop import WEBSHOP_SPEC, load_goals, make_webshop_env

    return EnvFactory(make_webshop_env, seed_kwarg=None), load_goals(limit=2), WEBSHOP_SPEC, ("</action>",)


ENVS = {"search": _search, "alfworld": _alfworld, "webshop": _webshop}


@pytest.mark.integration
@pytest.mark.parametrize("name", sorted(ENVS))
def test_rollout_analysis_batch_end_to_end(name, tiny_policy, smol_tokenizer):
    """References: the prompt ids against SmolLM2's chat layout written out (`chatml`), left-cut
    to the cap; rows against the trajectories' own token ids; advantages against the rule for a
    group of equal outcomes (only the step's penalty), which is all a random policy reaches."""
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
            # reference: SmolLM2's chat layout written out, tokenized by the tokenizer alone
            full = smol_tokenizer(chatml(s.prompt_text), add_special_tokens=False)["input_ids"]
            assert s.prompt_ids == full[-1024:]
            assert (s.prompt_tokens, s.prompt_cut) == (len(full), len(full) > 1024)
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
                        pad_id=smol_tokenizer.pad_token_id,
                        decode=lambda ids: smol_tokenizer.decode(ids, skip_special_tokens=True))
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
    # advantages: a random policy never wins, so every group's outcomes are equal and only the
    # step's penalty is left, on every response token (both branches by hand: the test below)
    for i, row in enumerate(batch.rows):
        t = by_id[row.traj_id]
        assert len({u.episode_reward for u in trajs if u.group_id == t.group_id}) == 1
        step = t.steps[row.step_index]
        np.testing.assert_allclose(a["advantages"][i, :len(step.response_ids)], -step.penalty, atol=1e-6)


def _hand_traj(tid, group, reward, penalties):
    """A trajectory of task ``group`` with one step per penalty (2 response tokens each)."""
    steps = [StepSample([5, 6], [7, 8], [-1.0, -1.0], "x", "Your task is to: t", "obs", p == 0, 0.0, p)
             for p in penalties]
    return Trajectory(f"task{group}", group, tid, "t", steps, reward, reward >= 10)


# The group's outcome rewards R, their mean and unbiased standard deviation, eps = 1e-6:
# group 0: R = 10, 0, 0, 10 -> mean 5, std sqrt(100 / 3), (R - mean) / (std + eps) = +-Z
# group 1: R = 3, 3 (equal outcomes) -> 0; group 2: one trajectory -> 0.
Z = 5.0 / (math.sqrt(100.0 / 3.0) + 1e-6)  # 0.8660253...
HAND_TRAJS = [
    _hand_traj("a", 0, 10.0, [0.0]), _hand_traj("b", 0, 0.0, [0.1, 0.0]), _hand_traj("c", 0, 0.0, [0.0]),
    _hand_traj("d", 0, 10.0, [0.0, 0.1]), _hand_traj("e", 1, 3.0, [0.0]), _hand_traj("f", 1, 3.0, [0.1, 0.0]),
    _hand_traj("g", 2, 7.0, [0.1]),
]
# (traj, step) -> advantage; "after_norm": A = (R - mean) / (std + eps) - p
AFTER_NORM = {("a", 0): Z, ("b", 0): -Z - 0.1, ("b", 1): -Z, ("c", 0): -Z, ("d", 0): Z, ("d", 1): Z - 0.1,
              ("e", 0): 0.0, ("f", 0): -0.1, ("f", 1): 0.0, ("g", 0): -0.1}
# "in_score": A = (R - p - mean) / (std + eps): a penalty in a group of equal outcomes is / eps;
# a group of one has no standard deviation and gets 0
IN_SCORE = {("a", 0): Z, ("b", 0): (-5.1) / (math.sqrt(100.0 / 3.0) + 1e-6), ("b", 1): -Z, ("c", 0): -Z,
            ("d", 0): Z, ("d", 1): 4.9 / (math.sqrt(100.0 / 3.0) + 1e-6), ("e", 0): 0.0, ("f", 0): -0.1 / 1e-6,
            ("f", 1): 0.0, ("g", 0): 0.0}  # a group of one: no statistics, 0


@pytest.mark.parametrize("penalty_mode,want", [("after_norm", AFTER_NORM), ("in_score", IN_SCORE)])
def test_batch_advantages_by_hand(penalty_mode, want, smol_tokenizer):
    """Reference: hand-computed group advantages (docs/METHOD.md §3.3) for groups with different
    outcomes (std > 0), equal outcomes (std = 0) and a single trajectory, steps with and without
    the invalid-action penalty; each row's value on its response tokens, 0 on padding."""
    batch = build_batch(HAND_TRAJS, {}, make_prompt_encoder(smol_tokenizer),
                        BatchSettings(64, 8, penalty_mode=penalty_mode), pad_id=0, with_teacher=False)
    got = {(r.traj_id, r.step_index): batch.advantages[i] for i, r in enumerate(batch.rows)}
    assert set(got) == set(want)
    for key, row in got.items():
        np.testing.assert_allclose(row[:2], want[key], rtol=1e-5, err_msg=str(key))
        assert not np.any(row[2:]), key


# A byte-level vocabulary written out: token -> bytes (the end token decodes to nothing, 8 and 9
# are the two bytes of "é", so token by token decoding does not add up to the text).
BYTE_VOCAB = {1: b"<think>", 2: b"go left", 3: b"</think>", 4: b"<action>", 5: b"go to desk 1", 6: b"</action>",
              7: b"", 8: b"\xc3", 9: b"\xa9", 10: b" ", 11: b"<think>oops"}


def _byte_decode(ids):
    return b"".join(BYTE_VOCAB[i] for i in ids).decode("utf-8", errors="replace")


def _opd_step(ids, valid):
    return StepSample([5, 6], ids, [-1.0] * len(ids), _byte_decode(ids), "Your task is to: t", "obs", valid, 0.0)


# (response ids, valid) -> the OPD mask by hand (opd.mask = action): 1 on the valid step's
# tokens with a character outside <think>...</think>, the end token included; 0 on the thinking
# and on every token of an invalid step.
OPD_CASES = [
    (([1, 2, 3, 4, 5, 6, 7], True), [0, 0, 0, 1, 1, 1, 1]),  # thinking, then the action
    (([1, 2, 3, 4, 5, 6], False), [0, 0, 0, 0, 0, 0]),  # invalid-action step
    (([4, 5, 6, 7], True), [1, 1, 1, 1]),  # no thinking
    (([1, 8, 9, 3, 10, 4, 5, 6], True), [0, 0, 0, 0, 1, 1, 1, 1]),  # "é" split over two tokens in thinking
    (([4, 5, 6, 11], True), [1, 1, 1, 0]),  # a late thinking opener: the rest is thinking
]


def test_opd_mask_is_the_valid_action_tokens_by_hand():
    """opd.mask = action (default): the OPD mask of a batch with a thinking span, an invalid-action
    step, a multi-byte character split over tokens, checked against the masks written by hand;
    opd.mask = response keeps every response token (the old behaviour)."""
    for (ids, valid), want in OPD_CASES:
        assert action_token_mask(ids, valid, _byte_decode).tolist() == want, (ids, valid)
    trajs = [Trajectory(f"t{i}", 0, f"t{i}", "t", [_opd_step(ids, valid)], 0.0, False)
             for i, ((ids, valid), _) in enumerate(OPD_CASES)]
    skills = {t.traj_id: "Always read the whole observation before choosing the next action." for t in trajs}
    settings = BatchSettings(64, 8, max_teacher_prompt_tokens=256)
    encode = lambda text: [3] * len(text.split())  # noqa: E731
    batch = build_batch(trajs, skills, encode, settings, pad_id=0, decode=_byte_decode)
    R = batch.response_len
    want = np.array([w + [0] * (R - len(w)) for _, w in OPD_CASES], np.float32)
    np.testing.assert_array_equal(batch.opd_mask, want)
    sb = batch.to_seed_batch(np.zeros((len(trajs), R), np.float32))
    np.testing.assert_array_equal(sb.opd_mask, want)  # the step gets it with the teacher twins
    assert batch.to_seed_batch(sb.old_logp, with_teacher_ids=False).opd_mask is None  # no OPD, no mask
    old = build_batch(trajs, skills, encode, dataclasses.replace(settings, opd_mask="response"), pad_id=0)
    np.testing.assert_array_equal(old.opd_mask, old.response_mask)
    with pytest.raises(ValueError, match="decode"):
        build_batch(trajs, skills, encode, settings, pad_id=0)


def test_env_error_trajectories_are_excluded_from_the_batch(tiny_policy, smol_tokenizer):
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


@pytest.mark.integration
def test_waves_give_the_same_episodes_as_one_batch(tiny_policy, smol_tokenizer, monkeypatch):
    """Reference: the same rollout with every live episode in one `generate` call. Sampling at
    temperature 1 draws per episode (its slot names its random stream), so cutting the live
    episodes into waves of 2 or 4 rows changes no token, text, log-prob or reward."""
    import seed_jax.rollout.loop as loop

    factory, tasks, spec, stops = _search()
    calls = []

    def counted(model, tok, prompts, **kw):
        calls.append(len(prompts))
        return real(model, tok, prompts, **kw)

    real = loop.generate
    monkeypatch.setattr(loop, "generate", counted)

    def run(wave_rows):
        settings = RolloutSettings(group_size=3, max_steps=2, max_prompt_tokens=1024, wave_rows=wave_rows,
                                   sampling=SamplingParams(max_new_tokens=10, temperature=1.0),
                                   invalid_penalty=spec.invalid_penalty, success_threshold=spec.success_threshold,
                                   stop_strings=stops)
        calls.clear()
        with open_env_pool(factory, num_workers=0, seed=0) as pool:
            trajs = run_rollouts(pool, tiny_policy, smol_tokenizer, tasks, settings, seed=5, progress=False)
        return trajs, list(calls)

    one, one_calls = run(0)
    assert one_calls[0] == 6
    for rows in (2, 4):
        got, got_calls = run(rows)
        assert max(got_calls) <= rows and len(got_calls) > len(one_calls)
        _assert_same_episodes(got, one)
    # and the sampled responses are not all alike (a test of the per-episode streams)
    assert len({tuple(t.steps[0].response_ids) for t in one}) > 1


def _assert_same_episodes(got, want):
    assert [(t.traj_id, t.group_id) for t in got] == [(t.traj_id, t.group_id) for t in want]
    for a, b in zip(got, want):
        assert (a.episode_reward, a.won, len(a.steps)) == (b.episode_reward, b.won, len(b.steps))
        for sa, sb in zip(a.steps, b.steps):
            assert sa.response_ids == sb.response_ids and sa.response_text == sb.response_text
            assert sa.reward == sb.reward and sa.prompt_ids == sb.prompt_ids
            np.testing.assert_allclose(sa.response_logprobs, sb.response_logprobs, atol=1e-5)


def test_host_shares_give_the_same_episodes_as_one_run(tiny_policy, smol_tokenizer):
    """Reference: one run of 3 tasks x 2 episodes. Two hosts' contiguous shares (2 tasks and 1,
    `host_share`), each run in its own env pool with the share's slot and group offsets, give the
    same episodes in the same order: same ids, groups, tokens, rewards."""
    from seed_jax.envs.search import SEARCH_SPEC, load_default_tasks, make_search_env
    from seed_jax.pipeline.multihost import host_share

    factory, tasks = EnvFactory(make_search_env, seed_kwarg=None), load_default_tasks(limit=3)
    settings = RolloutSettings(group_size=2, max_steps=2, max_prompt_tokens=1024,
                               sampling=SamplingParams(max_new_tokens=10, temperature=1.0),
                               invalid_penalty=SEARCH_SPEC.invalid_penalty,
                               success_threshold=SEARCH_SPEC.success_threshold, stop_strings=("</search>", "</answer>"))

    def run(share):
        with open_env_pool(factory, num_workers=0, seed=0) as pool:
            return run_rollouts(pool, tiny_policy, smol_tokenizer, tasks[share], settings, seed=5, progress=False,
                                tag="u0/", slot_offset=share.start * 2, group_offset=share.start)

    one = run(slice(0, 3))
    shares = [host_share(3, hosts=2, host=h) for h in range(2)]
    assert shares == [slice(0, 2), slice(2, 3)]
    _assert_same_episodes([t for share in shares for t in run(share)], one)
    assert [t.group_id for t in one] == [0, 0, 1, 1, 2, 2]




@pytest.mark.integration
def test_a_waves_env_steps_run_while_the_next_wave_generates(tiny_policy, smol_tokenizer, monkeypatch):
    """Each turn's waves of 2 rows, each env step made to last 1 s: wave k + 1's `generate`
    starts before wave k's step has ended (steps in one call per wave, run in the background;
    stepping after each wave or after all of them fails this), and the episodes equal those of
    one `generate` call per turn."""
    import time

    import seed_jax.rollout.loop as loop

    factory, tasks, spec, stops = _search()
    gens, steps = [], []  # (seed, start) per generate call; (slots, start, end) per step call
    real = loop.generate

    def generate(model, tok, prompts, *, seed, **kw):
        gens.append((seed, time.monotonic()))
        return real(model, tok, prompts, seed=seed, **kw)

    class SlowSteps:
        def __init__(self, inner):
            self.inner = inner

        def reset(self, items):
            return self.inner.reset(items)

        def step(self, actions):
            t0 = time.monotonic()
            time.sleep(1.0)
            out = self.inner.step(actions)
            steps.append((sorted(actions), t0, time.monotonic()))
            return out

    def run(wave_rows, backend=lambda pool: pool):
        settings = RolloutSettings(group_size=3, max_steps=2, max_prompt_tokens=1024, wave_rows=wave_rows,
                                   sampling=SamplingParams(max_new_tokens=10, temperature=1.0),
                                   invalid_penalty=spec.invalid_penalty, success_threshold=spec.success_threshold,
                                   stop_strings=stops)
        with open_env_pool(factory, num_workers=0, seed=0) as pool:
            return run_rollouts(backend(pool), tiny_policy, smol_tokenizer, tasks, settings, seed=5, progress=False)

    one = run(0)
    monkeypatch.setattr(loop, "generate", generate)
    got = run(2, SlowSteps)
    assert len(steps) == len(gens) >= 3 and all(len(slots) <= 2 for slots, _, _ in steps)
    later = [k for k in range(len(gens) - 1) if gens[k + 1][0] == gens[k][0]]  # same turn's next wave
    assert len(later) >= 2
    for k in later:
        assert gens[k + 1][1] < steps[k][2]  # wave k + 1 generating while wave k's envs step
    _assert_same_episodes(got, one)


def test_fit_prompt_takes_the_first_candidate_within_the_cap():
    """Hand cases with one token per character: the first candidate of at most 5 tokens wins;
    none fits -> the last one with all its ids; later candidates are encoded only when needed."""
    from seed_jax.rollout.loop import fit_prompt

    seen = []

    def encode(text):
        seen.append(text)
        return [ord(c) for c in text]

    assert fit_prompt(["abcdefg", "abcdef", "abc", "a"], encode, 5) == ("abc", [97, 98, 99])
    assert seen == ["abcdefg", "abcdef", "abc"]
    assert fit_prompt(["abcdefg", "abcdef"], encode, 3) == ("abcdef", [97, 98, 99, 100, 101, 102])
    assert fit_prompt(["ab"], encode, 3) == ("ab", [97, 98])


@pytest.mark.integration
def test_a_prompt_over_the_cap_drops_past_steps_before_the_task(tiny_policy, smol_tokenizer):
    """An ALFWorld episode of a random policy under a cap the full prompt outgrows: every step's
    prompt keeps the task line and the current observation and is not cut (the old left cut
    dropped the task line); at least one step shows fewer past steps than the env's window.
    Reference for the ids: SmolLM2's chat layout written out (`chatml`)."""
    from seed_jax.envs.prompt import without_task_line

    factory, tasks, spec, stops = _alfworld()
    encode = make_prompt_encoder(smol_tokenizer)
    env = factory(0)
    env.reset(tasks[0])
    cap = len(encode(env.build_prompt())) + 100  # the first prompt fits, 2 past room descriptions do not
    env.close()
    settings = RolloutSettings(group_size=2, max_steps=4, max_prompt_tokens=cap,
                               sampling=SamplingParams(max_new_tokens=12), invalid_penalty=spec.invalid_penalty,
                               success_threshold=spec.success_threshold, stop_strings=stops)
    with open_env_pool(factory, num_workers=0, seed=0) as pool:
        trajs = run_rollouts(pool, tiny_policy, smol_tokenizer, tasks, settings, seed=1, encode_prompt=encode,
                             progress=False)
    shortened = 0
    for t in trajs:
        assert len(t.steps) == 4
        for k, s in enumerate(t.steps):
            assert f"Your task is to: {t.task_description}" in s.prompt_text
            assert without_task_line(s.raw_observation) in s.prompt_text
            full = smol_tokenizer(chatml(s.prompt_text), add_special_tokens=False)["input_ids"]
            assert not s.prompt_cut and s.prompt_ids == full and s.prompt_tokens == len(full) <= cap
            shown = s.prompt_text.count("[Observation ")
            assert shown <= min(k, spec.history_window)
            shortened += shown < min(k, spec.history_window)
    assert shortened > 0
