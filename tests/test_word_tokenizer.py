"""Word-level tokenizer: exact round-trip on environment / annotator / analyzer texts, tags,
special tokens, chat template, save / load.

References: hand-written token lists and chat strings; the original texts themselves (the
round-trip must give them back character for character); `envs.actions.parse_action` on the
original vs the decoded response.
"""

from __future__ import annotations

import json
import random

import pytest

from seed_jax.envs.actions import parse_action
from seed_jax.envs.household import EpisodeRecord, HouseholdEnv, annotate_json, make_tasks
from seed_jax.experiments.household.tokenizer import build_household_tokenizer
from seed_jax.models.word_tokenizer import build_word_tokenizer, load_word_tokenizer, unknown_pieces
from seed_jax.rollout.trajectory import StepSample, Trajectory
from seed_jax.skills import build_analyzer_prompt, insert_skill, parse_skill


@pytest.fixture(scope="module")
def tok():
    return build_household_tokenizer()


def household_texts(n_tasks: int = 30, seed: int = 0) -> list[str]:
    """Prompts, observations, responses, skills, analyzer prompts and H(h, s) prompts of random
    household episodes (mixed expert / random / invalid / non-admissible actions)."""
    rng = random.Random(seed)
    texts = []
    for history_window in (2, 5):
        env = HouseholdEnv(history_window=history_window)
        for task in make_tasks("seen", n_tasks, seed=seed) + make_tasks("unseen", n_tasks, seed=seed):
            obs, info = env.reset(task)
            texts.append(obs)
            steps, actions, done = [], [], False
            while not done:
                prompt = env.build_prompt()
                roll = rng.random()
                cmd = (env.expert_actions()[0] if roll < 0.6 else rng.choice(env.admissible_commands) if roll < 0.9
                       else "put apple 1 in/on garbagecan 1")
                response = (f"<think>I should {cmd} now.</think><action>{cmd}</action>" if roll < 0.95
                            else "<think>Not sure.</think> go to fridge 1")
                shown = info["raw_observation"]
                obs, _, done, info = env.step(response)
                texts += [prompt, response, obs]
                actions.append(info["action_text"])
                steps.append(StepSample([], [], [], response, prompt, shown, info["valid"], 0.0,
                                        action=info["action_text"]))
            traj = Trajectory(task["task_id"], 0, "t", task["task_description"], steps,
                              10.0 * info["won"], info["won"], final_observation=obs)
            answer = annotate_json(EpisodeRecord(task, tuple(actions), info["won"]))
            skill = parse_skill(answer).skill
            texts += [answer, build_analyzer_prompt(traj), insert_skill(steps[-1].prompt_text, skill)]
    return texts


def test_round_trip_is_exact_on_household_texts(tok):
    texts = household_texts()
    assert len(texts) > 1000
    for text in texts:
        assert unknown_pieces(tok, text) == [], text
        ids = tok(text, add_special_tokens=False)["input_ids"]
        assert tok.unk_token_id not in ids
        assert tok.decode(ids) == text


def test_cut_analyzer_prompts_round_trip(tok):
    """x_tau cut to small budgets carries the omission notes (observation, response, steps)."""
    env = HouseholdEnv()
    task = make_tasks("seen", 1, seed=3)[0]
    obs, info = env.reset(task)
    steps = []
    for _ in range(4):
        cmd = env.expert_actions()[0]
        # the cut keeps a response's last 300 characters: digits, so the cut never splits a word
        count = " ".join(str(i % 10) for i in range(200))
        response = f"<think>I think: {count}.</think><action>{cmd}</action>"
        shown = info["raw_observation"]
        obs, _, done, info = env.step(response)
        steps.append(StepSample([], [], [], response, "", shown, info["valid"], 0.0, action=info["action_text"]))
    traj = Trajectory(task["task_id"], 0, "t", task["task_description"], steps, 0.0, False, final_observation=obs)
    notes = ("[observation omitted to save space]", "[... earlier part of the response omitted to save space]",
             "omitted to save space]\n\n### Step 4")  # the middle steps went, the last one stayed
    cut = [build_analyzer_prompt(traj, max_chars=n) for n in (3000, 2000, 1500, 10)]
    for note in notes:
        assert any(note in text for text in cut), note
    for text in cut:
        assert unknown_pieces(tok, text) == [], text
        assert tok.decode(tok(text, add_special_tokens=False)["input_ids"]) == text


