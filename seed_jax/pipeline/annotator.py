"""External stage-1 analyzer: any OpenAI-compatible chat endpoint, many trajectories at once.

Request: ``POST {base_url}/chat/completions`` with ``{"model", "messages", "temperature": 0,
"max_tokens": N}``, or, for a reasoning model, ``{"model", "messages",
"max_completion_tokens": N}`` (reasoning models take no temperature and count their hidden
reasoning in ``max_completion_tokens``). Whether the model is a reasoning model is the
``reasoning`` switch: ``"yes"``, ``"no"`` or ``"auto"`` = `is_reasoning_model` (the model name,
less any ``provider/`` prefix, starts with ``o`` and a digit, e.g. ``o1``, ``o3-mini``,
``o4-mini``, or with ``gpt-5``).

Endpoint and key (`resolve_endpoint`): the configured base URL, else ``$OPENAI_BASE_URL``; the
key from the configured environment variable, else ``$OPENAI_API_KEY`` (no key: no
``Authorization`` header, as local servers such as vLLM accept).

Transport errors, HTTP 5xx and 429 are retried (bounded, exponential back-off); other HTTP
errors and malformed responses raise `AnnotatorError` at once. The repair turns of
docs/METHOD.md §2.2 are done by `seed_jax.skills.annotate`.

`annotate_many` asks for many prompts with at most ``max_concurrency`` requests in flight and
appends each finished trajectory to a jsonl log as it arrives (`seed_jax.jsonl.append_jsonl`,
crash-safe); a rerun reads the log back and asks only for the trajectories missing from it.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import os
import re
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping

from seed_jax.jsonl import append_jsonl, read_jsonl, repair_torn_tail
from seed_jax.paths import run_path
from seed_jax.skills import SkillParse, annotate, parse_skill

REASONING_SWITCH = ("auto", "yes", "no")
_REASONING_NAME = re.compile(r"^(o\d|gpt-5)", re.IGNORECASE)


class AnnotatorError(RuntimeError):
    """The annotation endpoint could not be reached or answered nonsense."""


def is_reasoning_model(model: str) -> bool:
    """The model-name rule of ``reasoning="auto"``: the name after the last '/' starts with 'o'
    and a digit (o1, o3-mini, o4-mini, ...) or with 'gpt-5' (case-insensitive)."""
    return bool(_REASONING_NAME.match(model.rsplit("/", 1)[-1]))


def resolve_endpoint(base_url: str = "", api_key_env: str = "OPENAI_API_KEY",
                     environ: Mapping[str, str] | None = None) -> tuple[str, str]:
    """``(base_url, key)``: ``base_url`` or ``$OPENAI_BASE_URL``; ``$<api_key_env>`` or
    ``$OPENAI_API_KEY`` ('' when neither is set). Raises `AnnotatorError` without any URL."""
    env = os.environ if environ is None else environ
    url = base_url or env.get("OPENAI_BASE_URL", "")
    if not url:
        raise AnnotatorError("no annotator endpoint: set stage1.openai_base_url or $OPENAI_BASE_URL "
                             "(e.g. https://api.openai.com/v1 or http://127.0.0.1:8000/v1)")
    key = env.get(api_key_env, "") if api_key_env else ""
    return url, key or env.get("OPENAI_API_KEY", "")


class OpenAIChat:
    """``chat(messages) -> answer text`` against ``{base_url}/chat/completions`` (thread-safe:
    one connection per call)."""

    def __init__(self, base_url: str, model: str, api_key_env: str = "OPENAI_API_KEY", timeout: float = 120.0,
                 max_retries: int = 3, max_tokens: int = 1024, reasoning: str = "auto", backoff: float = 0.5,
                 environ: Mapping[str, str] | None = None):
        if reasoning not in REASONING_SWITCH:
            raise ValueError(f"reasoning must be one of {REASONING_SWITCH}, got {reasoning!r}")
        url, self.key = resolve_endpoint(base_url, api_key_env, environ)
        self.url = url.rstrip("/") + "/chat/completions"
        self.model, self.timeout, self.max_retries, self.max_tokens = model, timeout, max_retries, max_tokens
        self.backoff = backoff
        self.reasoning = is_reasoning_model(model) if reasoning == "auto" else reasoning == "yes"

    def body(self, messages: list[dict]) -> dict:
        """The request body (module docstring: reasoning models get no temperature)."""
        if self.reasoning:
            return {"model": self.model, "messages": messages, "max_completion_tokens": self.max_tokens}
        return {"model": self.model, "messages": messages, "temperature": 0, "max_tokens": self.max_tokens}

    def __call__(self, messages: list[dict]) -> str:
        body = json.dumps(self.body(messages)).encode()
        headers = {"Content-Type": "application/json"}
        if self.key:
            headers["Authorization"] = f"Bearer {self.key}"
        last = None
        for attempt in range(self.max_retries + 1):
            if attempt:
                time.sleep(min(8.0, self.backoff * 2 ** (attempt - 1)))
            try:
                req = urllib.request.Request(self.url, body, headers, method="POST")
                with urllib.request.urlopen(req, timeout=self.timeout) as r:
                    data = json.loads(r.read())
                return str(data["choices"][0]["message"]["content"] or "")
            except urllib.error.HTTPError as e:
                if e.code < 500 and e.code != 429:
                    raise AnnotatorError(f"{self.url}: HTTP {e.code}: {e.read()[:300]!r}") from None
                last = e
            except (urllib.error.URLError, TimeoutError, ConnectionError) as e:
                last = e
            except (KeyError, IndexError, TypeError, ValueError) as e:
                raise AnnotatorError(f"{self.url}: unexpected response: {type(e).__name__}: {e}") from None
        raise AnnotatorError(f"{self.url} unreachable after {self.max_retries + 1} attempts: {last}")


def prompt_digest(prompt: str) -> str:
    """First 16 hex digits of the prompt's sha256: a logged answer is reused only for the same prompt."""
    return hashlib.sha256(prompt.encode("utf-8")).hexdigest()[:16]


