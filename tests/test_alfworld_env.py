"""ALFWorld environment on the real TextWorld engine and the real json_2.1.1 games.

References that do not come from the code under test: the walkthrough stored in each game
file and the engine's own goal check (win or not), ALFRED's `task_type` field in
traj_data.json (when ``$ALFWORLD_DATA`` holds it), the per-type game counts of the data's
SOURCES.md, hand-written strings.

The games are the subset vendored in envs/alfworld/data (18 per split, always present); the
tests of the full release read ``$ALFWORLD_DATA`` (.ci/run points it at the development data) and
skip, saying so, without it.
"""

from __future__ import annotations

import collections
import functools
import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from seed_jax.envs.alfworld import (
    ALFWORLD_SPEC,
    AlfWorldEnv,
    extract_split,
    list_games,
    load_walkthrough,
    make_alfworld_env,
    resolve_data_dir,
)
from seed_jax.envs.alfworld.games import vendored_data_dir
from seed_jax.envs.alfworld.prompt import ALFWORLD_PROMPT
from seed_jax.envs.alfworld.text import extract_task, strip_banner
from seed_jax.envs.base import StepRecord
from seed_jax.envs.prompt import without_task_line

DATA = vendored_data_dir().resolve()
FULL = Path(os.environ["ALFWORLD_DATA"]).resolve() if os.environ.get("ALFWORLD_DATA") else None
needs_archives = pytest.mark.skipif(FULL is None or not (FULL / "archives").is_dir(),
                                    reason="needs $ALFWORLD_DATA with the split archives (archives/*.tar.xz, "
                                           "the development data's layout); not set or absent")

SPLITS = ("train", "valid_seen", "valid_unseen")
TYPES = ("pick", "look", "clean", "heat", "cool", "pick_two")
# ALFRED's task_type (traj_data.json) -> short type, written out independently of the package.
ALFRED_TYPE = {
    "pick_and_place_simple": "pick",
    "look_at_obj_in_light": "look",
    "pick_clean_then_place_in_recep": "clean",
    "pick_heat_then_place_in_recep": "heat",
    "pick_cool_then_place_in_recep": "cool",
    "pick_two_obj_and_place": "pick_two",
}


def act(cmd: str) -> str:
    return f"<think>I follow the plan.</think><action>{cmd}</action>"


def one_per_type(split: str = "valid_seen") -> dict[str, dict]:
    out: dict[str, dict] = {}
    for task in list_games(DATA, split):
        out.setdefault(task["task_type"], task)
    return out


@pytest.fixture(scope="module")
def env():
    e = make_alfworld_env(data_dir=DATA)
    yield e
    e.close()


def play_walkthrough(env: AlfWorldEnv, task: dict) -> tuple[float, bool, dict, int]:
    env.reset(task)
    total, done, info, n = 0.0, False, {}, 0
    for cmd in load_walkthrough(task["game_file"]):
        assert not done, "episode ended before the walkthrough did"
        _, reward, done, info = env.step(act(cmd))
        total += reward
        n += 1
    return total, done, info, n


# ---------------------------------------------------------------- games and data


def test_games_per_split_and_task_types_match_alfred():
    seen_ids = set()
    for split in SPLITS:
        tasks = list_games(DATA, split)
        assert collections.Counter(t["task_type"] for t in tasks) == dict.fromkeys(TYPES, 3)
        for t in tasks:
            assert set(t) == {"task_id", "game_file", "task_type", "split"}
            assert json.loads(json.dumps(t)) == t
            assert t["split"] == split and t["task_id"].startswith(split + "/")
            assert Path(t["game_file"]).is_file() and t["game_file"].endswith("game.tw-pddl")
            traj_file = FULL / "json_2.1.1" / t["task_id"] / "traj_data.json" if FULL else None
            if traj_file is not None and traj_file.is_file():  # ALFRED's own label of the same trial
                traj = json.loads(traj_file.read_text())
                assert ALFRED_TYPE[traj["task_type"]] == t["task_type"], t["task_id"]
            seen_ids.add(t["task_id"])
    assert len(seen_ids) == 54


def test_split_aliases_filters_and_errors(monkeypatch):
    assert list_games(DATA, "seen") == list_games(DATA, "valid_seen")
    assert list_games(DATA, "unseen") == list_games(DATA, "valid_unseen")
    heat = list_games(DATA, "train", task_types=("heat",))
    assert len(heat) == 3 and all("pick_heat_then_place_in_recep" in t["task_id"] for t in heat)
    with pytest.raises(ValueError, match="unknown ALFWorld split"):
        list_games(DATA, "test")
    with pytest.raises(ValueError, match="unknown task types"):
        list_games(DATA, "train", task_types=("slice",))
    monkeypatch.delenv("ALFWORLD_DATA", raising=False)
    with pytest.raises(ValueError, match="ALFWORLD_DATA"):
        resolve_data_dir(None)
    with pytest.raises(FileNotFoundError):
        resolve_data_dir(DATA / "nope")
    monkeypatch.setenv("ALFWORLD_DATA", str(DATA))
    assert resolve_data_dir(None) == DATA
    assert list_games(None, "train") == list_games(DATA, "train")


