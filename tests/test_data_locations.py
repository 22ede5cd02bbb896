"""Where ALFWorld and WebShop data come from, and the preflight that stops a run before any model
loads (issue 33 items 1 and 8, issue 34 item 1).

References independent of the code under test: the archive's own member list (`tarfile`), the
sha256 that envs/webshop/data/SOURCES.md publishes for the official ``items_ins_v2_1000.json``,
the official ALFWorld game counts (3553 / 140 / 134), hand-made model directories and URLs, and
the launcher's exit status and stderr.
"""

from __future__ import annotations

import collections
import gzip
import hashlib
import importlib
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import ml_collections
import pytest

from seed_jax.envs.alfworld.games import (
    VENDORED_ARCHIVE,
    find_data_dir,
    list_games,
    load_walkthrough,
    vendored_data_dir,
)
from seed_jax.envs.webshop.data import VENDORED_ATTRIBUTES, find_webshop_data
from seed_jax.pipeline.environments import describe_data, make_benchmark
from seed_jax.pipeline.summary import describe_run
from seed_jax.pipeline.validate import ConfigValueError, check_inputs
from seed_jax.report import run_data
from tests.conftest import official_webshop_dir

REPO = Path(__file__).resolve().parents[1]
OFFICIAL_ATTRIBUTES_SHA256 = "f88a36314a397b53b3d9c3fa5878e5f7b26d35019a51ec83fbedeca61a948f6f"
TYPES = ("pick", "look", "clean", "heat", "cool", "pick_two")


def config(env: str, preset: str):
    c = importlib.import_module(f"seed_jax.configs.{env}").get_config(preset)
    if preset == "paper":
        c.stage1.analyzer = "self"  # the paper's annotator endpoint is not what these tests are about
    return c


@pytest.fixture
def no_data_env(monkeypatch, tmp_path):
    """No user data variable set; the cache in a fresh folder."""
    monkeypatch.delenv("ALFWORLD_DATA", raising=False)
    monkeypatch.delenv("SEED_WEBSHOP_DATA", raising=False)
    monkeypatch.setenv("SEED_JAX_CACHE", str(tmp_path / "cache"))
    return tmp_path


def model_dir(root: Path, weights: bool = True, tokenizer: bool = True) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.json").write_text("{}")
    if weights:
        (root / "model.safetensors").write_bytes(b"")
    if tokenizer:
        (root / "tokenizer.json").write_text("{}")
    return root


# ------------------------------------------------------------------ ALFWorld


def test_vendored_alfworld_subset_unpacks_once_into_the_cache(no_data_env):
    with tarfile.open(VENDORED_ARCHIVE, "r:xz") as tar:
        games = sorted(m.name for m in tar.getmembers() if m.name.endswith("/game.tw-pddl"))
    assert len(games) == 54 and VENDORED_ARCHIVE.stat().st_size < 200_000
    path, where = find_data_dir(None, vendored=True)
    assert path.is_relative_to(no_data_env / "cache" / "alfworld") and "vendored" in where
    listed = []
    for split in ("train", "valid_seen", "valid_unseen"):
        tasks = list_games(path, split)
        assert collections.Counter(t["task_type"] for t in tasks) == dict.fromkeys(TYPES, 3)
        assert all(load_walkthrough(t["game_file"]) for t in tasks)  # real games, expert plan inside
        listed += [f"json_2.1.1/{t['task_id']}/game.tw-pddl" for t in tasks]
    assert sorted(listed) == games
    stamp = (path / "json_2.1.1").stat().st_mtime_ns
    assert vendored_data_dir() == path and (path / "json_2.1.1").stat().st_mtime_ns == stamp  # not unpacked again


def test_alfworld_data_dir_then_env_var_then_subset(no_data_env, monkeypatch):
    mine, theirs = no_data_env / "mine", no_data_env / "theirs"
    monkeypatch.setenv("ALFWORLD_DATA", str(theirs))
    assert find_data_dir(str(mine), vendored=True) == (mine, "env.data_dir")
    assert find_data_dir(None, vendored=True) == (theirs, "$ALFWORLD_DATA")
    monkeypatch.delenv("ALFWORLD_DATA")
    assert find_data_dir(None, vendored=False)[0] is None


def test_alfworld_packages_own_default_is_not_a_user_setting(no_data_env, monkeypatch):
    """`import alfworld` (the engine, in the middle of a run) sets $ALFWORLD_DATA to its own empty
    ~/.cache/alfworld; the tiny pipeline's eval then found no games there (seen in
    tests/test_pipeline.py before this was handled)."""
    from seed_jax.envs.alfworld import games

    fake_default = no_data_env / "alfworld_default"
    fake_default.mkdir()
    monkeypatch.setattr(games, "ALFWORLD_PACKAGE_DEFAULT", fake_default)
    monkeypatch.setenv("ALFWORLD_DATA", str(fake_default))
    path, where = find_data_dir(None, vendored=True)
    assert "vendored" in where and len(list_games(path, "train")) == 18
    (fake_default / "json_2.1.1").mkdir()  # a user who put games there: read them
    assert find_data_dir(None, vendored=True) == (fake_default, "$ALFWORLD_DATA")