def read_annotation_log(path: str | os.PathLike, prompts: Mapping[str, str]) -> dict[str, list[str]]:
    """traj_id -> raw answers of the log entries whose prompt digest matches ``prompts`` (later
    entries win; a torn last line is skipped by `read_jsonl`)."""
    if not run_path(path).exists():
        return {}
    done = {}
    for rec in read_jsonl(path):
        tid = rec.get("traj_id")
        if tid in prompts and rec.get("prompt_sha") == prompt_digest(prompts[tid]):
            done[tid] = [str(a) for a in rec.get("answers", [])]
    return done


def annotate_many(prompts: Mapping[str, str], chat: Callable[[list[dict]], str], *, max_repairs: int = 2,
                  max_concurrency: int = 8, log_path: str | os.PathLike | None = None,
                  on_done: Callable[[], None] | None = None) -> dict[str, SkillParse]:
    """traj_id -> parse, for every prompt (`seed_jax.skills.annotate` per prompt).

    At most ``max_concurrency`` prompts are in flight at once (a thread pool of that size; each
    prompt's repair turns run in order within its thread). With ``log_path``, every finished
    prompt is appended as ``{"traj_id", "prompt_sha", "answers", "ok", "reason"}`` the moment it
    finishes, and prompts already in the log (same traj_id and prompt digest) are not asked
    again: their last answer is parsed anew. When a call fails (`AnnotatorError`), no new prompt
    is started, the ones in flight finish and are logged, and the error is raised, naming how
    many are logged so that a rerun resumes. ``on_done()`` is called once per finished prompt
    (progress)."""
    if max_concurrency < 1:
        raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}")
    log = run_path(log_path) if log_path is not None else None
    done = {}
    if log is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
        repair_torn_tail(log)
        done = read_annotation_log(log, prompts)
    out = {tid: parse_skill(answers[-1]) if answers else SkillParse("", "", False, "no answer")
           for tid, answers in done.items()}
    for _ in out:
        if on_done:
            on_done()
    todo = [tid for tid in prompts if tid not in out]
    if not todo:
        return {tid: out[tid] for tid in prompts}
    error: BaseException | None = None
    pending = iter(todo)
    with concurrent.futures.ThreadPoolExecutor(max_workers=max_concurrency, thread_name_prefix="annotate") as pool:
        running: dict[concurrent.futures.Future, str] = {}

        def start_next() -> None:
            tid = next(pending, None)
            if tid is not None:
                running[pool.submit(annotate, prompts[tid], chat, max_repairs)] = tid

        for _ in range(max_concurrency):
            start_next()
        while running:
            finished, _ = concurrent.futures.wait(running, return_when=concurrent.futures.FIRST_COMPLETED)
            for fut in finished:
                tid = running.pop(fut)
                try:
                    parse, answers = fut.result()
                except Exception as e:  # start no new prompt; the ones in flight still finish
                    error = error or e
                    continue
                out[tid] = parse
                if log is not None:
                    append_jsonl(log, [{"traj_id": tid, "prompt_sha": prompt_digest(prompts[tid]),
                                        "answers": answers, "ok": parse.ok, "reason": parse.reason}])
                if on_done:
                    on_done()
                if error is None:
                    start_next()
    if error is not None:
        where = f"; {len(out)} of {len(prompts)} are in {log} and a rerun asks only for the rest" if log else ""
        raise AnnotatorError(f"annotation stopped after {len(out)} of {len(prompts)} trajectories{where}: "
                             f"{type(error).__name__}: {error}") from error
    return {tid: out[tid] for tid in prompts}