@needs_archives
def test_extract_full_split_counts_match_sources(tmp_path):
    # SOURCES.md: valid_unseen has 134 games, pick/look/clean/heat/cool/pick_two = 24/18/31/23/21/17.
    extract_split(FULL, "valid_unseen", tmp_path)
    tasks = list_games(tmp_path, "valid_unseen")
    counts = collections.Counter(t["task_type"] for t in tasks)
    assert len(tasks) == 134
    assert counts == {"pick": 24, "look": 18, "clean": 31, "heat": 23, "cool": 21, "pick_two": 17}
    plain = {t["task_id"] for t in list_games(DATA, "valid_unseen")}
    assert plain <= {t["task_id"] for t in tasks}


def test_import_needs_neither_jax_nor_engine():
    code = (
        "import sys, seed_jax.envs.alfworld as a; "
        "assert 'jax' not in sys.modules and 'textworld' not in sys.modules, sorted(sys.modules); "
        "print(len(a.list_games(sys.argv[1], 'train')))"
    )
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, "-c", code, str(DATA)], cwd=root, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "18"


# ---------------------------------------------------------------- text and prompt


def test_banner_and_task_helpers():
    raw = (
        "-= Welcome to TextWorld, ALFRED! =-\n\nYou are in the middle of a room. You see a desk 1.\n\n"
        "Your task is to: put a clean mug in desk."
    )
    obs = strip_banner(raw)
    assert obs == "You are in the middle of a room. You see a desk 1.\n\nYour task is to: put a clean mug in desk."
    assert extract_task(obs) == "put a clean mug in desk."
    assert without_task_line(obs) == "You are in the middle of a room. You see a desk 1."
    assert strip_banner("  Nothing happens. ") == "Nothing happens."
    with pytest.raises(ValueError, match="Your task is to"):
        extract_task("You arrive at desk 1.")


def test_prompt_template_exact_text():
    history = [StepRecord("obs A\n\nYour task is to: do x.", "go to a 1"), StepRecord("obs B", "look"),
               StepRecord("obs C", "go to c 1")]
    text = ALFWORLD_PROMPT.build("do x.", history, "obs D", ["go to a 1", "look"], history_window=2)
    expected = (
        "You are an expert agent operating in the ALFRED Embodied Environment.\n"
        "Your task is to: do x.\n"
        "Prior to this step, you have already taken 3 step(s). Below are the most recent 2 observations "
        "and the corresponding actions you took:\n"
        "[Observation 2: 'obs B', Action 2: 'look']\n"
        "[Observation 3: 'obs C', Action 3: 'go to c 1']\n"
        "You are now at step 4 and your current observation is: obs D\n"
        "Your admissible actions of the current situation are: ['go to a 1'\n 'look'].\n"
        "\n"
        "Now it's your turn to take an action.\n"
        "You should first reason step-by-step about the current situation. This reasoning process MUST be "
        "enclosed within <think> </think> tags.\n"
        "Once you've finished your reasoning, you should choose an admissible action for current step and "
        "present it within <action> </action> tags."
    )
    assert text == expected
    first = ALFWORLD_PROMPT.build("do x.", [], "obs A\n\nYour task is to: do x.", ["look"], history_window=5)
    assert "Prior to this step" not in first
    assert [ln for ln in first.splitlines() if "Your task is to" in ln] == ["Your task is to: do x."]
    assert "You are now at step 1 and your current observation is: obs A\n" in first


# ---------------------------------------------------------------- real games


@pytest.mark.parametrize("task_type", TYPES)
def test_walkthrough_wins_each_task_type(env, task_type):
    task = one_per_type()[task_type]
    total, done, info, n = play_walkthrough(env, task)
    assert done and info["won"] and info["valid"]
    assert total == pytest.approx(10.0)
    assert info["done_reason"] == "won" and info["step"] == n
    assert info["task_type"] == task_type and info["task_id"] == task["task_id"]


@pytest.mark.slow
@pytest.mark.parametrize("split", SPLITS)
def test_walkthrough_wins_every_plain_game(env, split):
    for task in list_games(DATA, split):
        total, done, info, _ = play_walkthrough(env, task)
        assert done and info["won"] and total == pytest.approx(10.0), task["task_id"]