@pytest.mark.parametrize("preset", ["tiny", "local"])
def test_alfworld_small_presets_run_on_the_vendored_subset(no_data_env, preset):
    """Old code: the tasks came from <repo>/../shared/data/alfworld (absent beside a plain clone)."""
    c = config("alfworld", preset)
    check_inputs(c, preset)
    bench = make_benchmark(c.env)
    assert len(bench.tasks("train")) == 18 and len(bench.tasks("valid_unseen")) == 18
    assert "vendored subset" in describe_data(c.env)


def test_alfworld_paper_refuses_without_a_directory(no_data_env):
    c = config("alfworld", "paper")
    c.model.path = str(model_dir(no_data_env / "model"))
    with pytest.raises(ConfigValueError) as e:
        check_inputs(c, "paper")
    msg = str(e.value)
    assert "\n" not in msg and "$ALFWORLD_DATA" in msg and "alfworld-download" in msg
    assert "json_2.1.1/{train,valid_seen,valid_unseen}/<task>/<trial>/game.tw-pddl" in msg


def test_alfworld_paper_refuses_the_subset_and_takes_the_full_counts(no_data_env, monkeypatch):
    c = config("alfworld", "paper")
    c.model.path = str(model_dir(no_data_env / "model"))
    monkeypatch.setenv("ALFWORLD_DATA", str(vendored_data_dir()))
    with pytest.raises(ConfigValueError, match=r"holds a subset \(train 18 of 3553, valid_seen 18 of 140, "
                                               r"valid_unseen 18 of 134 games\)"):
        check_inputs(c, "paper")
    full = no_data_env / "full"
    for split, n in {"train": 3553, "valid_seen": 140, "valid_unseen": 134}.items():
        for i in range(n):
            game = full / "json_2.1.1" / split / f"pick_and_place_simple-Mug-None-Desk-{i}" / "trial_T0" / "game.tw-pddl"
            game.parent.mkdir(parents=True)
            game.write_text("")
    monkeypatch.setenv("ALFWORLD_DATA", str(full))
    check_inputs(c, "paper")
    c.env.data_dir = str(no_data_env / "nowhere")  # a directory named and absent: never a fallback
    with pytest.raises(ConfigValueError, match="config.env.data_dir"):
        check_inputs(c, "paper")


# ------------------------------------------------------------------ WebShop


def test_vendored_webshop_attributes_are_the_official_file():
    with gzip.open(VENDORED_ATTRIBUTES, "rb") as f:
        raw = f.read()
    assert hashlib.sha256(raw).hexdigest() == OFFICIAL_ATTRIBUTES_SHA256


def test_webshop_small_presets_run_on_the_generated_catalog_named_as_such(no_data_env, tmp_path):
    """Old code: the attributes came from <repo>/../shared/data/webshop, and nothing said 'generated'."""
    c = config("webshop", "tiny")
    check_inputs(c, "tiny")
    assert len(make_benchmark(c.env).tasks("test")) == 500
    line = describe_data(c.env)
    assert "GENERATED catalog" in line and line.endswith("synthetic goals")
    summary = describe_run(c, {}, tmp_path / "run", "tiny")
    assert summary.splitlines()[1] == f"Data: {line}"
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(c.to_json())
    assert run_data(run) == line  # the report's Data: line


def test_webshop_paper_lists_what_is_missing(no_data_env):
    c = config("webshop", "paper")
    c.model.path = str(model_dir(no_data_env / "model"))
    with pytest.raises(ConfigValueError) as e:
        check_inputs(c, "paper")
    msg = str(e.value)
    assert "\n" not in msg
    for what in ("products (items_shuffle)", "attributes (items_ins_v2)", "human instructions (items_human_ins)",
                 "<dir>/items_shuffle_1000.json (or items_shuffle.json)", "$SEED_WEBSHOP_DATA"):
        assert what in msg, what
    partial = no_data_env / "partial"
    partial.mkdir()
    (partial / "items_ins_v2_1000.json").write_text("{}")
    c.env.data_dir = str(partial)
    with pytest.raises(ConfigValueError) as e:
        check_inputs(c, "paper")
    assert "products (items_shuffle), human instructions (items_human_ins)" in str(e.value)
    assert "attributes" not in str(e.value).split(";")[0]


