"""External annotator against a local fake OpenAI-compatible server (stdlib http.server in a
thread): concurrency bound, resume after a failure midway, request bodies of chat and reasoning
models, endpoint and key fallbacks, the openai analyzer end to end."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from seed_jax.jsonl import read_jsonl
from seed_jax.pipeline.analyzers import AnalysisContext, openai_analyzer
from seed_jax.pipeline.annotator import (
    AnnotatorError,
    OpenAIChat,
    annotate_many,
    is_reasoning_model,
    resolve_endpoint,
)
from seed_jax.rollout.trajectory import StepSample, Trajectory
from seed_jax.skills import REPAIR_PROMPT


def good(msg: str) -> str:
    return json.dumps({"episode_summary": f"did {msg[:20]}", "episode_skill": f"open the drawer before taking {msg}"})


class FakeOpenAI:
    """Answers ``/chat/completions`` with `good` of the first user message's text.

    Records every request body and header, and the most requests in flight at once.
    ``fail_on``: user messages answered with HTTP 400; ``bad_first``: messages answered once
    with unparsable text (a repair turn follows); ``delay``: seconds per request."""

    def __init__(self, delay: float = 0.0, fail_on=(), bad_first=()):
        self.delay, self.fail_on, self.bad_first = delay, set(fail_on), set(bad_first)
        self.bodies: list[dict] = []
        self.headers: list[dict] = []
        self.inflight = self.max_inflight = 0
        self.lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with fake.lock:
                    fake.bodies.append(body)
                    fake.headers.append(dict(self.headers))
                    fake.inflight += 1
                    fake.max_inflight = max(fake.max_inflight, fake.inflight)
                try:
                    time.sleep(fake.delay)
                    code, reply = self._reply(body)
                finally:  # out of flight before the reply goes out: the client cannot send its next
                    with fake.lock:  # request before this one is counted as done
                        fake.inflight -= 1
                self._send(code, reply)

            def _reply(self, body):
                msg = body["messages"][0]["content"]
                if self.path != "/v1/chat/completions":
                    return 404, {"error": self.path}
                if msg in fake.fail_on:
                    return 400, {"error": {"message": "content policy"}}
                content = good(msg)
                if msg in fake.bad_first and len(body["messages"]) == 1:
                    content = "Sure! The skill is: open the drawer"
                return 200, {"choices": [{"message": {"role": "assistant", "content": content}}]}

            def _send(self, code, obj):
                data = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def asked(self) -> list[str]:
        """The first user message of every request, in arrival order."""
        return [b["messages"][0]["content"] for b in self.bodies]

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def fake_factory():
    made = []

    def make(**kw):
        made.append(FakeOpenAI(**kw))
        return made[-1]

    yield make
    for f in made:
        f.close()


def _chat(fake, **kw):
    return OpenAIChat(fake.base_url, "gpt-4o-mini", api_key_env="NO_SUCH_KEY_VAR", max_retries=0,
                      environ=kw.pop("environ", {}), **kw)


def test_concurrency_is_bounded_and_reached(fake_factory):
    fake = fake_factory(delay=0.1)
    prompts = {f"t{i}": f"p{i}" for i in range(12)}
    parses = annotate_many(prompts, _chat(fake), max_concurrency=3)
    assert fake.max_inflight == 3  # never more than the bound, and the bound is used
    assert sorted(fake.asked()) == sorted(prompts.values())
    assert all(parses[t].ok and parses[t].skill == f"open the drawer before taking {p}" for t, p in prompts.items())
    assert list(parses) == list(prompts)  # the input order, whatever the arrival order


def test_resume_after_failure_asks_only_the_missing(fake_factory, tmp_path):
    log = tmp_path / "annotations.jsonl"
    prompts = {f"t{i}": f"p{i}" for i in range(10)}
    failing = fake_factory(fail_on={"p6"})
    with pytest.raises(AnnotatorError, match=r"of 10 trajectories.*a rerun asks only for the rest"):
        annotate_many(prompts, _chat(failing), max_concurrency=1, log_path=log)
    # one at a time, in order: p0..p5 answered and logged, p6 failed, p7..p9 never started
    assert failing.asked() == [f"p{i}" for i in range(7)]
    logged = read_jsonl(log)
    assert [r["traj_id"] for r in logged] == [f"t{i}" for i in range(6)]
    assert all(r["ok"] and len(r["answers"]) == 1 for r in logged)
    with open(log, "a") as f:  # a kill mid-append leaves a torn line: repaired, not fatal
        f.write('{"traj_id": "t7", "prompt_')
    healthy = fake_factory()
    with pytest.warns(UserWarning, match="removing a torn last line"):
        parses = annotate_many(prompts, _chat(healthy), max_concurrency=4, log_path=log)
    assert sorted(healthy.asked()) == ["p6", "p7", "p8", "p9"]
    assert all(p.ok for p in parses.values()) and parses["t0"].skill == "open the drawer before taking p0"
    assert sorted(r["traj_id"] for r in read_jsonl(log)) == sorted(prompts)
    # a third run asks nothing; a changed prompt is asked again
    again = fake_factory()
    annotate_many(prompts, _chat(again), log_path=log)
    assert again.asked() == []
    annotate_many({**prompts, "t3": "p3 changed"}, _chat(again), log_path=log)
    assert again.asked() == ["p3 changed"]


def test_in_flight_requests_finish_and_are_logged_when_one_fails(fake_factory, tmp_path):
    log = tmp_path / "a.jsonl"
    fake = fake_factory(delay=0.2, fail_on={"p0"})
    prompts = {f"t{i}": f"p{i}" for i in range(8)}
    with pytest.raises(AnnotatorError):
        annotate_many(prompts, _chat(fake), max_concurrency=4, log_path=log)
    # p0..p3 were started together; p0 failed fast-or-slow, p1..p3 were in flight and are kept
    assert {"t1", "t2", "t3"} <= {r["traj_id"] for r in read_jsonl(log)}
    assert len(fake.asked()) < len(prompts)  # no new prompt was started after the failure


def test_request_bodies_chat_and_reasoning(fake_factory):
    fake = fake_factory(bad_first={"p0"})
    annotate_many({"t0": "p0"}, _chat(fake, max_tokens=77), max_repairs=2)
    first, repair = fake.bodies
    assert first == {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "p0"}],
                     "temperature": 0, "max_tokens": 77}
    assert [m["role"] for m in repair["messages"]] == ["user", "assistant", "user"]
    assert repair["messages"][2]["content"] == REPAIR_PROMPT
    for model, switch in (("o3-mini", "auto"), ("openai/gpt-5-mini", "auto"), ("gpt-4o", "yes")):
        fake.bodies.clear()
        chat = OpenAIChat(fake.base_url, model, max_retries=0, max_tokens=4096, reasoning=switch, environ={})
        chat([{"role": "user", "content": "q"}])
        assert fake.bodies == [{"model": model, "messages": [{"role": "user", "content": "q"}],
                                "max_completion_tokens": 4096}]  # no temperature, no max_tokens
    fake.bodies.clear()
    OpenAIChat(fake.base_url, "o3-mini", reasoning="no", max_tokens=5, environ={})([{"role": "user", "content": "q"}])
    assert fake.bodies[0]["temperature"] == 0 and fake.bodies[0]["max_tokens"] == 5
    with pytest.raises(ValueError, match="reasoning must be one of"):
        OpenAIChat(fake.base_url, "x", reasoning="maybe", environ={})


def test_reasoning_model_name_rule():
    assert [is_reasoning_model(m) for m in ("o1", "o3-mini", "O4-mini-high", "gpt-5", "azure/o1-preview")] == [True] * 5
    assert [is_reasoning_model(m) for m in ("gpt-4o", "gpt-4.1-mini", "qwen2.5-7b", "olmo-2", "llama-3-o1")] == [False] * 5


def test_endpoint_and_key_fallbacks(fake_factory):
    env = {"OPENAI_BASE_URL": "http://env.example/v1", "OPENAI_API_KEY": "sk-env", "MY_KEY": "sk-mine"}
    assert resolve_endpoint("", "MY_KEY", env) == ("http://env.example/v1", "sk-mine")
    assert resolve_endpoint("http://cfg/v1", "UNSET_VAR", env) == ("http://cfg/v1", "sk-env")
    assert resolve_endpoint("http://cfg/v1", "OPENAI_API_KEY", {}) == ("http://cfg/v1", "")
    with pytest.raises(AnnotatorError, match=r"stage1.openai_base_url or \$OPENAI_BASE_URL"):
        resolve_endpoint("", "OPENAI_API_KEY", {})
    # against the server: the URL from $OPENAI_BASE_URL, the key from $OPENAI_API_KEY
    fake = fake_factory()
    chat = OpenAIChat("", "m", api_key_env="UNSET_VAR", environ={"OPENAI_BASE_URL": fake.base_url,
                                                                   "OPENAI_API_KEY": "sk-fallback"})
    chat([{"role": "user", "content": "q"}])
    assert fake.headers[-1]["Authorization"] == "Bearer sk-fallback"
    OpenAIChat(fake.base_url, "m", api_key_env="UNSET_VAR", environ={})([{"role": "user", "content": "q"}])
    assert "Authorization" not in fake.headers[-1]  # no key: no header (local servers)


def test_http_errors(fake_factory):
    fake = fake_factory(fail_on={"bad"})
    with pytest.raises(AnnotatorError, match="HTTP 400"):
        _chat(fake)([{"role": "user", "content": "bad"}])
    dead = OpenAIChat("http://127.0.0.1:9/v1", "m", max_retries=1, backoff=0.01, timeout=2, environ={})
    with pytest.raises(AnnotatorError, match="unreachable after 2 attempts"):
        dead([{"role": "user", "content": "q"}])


def _traj(i: int) -> Trajectory:
    step = StepSample(prompt_ids=[1], response_ids=[2], response_logprobs=[0.0], response_text="<action>look</action>",
                      prompt_text="p", raw_observation="a room", valid=True, reward=0.0)
    return Trajectory(task_id=f"task{i}", group_id=i, traj_id=f"tr{i}", task_description=f"find the key {i}",
                      steps=[step], episode_reward=1.0, won=True)


def test_openai_analyzer_end_to_end(fake_factory, tmp_path, monkeypatch):
    fake = fake_factory()
    monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)
    trajs = [_traj(i) for i in range(5)]
    ctx = AnalysisContext(success_threshold=1.0, max_prompt_tokens=2000, max_new_tokens=64,
                          openai={"base_url": "", "model": "o1", "max_concurrency": 2,
                                  "log_path": tmp_path / "ann.jsonl"})
    analysis = openai_analyzer(trajs, ctx)
    assert set(analysis.skills) == {t.traj_id for t in trajs} and analysis.parse_rate == 1.0
    assert all("max_completion_tokens" in b and "temperature" not in b for b in fake.bodies)
    assert len(read_jsonl(tmp_path / "ann.jsonl")) == 5
    n = len(fake.bodies)
    assert openai_analyzer(trajs, ctx).skills == analysis.skills and len(fake.bodies) == n  # resumed: no calls