def test_reset_observation_task_and_prompt(env):
    task = one_per_type()["look"]
    obs, info = env.reset(task)
    assert "Welcome to TextWorld" not in obs and obs.startswith("You are in the middle of a room.")
    game = json.loads(Path(task["game_file"]).read_text())
    task_line = [ln for ln in obs.splitlines() if ln.startswith("Your task is to: ")]
    assert len(task_line) == 1 and env.task_description == task_line[0][len("Your task is to: "):]
    assert info["valid"] and not info["won"] and info["step"] == 0 and info["raw_observation"] == obs
    assert "help" not in info["admissible_commands"] and "look" in info["admissible_commands"]
    prompt = env.build_prompt()
    lines = prompt.splitlines()
    assert lines[0] == "You are an expert agent operating in the ALFRED Embodied Environment."
    assert lines[1] == f"Your task is to: {env.task_description}"
    assert sum("Your task is to" in ln for ln in lines) == 1
    assert all(f"'{c}'" in prompt for c in info["admissible_commands"])
    assert prompt.rstrip().endswith("present it within <action> </action> tags.")
    assert game["walkthrough"][0] in info["admissible_commands"]


def test_wrong_sequence_never_wins_and_stops_at_max_steps(env):
    task = one_per_type()["heat"]
    walk = load_walkthrough(task["game_file"])
    env.reset(task)
    rewards, dones = [], []
    commands = walk[:-1] + ["look"] * (ALFWORLD_SPEC.max_steps - len(walk) + 1)
    for cmd in commands:
        obs, reward, done, info = env.step(act(cmd))
        rewards.append(reward)
        dones.append(done)
        assert info["valid"] and not info["won"]
    assert len(commands) == 30 and rewards == [0.0] * 30
    assert dones == [False] * 29 + [True]
    assert info["done_reason"] == "max_steps" and info["step"] == 30
    with pytest.raises(RuntimeError, match="finished episode"):
        env.step(act("look"))
    prompt = env.build_prompt()
    assert "already taken 30 step(s)" in prompt and "[Observation 26:" in prompt and "[Observation 25:" not in prompt


def test_inadmissible_and_uppercase_commands_reach_the_engine(env):
    task = one_per_type()["pick"]
    walk = load_walkthrough(task["game_file"])
    env.reset(task)
    before = env.admissible_commands
    obs, reward, done, info = env.step(act("fly to the moon"))
    assert info["valid"] and obs == "Nothing happens." and reward == 0.0 and not done
    assert info["action"] == "fly to the moon" and info["admissible_commands"] == before
    obs, reward, done, info = env.step(act(walk[0].upper()))
    assert info["valid"] and info["action"] == walk[0] and obs != "Nothing happens."
    assert info["admissible_commands"] != before


INVALID = [
    ("{cmd}", "missing"),  # the right command, but no tags
    ("<think>x</think><action>{cmd}</action><action>look</action>", "duplicated"),
    ("<think>x</think><action>{cmd}</answer>", "unclosed"),  # mixed/mismatched tags
    ("<think>x</think><action>{cmd} 现在</action>", "cjk"),
    ("<think>x</think><action>  </action>", "empty"),
]


def test_invalid_responses_penalised_and_leave_game_unchanged(env):
    task = one_per_type()["pick_two"]
    walk = load_walkthrough(task["game_file"])
    obs, info = env.reset(task)
    engine_obs, n_invalid, total = obs, 0, 0.0
    for i, cmd in enumerate(walk):
        template, reason = INVALID[i % len(INVALID)]
        before = env.admissible_commands
        bad_obs, reward, done, bad = env.step(template.format(cmd=cmd))
        n_invalid += 1
        total += reward
        assert reward == pytest.approx(-0.1) and not done
        assert not bad["valid"] and bad["reason"] == reason and bad["action"] == ""
        assert bad["admissible_commands"] == before
        assert bad_obs.endswith("\n" + engine_obs) and "invalid" in bad_obs.splitlines()[0]
        assert bad["raw_observation"] == bad_obs
        engine_obs, reward, done, info = env.step(act(cmd))
        total += reward
        assert info["valid"]
    assert done and info["won"] and info["step"] == 2 * len(walk)
    assert total == pytest.approx(10.0 - 0.1 * n_invalid)
    prompt = env.build_prompt()
    assert "(invalid response, no action taken)" in prompt


def test_step_before_reset_and_bad_task():
    e = AlfWorldEnv()
    with pytest.raises(RuntimeError, match="before reset"):
        e.step(act("look"))
    with pytest.raises(TypeError, match="game_file"):
        e.reset({"task_id": "x"})


def test_factory_pickles_and_resolves_relative_game_files(tmp_path):
    factory = pickle.loads(pickle.dumps(functools.partial(make_alfworld_env, data_dir=str(DATA), max_steps=2)))
    e = factory()
    assert isinstance(e, AlfWorldEnv) and e.spec.max_steps == 2 and e.spec.history_window == 5
    task = one_per_type("train")["look"]
    rel = dict(task, game_file=os.path.relpath(task["game_file"], DATA))
    obs, info = e.reset(rel)
    assert info["gamefile"] == task["game_file"] and info["task_type"] == "look"
    e.step(act("look"))
    _, _, done, info = e.step(act("look"))
    assert done and info["done_reason"] == "max_steps"
    e.close()
