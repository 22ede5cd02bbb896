"""The launcher's guards: relaunch checks, input checks before any work, one-line errors, --help, --dry_run."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from seed_jax import launch
from seed_jax.envs.search.corpus import Passage
from seed_jax.envs.search.server import start_background_server
from seed_jax.pipeline.methods import METHODS
from seed_jax.pipeline.run import ConfigChangedError, check_relaunch, stage_plan, write_config
from seed_jax.pipeline.validate import ConfigValueError, check_inputs, check_retriever, validate

pytestmark = pytest.mark.integration  # whole pipelines / subprocess launches: CONTRIBUTING.md tiers

REPO = Path(__file__).resolve().parents[1]
TINY = f"--config={REPO / 'configs' / 'search.py'}:tiny"


def _config(env: str = "search", preset: str = "tiny"):
    import importlib

    return importlib.import_module(f"seed_jax.configs.{env}").get_config(preset)


def _launch(*args, cwd=REPO, timeout=120):
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}
    t0 = time.time()
    r = subprocess.run([sys.executable, "-m", "seed_jax.launch", *args], cwd=cwd, env=env, capture_output=True,
                       text=True, timeout=timeout)
    return r, time.time() - t0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ------------------------------------------------------------------------------------ relaunch


def test_relaunch_with_changed_keys_is_refused_naming_them_and_force_accepts(tmp_path):
    write_config(_config(), tmp_path)  # as a first launch leaves it
    r, _ = _launch(TINY, f"--workdir={tmp_path}", "--config.train.lr=0.5", "--config.rl.epochs=2", "--dry_run")
    assert r.returncode == 2, r.stderr[-2000:]
    err = r.stderr.strip()
    assert "\n" not in err and "Traceback" not in err
    assert "train.lr: 0.0001 -> 0.5" in err and "rl.epochs: 1 -> 2" in err and "--force" in err
    # keys that do not change results pass, and so does --force (config.json rewritten on a real launch)
    r, _ = _launch(TINY, f"--workdir={tmp_path}", "--config.env.num_workers=2", "--stages=rl,eval", "--dry_run")
    assert r.returncode == 0, r.stderr[-2000:]
    r, _ = _launch(TINY, f"--workdir={tmp_path}", "--config.train.lr=0.5", "--force", "--dry_run")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "train.lr" in r.stdout and "forced" in r.stdout


def test_check_relaunch_lists_every_result_changing_key(tmp_path):
    old = _config()
    assert check_relaunch(old, tmp_path).old is None  # first launch
    write_config(old, tmp_path)
    same = check_relaunch(_config(), tmp_path)
    assert same.old is not None and same.changed == () and not same.forced
    new = _config()
    new.rl.num_updates = 5  # raised: allowed (RL continues)
    new.eval.checkpoint = str(tmp_path)  # does not change results
    assert check_relaunch(new, tmp_path).changed == ("eval.checkpoint", "rl.num_updates")
    new.rollout.top_p, new.model.path = 0.9, "/models/other"
    with pytest.raises(ConfigChangedError) as e:
        check_relaunch(new, tmp_path)
    assert "model.path: None -> '/models/other'" in str(e.value) and "rollout.top_p: 1.0 -> 0.9" in str(e.value)
    assert "num_updates" not in str(e.value) and "eval.checkpoint" not in str(e.value)
    lower = _config()
    lower.rl.num_updates = 1  # lowered: the updates made are not undone, so it is refused
    with pytest.raises(ConfigChangedError, match="rl.num_updates: 2 -> 1"):
        check_relaunch(lower, tmp_path)
    assert check_relaunch(new, tmp_path, force=True).forced


def test_force_keeps_the_replaced_config_and_logs_the_change_in_metrics_and_summary(tmp_path):
    """issue 33 item 9: --force on a run with 2 RL updates made keeps the old config in
    config.history.jsonl, writes "config changed: train.lr 0.0001 -> 0.0003 ... at update 3" into
    metrics.jsonl and summary.md; a second forced change appends, never rewrites."""
    from seed_jax.metrics import MetricsWriter
    from seed_jax.pipeline.run import read_config_history

    write_config(_config(), tmp_path)
    for stage, summary in [("collect", {}), ("annotate", {}), ("sft", {}), ("rl", {"num_updates": 2}), ("eval", {})]:
        (tmp_path / "stages").mkdir(exist_ok=True)
        (tmp_path / "stages" / f"{stage}.json").write_text(json.dumps(summary))
    new = _config()
    new.train.lr = 3e-4
    with pytest.raises(ConfigChangedError):
        launch.run_pipeline(new, tmp_path)  # refused without --force: nothing recorded
    assert read_config_history(tmp_path) == []
    launch.run_pipeline(new, tmp_path, force=True)  # every stage finished: nothing runs, no model loads
    assert json.loads((tmp_path / "config.json").read_text())["train"]["lr"] == 3e-4
    (rec,) = read_config_history(tmp_path)
    assert rec["replaced_config"]["train.lr"] == 1e-4 and rec["changed"] == {"train.lr": [1e-4, 3e-4]}
    assert rec["at_update"] == 3 and rec["forced"] is True
    line = "config changed (--force): train.lr 0.0001 -> 0.0003 at update 3"
    assert rec["event"] == line
    assert [r for r in MetricsWriter.read(tmp_path) if "event" in r] == [
        {"step": 3, "time": pytest.approx(rec["time"], abs=60), "event": line}]
    assert line in (tmp_path / "summary.md").read_text()
    newer = _config()
    newer.train.lr = 5e-4
    launch.run_pipeline(newer, tmp_path, force=True)
    first, second = read_config_history(tmp_path)
    assert first == rec and second["replaced_config"]["train.lr"] == 3e-4


def test_stage_plan_reopens_rl_when_num_updates_grew_and_redoes_eval(tmp_path):
    config = _config()
    for stage, summary in [("collect", {}), ("annotate", {}), ("sft", {}), ("rl", {"num_updates": 2}), ("eval", {})]:
        (tmp_path / "stages").mkdir(exist_ok=True)
        (tmp_path / "stages" / f"{stage}.json").write_text(json.dumps(summary))
    assert [p.action for p in stage_plan(config, tmp_path)] == ["skip"] * 5
    config.rl.num_updates = 3
    assert [p.action for p in stage_plan(config, tmp_path)] == ["skip", "skip", "skip", "reopen", "redo"]
    # an rl marker without the count: the old config.json says how many updates were made
    (tmp_path / "stages" / "rl.json").write_text("{}")
    assert stage_plan(config, tmp_path, {"rl.num_updates": 3})[3].action == "skip"
    assert stage_plan(config, tmp_path, {"rl.num_updates": 2})[3].action == "reopen"
    (tmp_path / "stages" / "sft.json").unlink()
    assert [p.action for p in stage_plan(config, tmp_path, {"rl.num_updates": 3})] == [
        "skip", "skip", "run", "redo", "redo"]


def test_raising_num_updates_continues_rl_from_its_checkpoint_and_redoes_eval(tmp_path):
    from seed_jax.metrics import MetricsWriter

    def config(n):
        c = _config()
        c.method, c.rl.num_updates, c.stages, c.eval.num_tasks = "seed_no_sft", n, "rl,eval", 1
        return c

    first = []
    launch.run_pipeline(config(1), tmp_path, rl_callbacks=[first.append])
    assert [r.update for r in first] == [1]  # update numbers count from 1
    (tmp_path / "eval" / "results.md").unlink()
    again = []
    assert launch.run_pipeline(config(1), tmp_path, rl_callbacks=[again.append])["rl"]["num_updates"] == 1
    assert again == [] and not (tmp_path / "eval" / "results.md").exists()  # nothing redone
    more = []
    out = launch.run_pipeline(config(2), tmp_path, rl_callbacks=[more.append])
    assert [r.update for r in more] == [2]  # continued: update 1 is not made again
    assert out["rl"]["num_updates"] == 2 and (tmp_path / "eval" / "results.md").exists()  # eval redone
    assert [r["step"] for r in MetricsWriter.read(tmp_path) if "train/loss" in r] == [1, 2]
    assert json.loads((tmp_path / "config.json").read_text())["rl"]["num_updates"] == 2


def test_default_workdir_carries_a_hash_of_the_overrides():
    c = _config("search", "local")
    assert launch.default_workdir(c, "local", {}) == Path("runs/search-local-seed")
    a = launch.default_workdir(c, "local", {"train.lr": 1e-5})
    b = launch.default_workdir(c, "local", {"train.lr": 2e-5})
    assert re.fullmatch(r"runs/search-local-seed-[0-9a-f]{6}", str(a)) and a != b
    assert launch.default_workdir(c, "local", {"train.lr": 1e-5, "env.num_workers": 4}) == a
    # keys that keep the run (how it is carried out, or a raised num_updates) keep the plain name
    assert launch.default_workdir(c, "local", {"env.num_workers": 4, "rl.num_updates": 9}) == Path(
        "runs/search-local-seed")


# -------------------------------------------------------------------------- inputs before work


def test_paper_without_model_path_exits_2_fast(tmp_path):
    r, wall = _launch(f"--config={REPO / 'configs' / 'search.py'}:paper", f"--workdir={tmp_path / 'w'}")
    assert r.returncode == 2 and wall < 5, (wall, r.stderr[-2000:])
    assert r.stderr.strip().startswith("error: config.model.path:") and "\n" not in r.stderr.strip()
    assert not (tmp_path / "w").exists()


# ------------------------------------------------------------- the stage-1 annotator (issue 33 item 3)


class _ChatServer:
    """A local OpenAI-compatible chat endpoint on a thread: answers ``status`` (200: one choice
    "OK") to every POST and keeps the request bodies."""

    def __init__(self, status: int = 200):
        bodies, code = [], status

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                bodies.append((self.path, json.loads(self.rfile.read(int(self.headers["Content-Length"])))))
                out = json.dumps({"choices": [{"message": {"content": "OK"}}]} if code == 200
                                 else {"error": "invalid api key"}).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, *a):
                pass

        self.bodies = bodies
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def _openai_config(url: str, model: str = "glm-test"):
    c = _config()
    c.stage1.analyzer, c.stage1.openai_base_url, c.stage1.openai_model = "openai", url, model
    return c


@pytest.mark.parametrize("env", ["search", "alfworld", "webshop"])
def test_paper_presets_annotate_with_an_endpoint_and_refuse_without_one(env, monkeypatch):
    from seed_jax.pipeline.validate import check_annotator_keys

    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    c = _config(env, "paper")
    assert c.stage1.analyzer == "openai"  # the paper's external annotator, not the base model
    with pytest.raises(ConfigValueError) as e:
        check_annotator_keys(c)
    msg = str(e.value)
    assert msg.startswith("config.stage1.openai_base_url and config.stage1.openai_model:") and "\n" not in msg
    assert "--config.stage1.analyzer=self" in msg and "deviation" in msg
    c.stage1.openai_model = "glm-5.2"
    with pytest.raises(ConfigValueError, match=r"^config\.stage1\.openai_base_url: "):
        check_annotator_keys(c)
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:1/v1")
    check_annotator_keys(c)  # the endpoint from the environment
    monkeypatch.delenv("OPENAI_BASE_URL")
    c.stage1.analyzer = "self"  # set explicitly: accepted (a documented deviation)
    check_annotator_keys(c)


def test_annotator_endpoint_answers_one_request_before_collection():
    from seed_jax.pipeline.validate import check_annotator

    ok = _ChatServer(200)
    try:
        check_annotator(_openai_config(ok.url))
        assert len(ok.bodies) == 1  # exactly one real request
        path, body = ok.bodies[0]
        assert path == "/v1/chat/completions" and body["model"] == "glm-test" and body["temperature"] == 0
    finally:
        ok.close()
    refusing = _ChatServer(401)
    try:
        with pytest.raises(ConfigValueError) as e:
            check_annotator(_openai_config(refusing.url))
        assert "HTTP 401" in str(e.value) and "\n" not in str(e.value) and len(refusing.bodies) == 1
    finally:
        refusing.close()
    t0 = time.time()
    with pytest.raises(ConfigValueError, match=r"^config\.stage1\.openai_base_url: the annotator endpoint failed"):
        check_annotator(_openai_config(f"http://127.0.0.1:{_free_port()}/v1"))
    assert time.time() - t0 < 5  # a dead endpoint: one attempt, no retries
    check_annotator(_config())  # other analyzers: nothing asked


def test_dead_annotator_endpoint_exits_2_with_one_line_before_any_model_loads(tmp_path):
    url = f"http://127.0.0.1:{_free_port()}/v1"
    r, wall = _launch(TINY, f"--workdir={tmp_path / 'w'}", "--config.stage1.analyzer=openai",
                      f"--config.stage1.openai_base_url={url}", "--config.stage1.openai_model=glm-test")
    assert r.returncode == 2, r.stderr[-2000:]
    err = r.stderr.strip()
    assert "\n" not in err and err.startswith("error: config.stage1.openai_base_url: the annotator endpoint failed")
    assert not (tmp_path / "w").exists()  # nothing collected, no run directory
    r, _ = _launch(TINY, f"--workdir={tmp_path / 'w'}", "--config.stage1.analyzer=openai")
    assert r.returncode == 2 and r.stderr.strip().startswith(
        "error: config.stage1.openai_base_url and config.stage1.openai_model:"), r.stderr[-2000:]


def test_dead_retriever_url_exits_2_before_rollouts(tmp_path):
    url = f"http://127.0.0.1:{_free_port()}/retrieve"
    r, _ = _launch(TINY, f"--workdir={tmp_path / 'w'}", "--config.env.retriever=http",
                   f"--config.env.retriever_url={url}")
    assert r.returncode == 2, r.stderr[-2000:]
    assert url in r.stderr and "python -m seed_jax.envs.search.server" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "w").exists()  # no run directory: nothing was rolled out


class _OneDoc:
    def search(self, queries, topk):
        return [[Passage("1", "a passage", 1.0)] for _ in queries]


class _RetrieveOnly(BaseHTTPRequestHandler):
    """A server with POST /retrieve and no /health (as Search-R1's retrieval server)."""

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        body = json.dumps({"result": [[{"document": {"id": "1", "contents": "x"}, "score": 1.0}]]}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_check_retriever_accepts_live_servers_with_or_without_health():
    srv = start_background_server(_OneDoc(), "127.0.0.1", 0)
    try:
        check_retriever(srv.url)
        check_retriever(srv.url.removesuffix("/retrieve"))
    finally:
        srv.shutdown()
        srv.server_close()
    plain = ThreadingHTTPServer(("127.0.0.1", 0), _RetrieveOnly)
    threading.Thread(target=plain.serve_forever, daemon=True).start()
    try:
        check_retriever(f"http://127.0.0.1:{plain.server_address[1]}/retrieve")
    finally:
        plain.shutdown()
        plain.server_close()
    with pytest.raises(ConfigValueError, match="env.retriever_url"):
        check_retriever(f"http://127.0.0.1:{_free_port()}/retrieve", timeout=2)


@pytest.mark.parametrize("key,value", [("env.corpus", "corpus.jsonl"), ("model.path", "model"),
                                       ("env.datasets", {"nq": "nq.parquet"})])
def test_every_named_input_must_exist(tmp_path, key, value):
    c = _config()
    section, leaf = key.split(".")
    c[section][leaf] = {k: str(tmp_path / v) for k, v in value.items()} if isinstance(value, dict) else str(
        tmp_path / value)
    named = f"{key}.nq" if isinstance(value, dict) else key
    with pytest.raises(ConfigValueError, match=re.escape(f"config.{named}: no such file or directory")):
        check_inputs(c)
    check_inputs(_config())
    for env in ("alfworld", "webshop"):
        check_inputs(_config(env, "local"), "local")


def test_scripted_analyzer_is_refused_for_an_env_without_expert_analysis(tmp_path):
    """``scripted`` (the env's expert analysis) as stage1.analyzer or analysis.analyzer: refused for
    search, which has none, naming the key (the launcher: that one line, exit 2, no run directory);
    accepted for household."""
    for key in ("stage1.analyzer", "analysis.analyzer"):
        section, name = key.split(".")
        c = _config()
        c[section][name] = "scripted"
        with pytest.raises(ConfigValueError, match=rf"^config\.{re.escape(key)}: 'scripted' reads the env's expert "
                                                   r"analysis, which only household provides, not env 'search'"):
            validate(c)
        h = _config("household", "ci")
        h[section][name] = "scripted"
        validate(h)
    r, _ = _launch(TINY, f"--workdir={tmp_path / 'w'}", "--config.analysis.analyzer=scripted")
    assert r.returncode == 2, r.stderr[-2000:]
    err = r.stderr.strip()
    assert "\n" not in err and err.startswith("error: config.analysis.analyzer: 'scripted' reads the env's expert")
    assert not (tmp_path / "w").exists()


# ----------------------------------------------------------------------------- command line


def test_misspelt_key_exits_2_with_one_line(tmp_path):
    r, _ = _launch(TINY, f"--workdir={tmp_path / 'w'}", "--config.rl.num_update=3")
    assert r.returncode == 2
    assert r.stderr.strip() == "error: unknown key config.rl.num_update; did you mean num_updates?"
    r, _ = _launch(f"--config={REPO / 'configs' / 'search.py'}:huge")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "unknown preset 'huge'" in r.stderr
    r, _ = _launch(TINY, "--config.rollout.top_p=1.5", f"--workdir={tmp_path / 'w'}")
    assert r.returncode == 2 and r.stderr.strip().startswith("error: config.rollout.top_p: must be in (0, 1]")
    assert not (tmp_path / "w").exists()


def test_help_lists_presets_methods_and_the_references():
    from seed_jax.configs.base import PRESETS

    r, _ = _launch("--help")
    assert r.returncode in (0, 1)  # absl's --help exits 1
    for name in (*PRESETS, *METHODS, "docs/METHOD.md", "configs/base.py", "--dry_run", "--force"):
        assert name in r.stdout, name


def test_dry_run_exits_0_names_the_default_workdir_and_runs_nothing(tmp_path):
    r, _ = _launch(TINY, "--config.train.lr=0.001", "--dry_run", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "lr: 0.001" in r.stdout  # the resolved config
    assert re.search(r"runs/search-tiny-seed-[0-9a-f]{6} \(new\)", r.stdout)
    assert re.search(r"rl\s+run\s+not finished", r.stdout)
    assert not (tmp_path / "runs").exists()


def test_dry_run_loads_no_model(tmp_path, monkeypatch):
    def boom(*a, **k):
        raise AssertionError("a dry run started the run")

    for name in ("Run", "make_mesh", "maybe_initialize_distributed"):
        monkeypatch.setattr(launch, name, boom)
    monkeypatch.setattr("seed_jax.pipeline.runtime.load_policy", boom)
    plan = launch.run_pipeline(_config(), tmp_path / "w", dry_run=True)
    assert [v["plan"] for v in plan.values()] == ["run"] * 5 and not (tmp_path / "w").exists()
