"""Analyzer input x_tau, tolerant skill parsing, H(h, s), annotation retries, SFT records.

Expected values are written out by hand (exact strings for H), or come from an independent
serialiser (json.dumps / Python repr) for the round-trip properties of parse_skill.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from seed_jax.rollout.trajectory import StepSample, Trajectory
from seed_jax.skills import (
    FIXED_TEXTS,
    REPAIR_PROMPT,
    SKILL_HEADING,
    SkillParse,
    SkillRecord,
    annotate,
    build_analyzer_prompt,
    insert_skill,
    middle_out,
    parse_skill,
    read_skill_records,
    render_analyzer_prompt,
    write_skill_records,
)

SKILL = "Open the drawer before searching the shelf for the key."
SUMMARY = "The agent found the key in the drawer."

# ----------------------------------------------------------------------------------------------
# parse_skill: cases


def test_plain_json():
    text = json.dumps({"episode_summary": SUMMARY, "episode_skill": SKILL})
    assert parse_skill(text) == SkillParse(SUMMARY, SKILL, True, "")


def test_fenced_json_with_prose():
    text = ("Here is my analysis.\n```json\n{\n  \"episode_summary\": \"" + SUMMARY +
            "\",\n  \"episode_skill\": \"" + SKILL + "\"\n}\n```\nHope this helps {really}.")
    assert parse_skill(text) == SkillParse(SUMMARY, SKILL, True, "")


def test_trailing_commas_and_prose_without_fence():
    text = 'Sure! {"episode_summary": "' + SUMMARY + '", "episode_skill": "' + SKILL + '",} Done.'
    assert parse_skill(text) == SkillParse(SUMMARY, SKILL, True, "")
    text = '{"episode_summary": "a b", "episode_skill": "' + SKILL + '", "tags": [1, 2,],}'
    assert parse_skill(text) == SkillParse("a b", SKILL, True, "")


def test_single_quotes_with_apostrophes():
    text = ("{'episode_summary': 'The agent's plan worked', "
            "'episode_skill': 'Don't open the fridge, check the counter first.'}")
    assert parse_skill(text) == SkillParse(
        "The agent's plan worked", "Don't open the fridge, check the counter first.", True, "")


def test_smart_quotes():
    text = ("{\u201cepisode_summary\u201d: \u201cIt went well.\u201d, \u201cepisode_skill\u201d: "
            "\u201cAlways take the \"clean\" route to the sink first.\u201d}")
    assert parse_skill(text) == SkillParse(
        "It went well.", 'Always take the "clean" route to the sink first.', True, "")


def test_escapes_and_unicode():
    text = r'{"episode_summary": "said \"hi\"\n", "episode_skill": "caf\u00e9 r\u00e9sum\u00e9 is the \ud83d\ude00 way"}'
    assert parse_skill(text) == SkillParse('said "hi"', "café résumé is the \U0001F600 way", True, "")


def test_nested_and_later_objects():
    inner = {"episode_summary": SUMMARY, "episode_skill": SKILL}
    assert parse_skill(json.dumps({"answer": inner})) == SkillParse(SUMMARY, SKILL, True, "")
    # the format line echoed from the prompt is not JSON; the real answer follows it
    text = '{"episode_summary": string, "episode_skill": string}\n' + json.dumps(inner)
    assert parse_skill(text) == SkillParse(SUMMARY, SKILL, True, "")
    # a first object with a too-short skill is skipped in favour of a later valid one
    text = json.dumps({"episode_summary": "x", "episode_skill": "..."}) + json.dumps(inner)
    assert parse_skill(text).ok


@pytest.mark.parametrize(
    "text, reason",
    [
        ("no json at all", "no JSON object"),
        ('{"episode_summary": "s", "episode_skill": "open the', "skill has 2 words (< 5)"),  # cut too early
        ('{"episode_summary": "the agent', "missing field episode_skill"),
        ('{"episode_summary": "s", "episode_skill": "four words only here"}',
         "skill has 4 words (< 5)"),
        ('{"episode_summary": "s", "episode_skill": "   "}', "skill has 0 words (< 5)"),
        ('{"episode_summary": "s"}', "missing field episode_skill"),
        ('{"episode_skill": "one two three four five"}', "missing field episode_summary"),
        ('{"episode_summary": "s", "episode_skill": ["a b c d e"]}',
         "field episode_skill is list, not a string"),
        (None, "answer is NoneType, not text"),
    ],
)
def test_rejected_answers(text, reason):
    got = parse_skill(text)
    assert not got.ok and got.reason == reason


# Answers cut off by the token limit, or broken in ways models often break them; each with the
# parse written out by hand.
_REPAIRS = [
    # the final } missing
    ('{"episode_summary": "Found it.", "episode_skill": "Open the drawer before the shelf."',
     "Found it.", "Open the drawer before the shelf."),
    # the final } missing after a newline and inside an unclosed code fence
    ('```json\n{\n  "episode_summary": "Found it.",\n  "episode_skill": "Open the drawer before the shelf."\n',
     "Found it.", "Open the drawer before the shelf."),
    # the fence closed but the object not
    ('```json\n{"episode_summary": "Found it.", "episode_skill": "Open the drawer before the shelf."\n```',
     "Found it.", "Open the drawer before the shelf."),
    # cut inside the skill string: "} missing; the words written so far are kept
    ('{"episode_summary": "Found it.", "episode_skill": "Open the drawer before searching the',
     "Found it.", "Open the drawer before searching the"),
    # a dangling comma, then a half-written third member
    ('{"episode_summary": "Found it.", "episode_skill": "Open the drawer before the shelf.", "confid',
     "Found it.", "Open the drawer before the shelf."),
    ('{"episode_summary": "Found it.", "episode_skill": "Open the drawer before the shelf.",',
     "Found it.", "Open the drawer before the shelf."),
    # single quotes and a missing }, after a reasoning model's thoughts
    ("<think>the key was in the drawer</think>\n{'episode_summary': 'Found it.', 'episode_skill': 'Open the "
     "drawer before the shelf.'", "Found it.", "Open the drawer before the shelf."),
    # nested: the outer object cut, the skill object whole
    ('{"analysis": {"episode_summary": "Found it.", "episode_skill": "Open the drawer before the shelf."}, "notes": "x',
     "Found it.", "Open the drawer before the shelf."),
    # json_repair, the last resort: a missing comma between members, unquoted values
    ('{"episode_summary": "Found it." "episode_skill": "Open the drawer before the shelf."}',
     "Found it.", "Open the drawer before the shelf."),
    ('{"episode_summary": Found it, "episode_skill": Open the drawer before the shelf}',
     "Found it", "Open the drawer before the shelf"),
]


@pytest.mark.parametrize("text, summary, skill", _REPAIRS)
def test_parse_skill_repairs(text, summary, skill):
    assert parse_skill(text) == SkillParse(summary, skill, True, "")


def test_truncation_repair_keeps_the_first_whole_answer():
    whole = '{"episode_summary": "A.", "episode_skill": "one two three four five"}'
    cut = '{"episode_summary": "B.", "episode_skill": "six seven eight nine ten eleven'
    assert parse_skill(f"{whole}\n{cut}").skill == "one two three four five"
    assert parse_skill(f"{cut}\n{whole}").skill == "one two three four five"  # the whole one is read first


def test_five_words_is_enough():
    got = parse_skill('{"episode_summary": "", "episode_skill": " one two three four five "}')
    assert got == SkillParse("", "one two three four five", True, "")


# ----------------------------------------------------------------------------------------------
# parse_skill: properties

_PROSE = st.text(alphabet=st.characters(blacklist_characters="{}`"), max_size=30)
_FIELD = st.text(max_size=40)


def strict_json_skills(text: str) -> list[tuple[int, str, str]]:
    """Independent reference: ``(position, summary, skill)``, fields stripped, of every object that
    Python's own `json` reads starting at a '{' of ``text`` (nested ones included) with string
    fields ``episode_summary`` and ``episode_skill`` and a skill of at least five words."""
    decoder, out = json.JSONDecoder(), []
    for i, ch in enumerate(text):
        if ch != "{":
            continue
        try:
            obj, _ = decoder.raw_decode(text, i)
        except (ValueError, RecursionError):
            continue
        summary, skill = obj.get("episode_summary"), obj.get("episode_skill")
        if isinstance(summary, str) and isinstance(skill, str) and len(skill.split()) >= 5:
            out.append((i, summary.strip(), skill.strip()))
    return out


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_parse_skill_without_a_brace_finds_no_object(text):
    """Reference: the format itself. An answer is a JSON object, so text without '{' holds none
    (not even after lenient repairs): the result is exactly 'no JSON object'."""
    text = text.replace("{", "(")
    assert parse_skill(text) == SkillParse("", "", False, "no JSON object")


# fragments of JSON-like text
_JSONISH = st.lists(
    st.one_of(st.sampled_from(['{', '}', '"', "'", ",", ":", "[", "]", "```json\n", "```",
                               '"episode_skill"', '"episode_summary"', "\\", "\u201c", "\u201d",
                               "true", "1e400", "-"]), st.text(max_size=5)),
    max_size=30,
)
_WORDS = st.lists(st.sampled_from(["open", "the", "drawer", "then", "look", "on", "desk", "first"]),
                  max_size=8).map(" ".join)


@st.composite
def _json_object(draw) -> str:
    """An object written by json.dumps: the two fields (a skill of up to eight words, or not a
    string), other keys, sometimes nested in another object, sometimes cut short."""
    fields = {"episode_summary": draw(st.one_of(_WORDS, st.integers(0, 9))),
              "episode_skill": draw(st.one_of(_WORDS, _WORDS, st.none()))}
    extra = draw(st.dictionaries(st.sampled_from(["note", "tags"]),
                                 st.one_of(_WORDS, st.lists(st.integers(0, 3))), max_size=2))
    obj = {"wrapper": fields, **extra} if draw(st.booleans()) else {**extra, **fields}
    text = json.dumps(obj)
    cut = draw(st.one_of(st.none(), st.none(), st.integers(1, len(text))))
    return text[:cut] if cut else text


_MIXED = st.lists(st.one_of(_JSONISH.map("".join), _json_object()), max_size=4).map("".join)


@settings(max_examples=400, deadline=None)
@given(_MIXED)
def test_parse_skill_finds_every_skill_that_json_reads(text):
    """Reference: Python's `json` (`strict_json_skills`). Whenever it reads a qualifying object
    at some '{', the answer parses; when the text has no fence and the object at its first '{'
    qualifies, that object is the one returned (no candidate comes before it)."""
    assume(text.count("{") <= 30)  # within the parser's budget of attempts
    want = strict_json_skills(text)
    got = parse_skill(text)
    if want:
        assert got.ok, got
        if "```" not in text and want[0][0] == text.find("{"):
            assert (got.summary, got.skill) == want[0][1:]


@settings(max_examples=300, deadline=None)
@given(before=_PROSE, after=_PROSE, summary=_FIELD, skill=_FIELD,
       fenced=st.booleans(), indent=st.sampled_from([None, 2]))
def test_parse_skill_recovers_json_dumps(before, after, summary, skill, fenced, indent):
    payload = json.dumps({"episode_summary": summary, "episode_skill": skill}, indent=indent,
                         ensure_ascii=False)
    text = before + (f"```json\n{payload}\n```" if fenced else payload) + after
    got = parse_skill(text)
    ok = len(skill.split()) >= 5
    assert got.ok == ok
    if ok:
        assert (got.summary, got.skill) == (summary.strip(), skill.strip())


_PRINTABLE = st.text(alphabet=st.characters(blacklist_categories=("Cc", "Cs", "Zl", "Zp")),
                     max_size=40)


@settings(max_examples=300, deadline=None)
@given(before=_PROSE, summary=_PRINTABLE, skill=_PRINTABLE)
# repr escapes characters it deems unprintable as \xHH, \uHHHH and \UHHHHHHHH
@example(before="", summary="\U00018cd6", skill="0 0 0 0 0")
@example(before="x ", summary="a\xa0b", skill="go \ue000 to the shelf now")
@example(before="", summary="s", skill="one two three four \U000e0001 five")
def test_parse_skill_recovers_python_repr(before, summary, skill):
    """Single-quoted (Python-style) dicts, including apostrophes escaped by repr."""
    text = before + repr({"episode_summary": summary, "episode_skill": skill})
    got = parse_skill(text)
    ok = len(skill.split()) >= 5
    assert got.ok == ok
    if ok:
        assert (got.summary, got.skill) == (summary.strip(), skill.strip())


# ----------------------------------------------------------------------------------------------
# H(h, s)

BLOCK = ("## Episode-level skill\nUse the following skill to guide your decisions in this "
         "episode.\n" + SKILL)


def test_insert_after_task_line():
    prompt = ("You are an expert agent in a household. Your task is to: put a clean mug on the desk.\n"
              "Prior to this step, you took 2 steps.\n"
              "Current observation: You see a desk.\n"
              "Now think, then answer inside <action></action>.")
    expected = ("You are an expert agent in a household. Your task is to: put a clean mug on the desk.\n"
                "\n" + BLOCK + "\n\n"
                "Prior to this step, you took 2 steps.\n"
                "Current observation: You see a desk.\n"
                "Now think, then answer inside <action></action>.")
    assert insert_skill(prompt, SKILL) == expected


def test_insert_after_question_and_goal_lines_first_match_wins():
    prompt = "Answer the question.\nYour question: who wrote Hamlet?\nYour question: ignored\nGo."
    assert insert_skill(prompt, SKILL) == (
        "Answer the question.\nYour question: who wrote Hamlet?\n\n" + BLOCK +
        "\n\nYour question: ignored\nGo.")
    prompt = "Shop.\n  Your goal is to buy red shoes\nSearch now."
    assert insert_skill(prompt, SKILL) == (
        "Shop.\n  Your goal is to buy red shoes\n\n" + BLOCK + "\n\nSearch now.")
    # task line last: block at the end, followed by the empty line
    assert insert_skill("Intro\nYour task is to: x", SKILL) == (
        "Intro\nYour task is to: x\n\n" + BLOCK + "\n")


def test_insert_before_final_instruction_line():
    prompt = "Observation: a room.\nHistory: none.\n\nRespond with <action>cmd</action>.\n\n"
    assert insert_skill(prompt, SKILL) == (
        "Observation: a room.\nHistory: none.\n\n\n" + BLOCK +
        "\n\nRespond with <action>cmd</action>.\n\n")
    assert insert_skill("Respond now.", SKILL) == BLOCK + "\n\nRespond now."


def test_insert_at_end_of_blank_prompt_and_bad_skill():
    assert insert_skill("", SKILL) == BLOCK
    assert insert_skill("\n \n", SKILL) == "\n \n" + BLOCK
    with pytest.raises(ValueError, match="empty"):
        insert_skill("Your task is to: x", "   ")


# ----------------------------------------------------------------------------------------------
# x_tau


def make_traj(won: bool, n_steps: int = 3, obs_len: int = 0) -> Trajectory:
    steps = []
    for i in range(n_steps):
        steps.append(StepSample(
            prompt_ids=[1, 2], response_ids=[3], response_logprobs=[-0.5],
            response_text=f"<think>plan {i}</think><action>go to desk {i}</action>",
            prompt_text=f"prompt {i}",
            raw_observation=f"OBS-{i}: You are in room {i}." + "x" * obs_len,
            valid=(i != 1), reward=3.75 if i == n_steps - 1 else 0.0,
            penalty=0.0 if i != 1 else 0.125))
    return Trajectory(task_id="t1", group_id=0, traj_id="t1-0",
                      task_description="put a clean mug on the desk", steps=steps,
                      episode_reward=3.75 if won else 0.0, won=won,
                      final_observation="You won!" if won else "Nothing happens.")


def test_analyzer_prompt_contents():
    traj = make_traj(won=True)
    text = build_analyzer_prompt(traj)
    assert "put a clean mug on the desk" in text
    assert "SUCCESS" in text and "workflow" in text and "avoidance" not in text
    pos = 0
    for i, step in enumerate(traj.steps):
        block = (f"### Step {i + 1}\nObservation:\n{step.raw_observation}\nAgent response:\n"
                 f"{step.response_text}\nAction valid: " + ("yes" if i != 1 else "no"))
        found = text.find(block, pos)
        assert found > pos, f"step {i + 1} block missing or out of order"
        pos = found
    assert "You won!" in text
    # each step's reward r_t (and the penalty where charged), the final reward R(tau) in the header
    rewards = [line for line in text.split("\n") if line.startswith("Reward: ")]
    assert rewards == ["Reward: 0", "Reward: 0, invalid-action penalty 0.125", "Reward: 3.75"]
    assert "## Outcome\nSUCCESS: the agent completed the task.\nFinal reward: 3.75\n" in text
    assert '"episode_summary"' in text and '"episode_skill"' in text and "ONE JSON object" in text
    fail = build_analyzer_prompt(make_traj(won=False))
    assert "FAILURE" in fail and "avoidance rule" in fail and "workflow" not in fail
    # the threshold overrides the won flag
    assert "FAILURE" in build_analyzer_prompt(traj, success_threshold=10.0)


def test_webshop_partial_score_reaches_the_analyzer():
    """A WebShop episode bought a product matching 0.625 of the goal: reward 0 (not a full match),
    but x_tau shows the task score, also when the budget cuts the trajectory."""
    traj = make_traj(won=False, n_steps=8, obs_len=1000)
    traj.info["score"] = 0.625
    for budget in (None, 3000):
        text = build_analyzer_prompt(traj, max_chars=budget)
        assert "## Outcome\nFAILURE: the agent did not complete the task.\nFinal reward: 0 (task score 0.625 of 1)" \
            in text


def test_analyzer_prompt_budget_cuts_the_middle_steps_first():
    """Over budget, whole steps go from the middle outwards (4, then 5, 3, 6, ... of 8, counted
    from 0); the header, the first and the last step stay; then observations, then responses."""
    traj = make_traj(won=False, n_steps=8, obs_len=1000)
    full, cut = render_analyzer_prompt(traj, max_chars=None)
    assert not cut and full == build_analyzer_prompt(traj, max_chars=None)
    text, cut = render_analyzer_prompt(traj, max_chars=len(full) - 2500)
    assert cut and len(text) <= len(full) - 2500
    kept = [f"### Step {i + 1}\n" in text for i in range(8)]
    # each step block is ~1.1k characters and the note ~40: two blocks save ~2.18k < 2.5k, so
    # three go (indices 3, 4, 5; 1-based 4-6), every observation and response of the rest stays
    assert kept == [True, True, True, False, False, False, True, True]
    assert "[steps 4-6 omitted to save space]" in text and text.count("x" * 1000) == 5
    # header and footer (final observation, instruction) untouched
    assert text.startswith(full[:full.index("### Step 1")]) and text.endswith(full[full.index("## Final observation"):])
    tiny, cut = render_analyzer_prompt(traj, max_chars=1500)
    assert cut and "### Step 1\n" in tiny and "### Step 8\n" in tiny and "[steps 2-7 omitted" in tiny
    assert "OBS-" not in tiny and traj.steps[-1].response_text[-40:] in tiny
    assert [middle_out(8, k) for k in range(7)] == [(4, 4), (4, 5), (3, 5), (3, 6), (2, 6), (2, 7), (1, 7)]
    assert middle_out(2, 0) == (1, 1) and middle_out(1, 0) == (0, 0)


# ----------------------------------------------------------------------------------------------
# annotation and records


def test_annotate_repairs_then_gives_up():
    good = json.dumps({"episode_summary": SUMMARY, "episode_skill": SKILL})
    seen = []

    def chat(messages):
        seen.append(messages)
        return ["not json", "{broken", good][len(seen) - 1]

    parse, answers = annotate("X_TAU", chat)
    assert parse.ok and answers == ["not json", "{broken", good]
    assert [m["role"] for m in seen[2]] == ["user", "assistant", "user", "assistant", "user"]
    assert seen[2][2]["content"] == REPAIR_PROMPT and seen[2][3]["content"] == "{broken"
    parse, answers = annotate("X_TAU", lambda m: "still not json", max_repairs=2)
    assert not parse.ok and len(answers) == 3


def test_skill_record_round_trip(tmp_path):
    traj = make_traj(won=True)
    prompt = build_analyzer_prompt(traj)
    parse = parse_skill("```json\n{'episode_summary': 'Caf\u00e9 run', 'episode_skill': '" + SKILL + "',}\n```")
    rec = SkillRecord.from_parse(traj, prompt, parse)
    assert json.loads(rec.answer) == {"episode_summary": "Caf\u00e9 run", "episode_skill": SKILL}
    assert (rec.traj_id, rec.outcome, rec.task_id) == ("t1-0", "success", "t1")
    path = tmp_path / "sft.jsonl"
    assert write_skill_records(path, [rec, rec]) == 2
    assert read_skill_records(path) == [rec, rec]
    with pytest.raises(ValueError, match="no valid skill"):
        SkillRecord.from_parse(traj, prompt, parse_skill("nope"))
    path.write_text(rec.to_json() + "\n\n" + json.dumps({"prompt": "p", "answer": "a"}) + "\n",
                    encoding="utf-8")
    with pytest.raises(ValueError, match=r"sft.jsonl:3: not a skill record: .*lacks field"):
        read_skill_records(path)


def test_fixed_texts_are_the_sentences_prompts_use():
    traj = make_traj(won=False, n_steps=2, obs_len=400)
    prompt = build_analyzer_prompt(traj, max_chars=200)
    shown = [t for t in FIXED_TEXTS if t in prompt]
    assert "[observation omitted to save space]" in shown and any(t.startswith("The agent FAILED") for t in shown)
    assert SKILL_HEADING in FIXED_TEXTS and REPAIR_PROMPT in FIXED_TEXTS
    assert all(isinstance(t, str) and t.strip() for t in FIXED_TEXTS)