def test_decoded_responses_parse_like_the_originals(tok):
    env = HouseholdEnv()
    for task in make_tasks("unseen", 10, seed=1):
        env.reset(task)
        for cmd in env.admissible_commands + ["take apple 1 from fridge 1", "put mug 1 in/on countertop 1"]:
            for response in (f"<think>I go.</think><action>{cmd}</action>", f"<think>x</think>\n<action> {cmd} </action>",
                             f"<action>{cmd}</action><action>look</action>"):
                decoded = tok.decode(tok(response, add_special_tokens=False)["input_ids"])
                assert parse_action(decoded, ("action",), lowercase=True) == parse_action(response, ("action",), True)


def test_hand_written_tokens(tok):
    text = "<think>Go to fridge 1.</think><action>put apple 1 in/on countertop 12</action>"
    assert tok.convert_ids_to_tokens(tok(text, add_special_tokens=False)["input_ids"]) == [
        "<think>", "Go", "\u2581to", "\u2581fridge", "\u25811", ".", "</think>", "<action>", "put", "\u2581apple",
        "\u25811", "\u2581in", "/", "on", "\u2581countertop", "\u25811", "2", "</action>"]
    for tag in ("<think>", "</think>", "<action>", "</action>"):
        assert len(tok(tag, add_special_tokens=False)["input_ids"]) == 1


@pytest.mark.parametrize("text", ["  two  steps ", "\n\nlook\n", "look\there", " <action>look</action> ",
                                  "{\"episode_summary\": \"x\", \"episode_skill\": \"y\"}", "a , b ,c", "12 34"])
def test_spacing_edge_cases_round_trip(tok, text):
    assert tok.decode(tok(text, add_special_tokens=False)["input_ids"]) == text


def test_unknown_words_become_unk(tok):
    ids = tok("go to zanzibar 1", add_special_tokens=False)["input_ids"]
    assert tok.unk_token_id in ids and tok.decode(ids) == "go to<unk> 1"
    assert unknown_pieces(tok, "go to zanzibar 1") == ["\u2581zanzibar"]


def test_special_tokens_and_chat_template(tok):
    assert (tok.pad_token, tok.unk_token, tok.bos_token, tok.eos_token) == ("<|pad|>", "<unk>", "<|im_start|>",
                                                                         "<|im_end|>")
    assert (tok.pad_token_id, tok.unk_token_id, tok.bos_token_id, tok.eos_token_id) == (0, 1, 2, 3)
    user = "Your task is to: put a hot apple in countertop."
    chat = tok.apply_chat_template([{"role": "user", "content": user}], tokenize=False, add_generation_prompt=True)
    assert chat == f"<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"
    from seed_jax.models.tokenizer import apply_chat

    assert apply_chat(tok, user) == chat
    assert apply_chat(tok, user, system="Be brief.") == f"<|im_start|>system\nBe brief.<|im_end|>\n{chat}"
    ids = tok(chat, add_special_tokens=True)["input_ids"]
    assert ids[0] == tok.bos_token_id and ids.count(tok.eos_token_id) == 1 and tok.decode(ids) == chat
    assert tok.decode(ids, skip_special_tokens=True) == f"user\n{user}\nassistant\n"
    full = chat + "<think>ok</think><action>look</action><|im_end|>"
    assert tok.decode(tok(full)["input_ids"]) == full


def test_save_and_load_without_pickles(tok, tmp_path):
    from transformers import AutoTokenizer

    from seed_jax.models import load_tokenizer

    tok.save_pretrained(tmp_path)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert "tokenizer.json" in names and not any(n.endswith((".bin", ".pkl", ".pt")) for n in names)
    text = household_texts(n_tasks=3, seed=5)[5]
    want = tok(text)["input_ids"]
    for loaded in (load_word_tokenizer(tmp_path), AutoTokenizer.from_pretrained(tmp_path), load_tokenizer(tmp_path)):
        assert loaded(text)["input_ids"] == want and loaded.decode(want) == text
        assert loaded.eos_token_id == 3 and loaded.pad_token_id == 0 and len(loaded) == len(tok)
        assert loaded.apply_chat_template([{"role": "user", "content": "look"}], tokenize=False,
                                          add_generation_prompt=True) == \
            "<|im_start|>user\nlook<|im_end|>\n<|im_start|>assistant\n"
    assert load_word_tokenizer(tmp_path).padding_side == "left"
    batch = load_word_tokenizer(tmp_path)(["look", "go to fridge 1"], padding=True)["input_ids"]
    assert batch[0][:3] == [0, 0, 0] and batch[1][0] != 0


def test_custom_corpus_and_extra_words():
    small = build_word_tokenizer(["Hello world."], extra_words=["zanzibar"])
    for text in ("Hello world.", "hello World zanzibar", "HELLO"):
        ids = small(text, add_special_tokens=False)["input_ids"]
        assert (small.unk_token_id in ids) == (text == "HELLO")
    assert json.loads(small.backend_tokenizer.to_str())["model"]["type"] == "WordLevel"