def test_webshop_paper_runs_on_the_official_files_with_human_goals(no_data_env, monkeypatch):
    c = config("webshop", "paper")
    c.model.path = str(model_dir(no_data_env / "model"))
    official = official_webshop_dir(no_data_env / "webshop")
    monkeypatch.setenv("SEED_WEBSHOP_DATA", str(official))
    check_inputs(c, "paper")
    line = describe_data(c.env)
    assert "official catalog" in line and "GENERATED" not in line and "human goals" in line
    c.env.human_goals = False
    with pytest.raises(ConfigValueError, match="config.env.human_goals"):
        check_inputs(c, "paper")


def test_webshop_env_var_named_and_absent_is_an_error(no_data_env, monkeypatch):
    monkeypatch.setenv("SEED_WEBSHOP_DATA", str(no_data_env / "nope"))
    data, missing = find_webshop_data(vendored=True)
    assert data is None and "does not exist" in missing and "$SEED_WEBSHOP_DATA" in missing


# ------------------------------------------------------------------ preflight: model files and URLs


def test_model_directory_without_weights_or_tokenizer(tmp_path):
    c = config("search", "tiny")
    c.model.path = str(model_dir(tmp_path / "noweights", weights=False))
    with pytest.raises(ConfigValueError, match=r"config.model.path: .* no weights \(\*.safetensors"):
        check_inputs(c, "tiny")
    c.model.path = str(model_dir(tmp_path / "notok", tokenizer=False))
    with pytest.raises(ConfigValueError, match="config.model.path: .* has no tokenizer files"):
        check_inputs(c, "tiny")
    sharded = model_dir(tmp_path / "sharded", weights=False)
    (sharded / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}))
    (sharded / "model-00001-of-00002.safetensors").write_bytes(b"")
    c.model.path = str(sharded)
    with pytest.raises(ConfigValueError, match="missing: model-00002-of-00002.safetensors"):
        check_inputs(c, "tiny")
    c.model.path = str(model_dir(tmp_path / "good"))
    check_inputs(c, "tiny")


@pytest.mark.parametrize("key, url", [
    ("env.retriever_url", "127.0.0.1:8000/retrieve"),  # no scheme
    ("env.retriever_url", "http://127.0.0.1:80x0/retrieve"),  # port not a number
    ("env.retriever_url", "http:///retrieve"),  # no host
    ("stage1.openai_base_url", "htp://api.example.com/v1"),
])
def test_malformed_urls(key, url):
    c = config("search", "tiny")
    c.env.retriever = "http"
    c.env.retriever_url = "http://127.0.0.1:8000/retrieve"
    section, name = key.split(".")
    c[section][name] = url
    with pytest.raises(ConfigValueError, match=f"config.{key}: "):
        check_inputs(c, "tiny")
    c[section][name] = "http://127.0.0.1:8000/retrieve"
    check_inputs(c, "tiny")


# ------------------------------------------------------------------ the launcher, the CI, the sources


def _launch(*args, env=None):
    return subprocess.run([sys.executable, "-m", "seed_jax.launch", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=300, env=env)


def test_launch_help_exits_0():
    out = _launch("--help")
    assert out.returncode == 0, out.stderr
    assert "--config" in out.stdout and "--dry_run" in out.stdout


@pytest.mark.parametrize("env_name", ["alfworld", "webshop"])
def test_launch_paper_without_data_one_line_exit_2(tmp_path, env_name):
    env = {k: v for k, v in os.environ.items() if k not in ("ALFWORLD_DATA", "SEED_WEBSHOP_DATA")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    out = _launch(f"--config=configs/{env_name}.py:paper", f"--config.model.path={model_dir(tmp_path / 'm')}",
                  "--dry_run", f"--workdir={tmp_path / 'run'}", "--plan=no", env=env)
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: config.env.data_dir: ") and "Traceback" not in out.stderr
    assert not (tmp_path / "run").exists()


def test_ci_points_the_full_data_tests_at_shared_data():
    ci = (REPO / ".ci" / "run").read_text()
    assert 'export ALFWORLD_DATA="$SHARED/alfworld"' in ci and 'export SEED_WEBSHOP_DATA="$SHARED/webshop"' in ci


def test_nothing_reads_shared_data_at_run_time():
    """Only documentation and .ci/run may name ../shared/data; code, configs and tests use the
    user's variables (``$ALFWORLD_DATA``, ``$SEED_WEBSHOP_DATA``) or the vendored data."""
    hits = []
    for top in ("seed_jax", "envs", "configs", "launch", "tests"):
        for f in (REPO / top).rglob("*.py"):
            if f.name == Path(__file__).name:
                continue
            text = f.read_text(encoding="utf-8")
            if '"shared" / "data"' in text or "shared/data/alfworld" in text or "shared/data/webshop" in text:
                hits.append(str(f.relative_to(REPO)))
    assert hits == []


def test_config_dict_round_trip_keeps_the_data_keys():
    c = config("webshop", "paper")
    env = ml_collections.ConfigDict(json.loads(c.to_json())["env"])
    assert env.vendored_data is False and env.human_goals is True
