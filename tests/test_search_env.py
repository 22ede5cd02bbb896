"""Search QA environment: BM25 retriever, Search-R1 HTTP API (server + client), datasets, EM
reward and episode rules. Real data: the vendored corpus, and the development QA files in
``$SEED_SEARCH_QA_DATA`` (hipporag/, searchr1/, flashrag/; `.ci/run` sets it where they are): the
tests that read them skip, saying so, without it."""

from __future__ import annotations

import json
import math
import multiprocessing
import os
import pickle
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import Counter

import numpy as np
import pytest

from seed_jax.envs.search import (
    BM25Retriever,
    HttpRetriever,
    Passage,
    RetrieverError,
    RetrieverSpec,
    RetrieverUnavailableError,
    SearchEnv,
    SearchEnvFactory,
    default_corpus_path,
    exact_match,
    format_information,
    load_default_tasks,
    load_flashrag_jsonl,
    load_hotpotqa_json,
    load_searchr1_parquet,
    load_tasks,
    make_search_env,
    normalize_answer,
    read_corpus_jsonl,
)
from seed_jax.envs.search.bm25 import tokenize
from seed_jax.envs.search.data import build_default_set
from seed_jax.envs.search.server import start_background_server

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.environ.get("SEED_SEARCH_QA_DATA", "")
HOTPOT_QA = os.path.join(SHARED, "hipporag", "hotpotqa_train.json")
NQ_PARQUET = os.path.join(SHARED, "searchr1", "nq_search_test.parquet")
NQ_FLASHRAG = os.path.join(SHARED, "flashrag", "nq_test_sample.jsonl")


def need(*paths: str) -> None:
    """Skip the calling test, naming the file, when the development QA files are not there."""
    for p in paths:
        if not SHARED or not os.path.isfile(p):
            pytest.skip(f"needs $SEED_SEARCH_QA_DATA with {os.path.relpath(p, SHARED) if SHARED else p} "
                        "(not set or absent)")


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("bm25_cache"))


@pytest.fixture(scope="module")
def bm25(cache_dir):
    return BM25Retriever(default_corpus_path(), cache_dir=cache_dir)


@pytest.fixture(scope="module")
def hotpot_items():
    need(HOTPOT_QA)
    with open(HOTPOT_QA, encoding="utf-8") as f:
        return json.load(f)


@pytest.fixture(scope="module")
def server(bm25):
    srv = start_background_server(bm25, "127.0.0.1", 0, default_topk=3)
    yield srv
    srv.shutdown()
    srv.server_close()


def _post(url: str, payload, timeout: float = 5.0) -> tuple[int, dict]:
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"}, method="POST")
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class FakeRetriever:
    """Returns fixed passages and counts calls (to check that invalid steps retrieve nothing)."""

    def __init__(self, passages):
        self.passages, self.calls = passages, 0

    def search(self, queries, topk):
        self.calls += 1
        return [self.passages[:topk] for _ in queries]


FAKE = [Passage("a", '"Alpha"\ntext a', 2.0), Passage("b", '"Beta"\ntext b', 1.0), Passage("c", '"Gamma"\ntext c', 0.5)]
TASK = {"task_id": "t0", "question": "Which letter comes first?", "golden_answers": ["Alpha", "the letter A"], "data_source": "toy"}


# ---------------------------------------------------------------------------------------
# BM25


def test_tokenize():
    assert tokenize("The U.S. Open, 2019's best!") == ["u", "s", "open", "2019", "s", "best"]
    assert tokenize("The U.S. Open", stopwords=False) == ["the", "u", "s", "open"]
    assert tokenize("Röntgen_rays") == ["röntgen", "rays"]


def _naive_bm25(docs: list[str], query: str, k1=0.9, b=0.4) -> list[float]:
    """Reference: Okapi BM25 with Lucene idf, term by term over Python dicts."""
    toks = [tokenize(d) for d in docs]
    n, avgdl = len(docs), sum(map(len, toks)) / len(docs)
    out = []
    for t in toks:
        tf, s = Counter(t), 0.0
        for w in tokenize(query):
            df = sum(w in u for u in toks)
            if df == 0 or tf[w] == 0:
                continue
            idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
            s += idf * tf[w] * (k1 + 1) / (tf[w] + k1 * (1 - b + b * len(t) / avgdl))
        out.append(s)
    return out


def _write_corpus(path, contents):
    with open(path, "w") as f:
        for i, c in enumerate(contents):
            f.write(json.dumps({"id": f"d{i}", "contents": c}) + "\n")


def test_bm25_scores_match_reference(tmp_path):
    contents = ['"Apple"\napple banana', '"Cherry"\napple apple cherry', '"Fruit bowl"\nthe banana and the cherry of a bowl',
                '"Zed"\nnothing in common here at all']
    corpus = tmp_path / "c.jsonl"
    _write_corpus(corpus, contents)
    r = BM25Retriever(corpus, cache_dir=tmp_path / "cache")
    for q in ["apple", "cherry banana", "apple apple bowl", "fruit", "unknownword"]:
        # float32 scores; the reference keeps Lucene's dropped (k1 + 1) = 1.9 factor
        np.testing.assert_allclose(1.9 * r.index.scores(q), _naive_bm25(contents, q), rtol=1e-6, atol=1e-7)
    # Hand computation for two docs 'apple banana' / 'apple apple cherry' (|d| = 2, 3; avgdl 2.5):
    _write_corpus(tmp_path / "two.jsonl", ["apple banana", "apple apple cherry"])  # no title line
    two = BM25Retriever(tmp_path / "two.jsonl", cache_dir=tmp_path / "cache")
    [[hit]] = two.search(["cherry"], 3)
    assert hit.id == "d1"
    assert hit.score == pytest.approx(math.log(2) * 1 / (1 + 0.9 * (0.6 + 0.4 * 3 / 2.5)), rel=1e-6)
    assert two.search(["no such words"], 3) == [[]]  # zero-score docs are not returned


def test_bm25_index_cache(tmp_path):
    corpus = tmp_path / "c.jsonl"
    _write_corpus(corpus, ['"A"\nred apple', '"B"\ngreen pear', '"C"\nred pear'])
    first = BM25Retriever(corpus, cache_dir=tmp_path)
    assert not first.loaded_from_cache and os.path.isdir(first.cache_path)
    arrays = sorted(f for f in os.listdir(first.cache_path) if f.endswith(".npy"))
    assert arrays == ["data.csc.index.npy", "indices.csc.index.npy", "indptr.csc.index.npy", "spans.npy"]
    for f in arrays:  # plain arrays, no pickles
        np.load(os.path.join(first.cache_path, f), allow_pickle=False)
    second = BM25Retriever(corpus, cache_dir=tmp_path)
    assert second.loaded_from_cache
    assert isinstance(second.index.model.scores["data"], np.memmap)  # memory-mapped, not read in
    assert first.search(["red pear"], 3) == second.search(["red pear"], 3)
    assert [p.id for p in second.search(["red pear"], 3)[0]] == ["d2", "d0", "d1"]
    with open(os.path.join(second.cache_path, "indptr.csc.index.npy"), "wb") as f:  # corrupt cache -> rebuilt
        f.write(b"garbage")
    assert not BM25Retriever(corpus, cache_dir=tmp_path).loaded_from_cache
    assert BM25Retriever(corpus, cache_dir=tmp_path).loaded_from_cache
    assert not BM25Retriever(corpus, cache_dir=tmp_path, k1=1.2).loaded_from_cache  # k1 is in the key
    _write_corpus(corpus, ['"A"\nred apple', '"B"\ngreen pear'])  # new content -> new key
    third = BM25Retriever(corpus, cache_dir=tmp_path)
    assert not third.loaded_from_cache and third.cache_path != first.cache_path and third.num_docs == 2


def test_bm25_top3_matches_reference_on_the_vendored_questions(bm25):
    """The bm25s index gives the top-3 of the float64 dict-based reference BM25 (`_naive_bm25`'s
    formula, precomputed per document) on all 100 vendored questions over the vendored corpus."""
    docs = read_corpus_jsonl(default_corpus_path())
    toks = [Counter(tokenize(d["contents"])) for d in docs]
    lens = np.array([sum(t.values()) for t in toks], dtype=np.float64)
    df = Counter(w for t in toks for w in t)
    n, avgdl, k1, b = len(docs), lens.mean(), 0.9, 0.4
    postings: dict[str, list[tuple[int, float]]] = {}
    for i, t in enumerate(toks):
        for w, tf in t.items():
            postings.setdefault(w, []).append((i, tf / (tf + k1 * (1 - b + b * lens[i] / avgdl))))
    tasks = load_default_tasks()
    assert len(tasks) == 100
    for task in tasks:
        ref = np.zeros(n)
        for w in tokenize(task["question"]):
            idf = math.log(1 + (n - df[w] + 0.5) / (df[w] + 0.5)) if w in df else 0.0
            for i, wt in postings.get(w, []):
                ref[i] += idf * wt
        want = [docs[i]["id"] for i in sorted(np.flatnonzero(ref > 0), key=lambda i: (-ref[i], i))[:3]]
        assert [p.id for p in bm25.search([task["question"]], 3)[0]] == want, task["question"]


def test_bm25_does_not_import_jax(tmp_path):
    """bm25s would import JAX (and start its runtime) in every env worker: the BM25 keeps it out."""
    code = ("import sys; from seed_jax.envs.bm25 import BM25; from seed_jax.envs.search.bm25 import tokenize; "
            "b = BM25.build(['red apple', 'green pear'], tokenize); assert b.top('pear', 3)[0][0] == 1; "
            "print(sorted(m for m in sys.modules if m == 'jax' or m.startswith('jax.')))")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=root,
                         env={**os.environ, "PYTHONPATH": root})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"


def test_bm25_title_query_finds_gold_paragraph(bm25, hotpot_items):
    """Query = title of a supporting paragraph -> that paragraph is in the top-3."""

    def found(items):
        hits, total = 0, 0
        for it in items:
            for title in sorted({t for t, _ in it["supporting_facts"]}):
                total += 1
                hits += any(p.title == title for p in bm25.search([title], 3)[0])
        return hits, total

    assert found(hotpot_items[:30]) == (60, 60)
    # Over all 100 questions 198 of 200; the two misses are titles contained in several
    # longer titles with shorter paragraphs ("The Dandy Warhols", "Chiang Kai-shek").
    assert found(hotpot_items) == (198, 200)


def test_corpus_reader_errors(tmp_path):
    p = tmp_path / "bad.jsonl"
    p.write_text('{"id": 1, "contents": "x"}\n{"id": "1", "contents": "y"}\n')
    with pytest.raises(ValueError, match="duplicated id '1'"):
        read_corpus_jsonl(p)
    p.write_text('{"id": 1, "text": "x"}\n')
    with pytest.raises(ValueError, match=":1: expected keys"):
        read_corpus_jsonl(p)


# ---------------------------------------------------------------------------------------
# EM reward


@pytest.mark.parametrize(
    "raw, norm",
    [
        ("The Quick, Brown  Fox!", "quick brown fox"),
        ("An apple a day", "apple day"),
        ("Theatre of the Absurd", "theatre of absurd"),
        ("U.S.A.", "usa"),
        ("don't", "dont"),
        ("  multiple\n\tspaces ", "multiple spaces"),
        ("Wilhelm Conrad Röntgen", "wilhelm conrad röntgen"),
        ("", ""),
    ],
)
def test_normalize_answer(raw, norm):
    assert normalize_answer(raw) == norm


def test_exact_match():
    assert exact_match("May 18, 2018", ["May 18 2018"]) == 1.0
    assert exact_match("291", ["291 episodes", "291"]) == 1.0
    assert exact_match("291 episode", ["291 episodes"]) == 0.0
    assert exact_match("the Paris", "paris") == 1.0
    assert exact_match("Rontgen", ["Röntgen"]) == 0.0  # no accent folding, as SQuAD
    assert exact_match("Beijing", np.array(["beijing", "Peking"])) == 1.0
    assert exact_match("Beijing city", ["beijing"]) == 0.0


# ---------------------------------------------------------------------------------------
# Datasets


def test_searchr1_parquet():
    need(NQ_PARQUET)
    import pyarrow.parquet as pq

    tasks = load_searchr1_parquet(NQ_PARQUET)
    table = pq.read_table(NQ_PARQUET)
    assert len(tasks) == table.num_rows == 3610
    assert tasks[0] == {"task_id": "nq-test_0", "question": "who got the first nobel prize in physics?",
                        "golden_answers": ["Wilhelm Conrad Röntgen"], "data_source": "nq"}
    assert tasks[6]["golden_answers"] == table.column("golden_answers")[6].as_py()
    assert json.loads(json.dumps(tasks)) == tasks
    assert len({t["task_id"] for t in tasks}) == 3610
    assert load_tasks(NQ_PARQUET, limit=5) == tasks[:5]


def test_hotpotqa_and_flashrag_loaders(hotpot_items):
    need(NQ_FLASHRAG)
    hp = load_hotpotqa_json(HOTPOT_QA)
    assert len(hp) == 100
    assert hp[0] == {"task_id": "hotpotqa-5a77ec115542992a6e59dff7", "question": "If Gallu is a demon Lilu is what?",
                     "golden_answers": ["a spirit"], "data_source": "hotpotqa"}
    assert [t["golden_answers"][0] for t in hp] == [it["answer"] for it in hotpot_items]
    fr = load_flashrag_jsonl(NQ_FLASHRAG, data_source="nq")
    assert len(fr) == 17 and fr[6]["task_id"] == "nq-test_6"
    assert fr[6]["golden_answers"] == ["Xiu Li Dai", "Dai Xiuli", "Dai Yongge", "Yongge Dai"]
    assert load_tasks(NQ_FLASHRAG, data_source="nq") == fr


def test_default_set_is_rebuilt_identically_and_answerable(tmp_path, hotpot_items):
    assert build_default_set(SHARED, str(tmp_path)) == (1994, 100)
    for name in ("default_corpus.jsonl", "default_tasks.jsonl"):
        with open(tmp_path / name, "rb") as a, open(os.path.join(REPO, "envs", "search", "data", name), "rb") as b:
            assert a.read() == b.read(), name
    docs = read_corpus_jsonl(default_corpus_path())
    titles = {d["contents"].split("\n", 1)[0].strip('"') for d in docs}
    assert all(t in titles for it in hotpot_items for t, _ in it["supporting_facts"])
    assert sum(d["id"].startswith("wiki18-") for d in docs) == 1000
    assert load_default_tasks() == load_hotpotqa_json(HOTPOT_QA)


# ---------------------------------------------------------------------------------------
# Environment


def test_information_block_format():
    expected = '<information>Doc 1(Title: "Alpha") text a\nDoc 2(Title: "Beta") text b</information>'
    assert format_information(FAKE[:2]) == expected


def test_episode_search_then_answer(bm25):
    task = load_default_tasks()[0]  # If Gallu is a demon Lilu is what? -> a spirit
    for answer, reward in [("A spirit.", 1.0), ("a demon", 0.0)]:
        env = SearchEnv(bm25)
        prompt, info = env.reset(task)
        assert prompt.count("\nYour question: If Gallu is a demon Lilu is what?\n") == 1
        assert "<search>" in prompt and "<answer>" in prompt and "<think>" in prompt
        assert info["valid"] and not info["won"] and info["data_source"] == "hotpotqa"
        obs, r, done, info = env.step("<think>look it up</think>\n<search> Lilu (mythology) </search>")
        assert (r, done, info["valid"]) == (0.0, False, True)
        assert obs.startswith('<information>Doc 1(Title: "Lilu (mythology)") A lilu or lil') and obs.endswith("</information>")
        assert [line.split("(")[0] for line in obs.split("\n")] == ["<information>Doc 1", "Doc 2", "Doc 3"]
        assert info["retrieved"][0] == {"id": "hotpotqa-5", "title": "Lilu (mythology)"} and len(info["retrieved"]) == 3
        assert info["raw_observation"] == obs
        assert "Step 1: <search> Lilu (mythology) </search>\n<information>Doc 1" in env.build_prompt()
        obs, r, done, info = env.step(f"<think>so</think><answer>{answer}</answer>")
        assert (r, done, info["won"], info["valid"]) == (reward, True, reward == 1.0, True)
        with pytest.raises(RuntimeError, match="episode is over"):
            env.step("<answer>x</answer>")


def test_invalid_responses_are_penalised_noops():
    fake = FakeRetriever(FAKE)
    env = SearchEnv(fake)
    env.reset(TASK)
    cases = [
        ("I think it is Alpha.", "missing"),
        ("<search>alpha</search><answer>Alpha</answer>", "mixed"),  # golden answer, but invalid
        ("<answer>Alpha</answer> <answer>Alpha</answer>", "duplicated"),
        ("<answer>阿尔法</answer>", "cjk"),
    ]
    for i, (resp, reason) in enumerate(cases, 1):
        obs, r, done, info = env.step(resp)
        assert r == -0.01 and not info["valid"] and not info["won"] and info["reason"] == reason
        assert info["retrieved"] == [] and fake.calls == 0
        assert obs.startswith("Invalid action") and env.step_count == i
        assert done == (i == 4)  # invalid steps consume turns: the 4th ends the episode
    assert env.build_prompt().count("(invalid response:") == 4


def test_max_steps_without_answer_and_history_window():
    env = SearchEnv(FakeRetriever(FAKE))
    env.reset(TASK)
    for i in range(1, 5):
        obs, r, done, info = env.step(f"<think>t</think><search>query {i}</search>")
        assert r == 0.0 and done == (i == 4) and not info["won"]
    long = SearchEnv(FakeRetriever(FAKE), max_steps=7)
    long.reset(TASK)
    for i in range(1, 7):
        long.step(f"<search>query {i}</search>")
    prompt = long.build_prompt()
    assert [f"Step {i}: <search> query {i} </search>" in prompt for i in range(1, 7)] == [False, False, True, True, True, True]
    assert "You have taken 6 step(s); 1 remain." in prompt
    assert prompt.count("Your question:") == 1


def test_answer_uses_squad_normalisation():
    env = SearchEnv(FakeRetriever(FAKE))
    env.reset(TASK)
    _, r, done, info = env.step("<think>x</think><answer>  THE letter a! </answer>")
    assert (r, done, info["won"]) == (1.0, True, True)


def test_reset_rejects_bad_task():
    env = SearchEnv(FakeRetriever(FAKE))
    with pytest.raises(ValueError, match="missing keys"):
        env.reset({"question": "q"})
    with pytest.raises(ValueError, match="golden_answers"):
        env.reset({**TASK, "golden_answers": "Alpha"})


def _episode_in_child(factory):
    env = factory()
    env.reset(load_default_tasks()[0])
    _, _, _, info = env.step("<search>Lilu (mythology)</search>")
    _, reward, _, _ = env.step("<answer>a spirit</answer>")
    return [d["id"] for d in info["retrieved"]], reward


def test_factory_is_picklable_and_builds_in_a_worker(cache_dir, bm25):
    factory = SearchEnvFactory(RetrieverSpec(cache_dir=cache_dir))
    assert pickle.loads(pickle.dumps(factory)) == factory
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        ids, reward = pool.apply(_episode_in_child, (factory,))
    assert ids == [p.id for p in bm25.search(["Lilu (mythology)"], 3)[0]] and reward == 1.0
    env = make_search_env({"cache_dir": cache_dir})
    assert env.spec.max_steps == 4 and env.spec.invalid_penalty == 0.01 and env.spec.action_kinds == ("search", "answer")
    with pytest.raises(ValueError, match="unknown retriever settings"):
        make_search_env({"corpus": "x"})


# ---------------------------------------------------------------------------------------
# HTTP API


def test_server_answers_search_r1_format(server, bm25):
    q = "Lilu (mythology)"
    code, resp = _post(server.url, {"query": q, "topk": 3, "return_scores": True})
    assert code == 200 and list(resp) == ["result"]
    assert isinstance(resp["result"], list) and len(resp["result"]) == 1 and len(resp["result"][0]) == 3
    ref = bm25.search([q], 3)[0]
    for entry, p in zip(resp["result"][0], ref):
        assert set(entry) == {"document", "score"} and isinstance(entry["score"], float)
        assert entry["document"] == {"id": p.id, "contents": p.contents} and entry["score"] == p.score
    # Search-R1's batched form; without scores the entries are the bare documents.
    code, resp = _post(server.url, {"queries": [q, "Christopher Nolan"], "topk": 2, "return_scores": False})
    assert code == 200 and [len(r) for r in resp["result"]] == [2, 2]
    assert resp["result"][0] == [{"id": p.id, "contents": p.contents} for p in ref[:2]]
    code, resp = _post(server.url, {"queries": [q]})  # topk defaults to the server's 3
    assert code == 200 and len(resp["result"][0]) == 3


@pytest.mark.parametrize("body", [b"not json", {"topk": 3}, {"query": 5}, {"queries": "q"}, {"query": "q", "topk": -1},
                                  {"query": "q", "return_scores": "yes"}])
def test_server_rejects_bad_requests(server, body):
    code, resp = _post(server.url, body)
    assert code == 400 and isinstance(resp["error"], str)


def test_http_retriever_matches_embedded(server, bm25):
    queries = [t["question"] for t in load_default_tasks(limit=8)]
    ref = bm25.search(queries, 3)
    assert HttpRetriever(server.url).search(queries, 3) == ref
    assert HttpRetriever(server.url.replace("/retrieve", ""), request_form="single").search(queries[:3], 3) == ref[:3]
    env = SearchEnv(HttpRetriever(server.url))
    env.reset(load_default_tasks()[0])
    assert env.step("<search>Lilu (mythology)</search>")[0] == format_information(bm25.search(["Lilu (mythology)"], 3)[0])


def test_dead_server_gives_clear_error_after_bounded_retries():
    url = f"http://127.0.0.1:{_free_port()}/retrieve"  # nothing listens there any more
    client = HttpRetriever(url, timeout=1.0, max_retries=2, backoff=0.1)
    t0 = time.monotonic()
    with pytest.raises(RetrieverUnavailableError, match=f"{url} unavailable after 3 attempts"):
        client.search(["anything"], 3)
    elapsed = time.monotonic() - t0
    assert 0.3 <= elapsed < 5.0  # two backoff sleeps (0.1 + 0.2 s), then give up


def test_retries_recover_from_server_errors(bm25):
    class Flaky:
        num_docs = bm25.num_docs

        def __init__(self):
            self.calls = 0

        def search(self, queries, topk):
            self.calls += 1
            if self.calls <= 2:
                raise RuntimeError("index busy")  # -> HTTP 500
            return bm25.search(queries, topk)

    flaky = Flaky()
    srv = start_background_server(flaky)
    try:
        assert HttpRetriever(srv.url, max_retries=2, backoff=0.01).search(["Alû"], 3) == bm25.search(["Alû"], 3)
        assert flaky.calls == 3
        with pytest.raises(RetrieverError, match="HTTP 400"):  # client errors are not retried
            HttpRetriever(srv.url).search(["x"], 5000)
    finally:
        srv.shutdown()
        srv.server_close()


def test_server_cli(tmp_path):
    corpus = tmp_path / "c.jsonl"
    _write_corpus(corpus, ['"A"\nred apple', '"B"\ngreen pear', '"C"\nred pear'])
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "seed_jax.envs.search.server", "--corpus", str(corpus), "--port", str(port),
         "--cache-dir", str(tmp_path / "cache")], cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        client = HttpRetriever(f"http://127.0.0.1:{port}", timeout=2.0, max_retries=8, backoff=0.25, max_backoff=2.0)
        [[top, second]] = client.search(["red pear"], 2)
        assert (top.id, top.title, second.id) == ("d2", "C", "d0")
    finally:
        proc.terminate()
        proc.wait(timeout=10)


# ------------------------------------------------------------------ the paper's data (Search-R1 layout)

PAPER_EVAL_SPLITS = ("nq", "triviaqa", "popqa", "hotpotqa", "2wikimultihopqa", "musique", "bamboogle")


def _search_config(preset: str, data_dir: str = ""):
    from seed_jax.configs.search import get_config

    c = get_config(preset)
    c.env.data_dir = data_dir
    return c


def test_paper_preset_without_its_data_is_refused_naming_every_missing_file(tmp_path):
    from seed_jax.pipeline.validate import ConfigValueError, check_inputs, validate

    c = _search_config("paper", str(tmp_path))
    assert tuple(c.env.eval_splits) == PAPER_EVAL_SPLITS and not c.env.vendored_data
    validate(c)  # the values are possible; the inputs are missing
    with pytest.raises(ConfigValueError, match=r"^config\.env\.data_dir: ") as err:
        check_inputs(c)
    msg = str(err.value)
    assert "\n" not in msg
    assert os.path.join(str(tmp_path), "nq_hotpotqa_train", "train.parquet") in msg
    for split in PAPER_EVAL_SPLITS:
        assert f"{split}: " + os.path.join(str(tmp_path), split, "test.parquet") in msg
    # without a data_dir the message still shows the layout
    with pytest.raises(ConfigValueError, match=r"<data_dir>/nq/test\.parquet"):
        check_inputs(_search_config("paper"))


def test_local_and_tiny_presets_keep_the_vendored_sample():
    from seed_jax.pipeline.environments import make_benchmark
    from seed_jax.pipeline.validate import check_inputs, validate

    vendored = load_default_tasks()
    for preset in ("local", "tiny"):
        c = _search_config(preset)
        validate(c)
        check_inputs(c)
        bench = make_benchmark(c.env)
        assert bench.eval_splits == ("hotpotqa",)
        assert bench.tasks("train") == vendored[:80] and bench.tasks("hotpotqa") == vendored[80:]
        with pytest.raises(ValueError, match=r"nq/test\.parquet"):
            bench.tasks("nq")



def test_a_data_file_asked_for_and_missing_never_falls_back_to_the_vendored_sample(tmp_path):
    from seed_jax.pipeline.environments import make_benchmark, missing_search_data
    from seed_jax.pipeline.validate import ConfigValueError, check_inputs

    c = _search_config("local", str(tmp_path))  # a data_dir without the files
    with pytest.raises(ConfigValueError, match=r"split\(s\) train, hotpotqa:"):
        check_inputs(c)
    with pytest.raises(ValueError, match=r"hotpotqa/test\.parquet"):
        make_benchmark(c.env).tasks("hotpotqa")
    # a file named for a split that does not exist: named as such, no fallback either
    c = _search_config("local")
    c.env.datasets = {"train": str(tmp_path / "train.parquet")}
    assert missing_search_data(c.env).startswith("no data file for the search split(s) train: train: env.datasets.train")
    with pytest.raises(ConfigValueError, match=r"env\.datasets\.train.*train\.parquet"):
        check_inputs(c)


def _write_layout(root) -> dict[str, list[str]]:
    need(NQ_PARQUET)
    """Tiny files in Search-R1's layout: parquet rows of the real NQ test file (Search-R1's
    schema) given each split's data source, FlashRAG jsonl for some; returns the questions."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(NQ_PARQUET)
    files = {"train": "nq_hotpotqa_train/train.parquet", "nq": "nq/test.parquet", "triviaqa": "triviaqa/test.jsonl",
             "popqa": "popqa/test.parquet", "hotpotqa": "hotpotqa/dev.parquet",
             "2wikimultihopqa": "2wikimultihopqa/dev.jsonl", "musique": "musique/dev.parquet",
             "bamboogle": "bamboogle/test.jsonl"}
    questions = {}
    for i, (split, rel) in enumerate(files.items()):
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if rel.endswith(".parquet"):
            rows = table.slice(3 * i, 3)
            rows = rows.set_column(rows.schema.get_field_index("data_source"), "data_source",
                                   pa.array(["nq" if split == "train" else split] * 3))
            pq.write_table(rows, path)
            questions[split] = rows.column("question").to_pylist()
        else:
            questions[split] = [f"{split} question {j}?" for j in range(2)]
            path.write_text("".join(json.dumps({"id": f"test_{j}", "question": q, "golden_answers": [f"a{j}"]}) + "\n"
                                    for j, q in enumerate(questions[split])))
    # a dev file beside a test file: the test file is read (as Search-R1's data script picks)
    pq.write_table(table.slice(100, 1), root / "nq" / "dev.parquet")
    return questions


def test_paper_preset_loads_the_seven_eval_splits_and_train_from_the_layout(tmp_path):
    from seed_jax.pipeline.environments import make_benchmark
    from seed_jax.pipeline.validate import ConfigValueError, check_inputs, validate

    questions = _write_layout(tmp_path)
    c = _search_config("paper", str(tmp_path))
    c.stage1.analyzer = "self"  # the paper's annotator endpoint is not what this test is about
    validate(c)
    check_inputs(c)
    bench = make_benchmark(c.env)
    assert bench.train_split == "train" and bench.eval_splits == PAPER_EVAL_SPLITS
    for split in ("train", *PAPER_EVAL_SPLITS):
        tasks = bench.tasks(split)
        assert [t["question"] for t in tasks] == questions[split], split
        assert {t["data_source"] for t in tasks} == {"nq" if split == "train" else split}
        assert len({t["task_id"] for t in tasks}) == len(tasks)
    # one file gone: only that split is named
    os.remove(tmp_path / "musique" / "dev.parquet")
    with pytest.raises(ConfigValueError) as err:
        check_inputs(c)
    assert "split(s) musique: musique: " in str(err.value) and "nq/test.parquet" not in str(err.value)


def test_launch_refuses_the_paper_preset_without_data_with_exit_status_2(tmp_path):
    workdir = tmp_path / "run"
    cmd = [sys.executable, "-m", "seed_jax.launch", "--config=configs/search.py:paper",
           f"--config.model.path={tmp_path}", f"--config.env.data_dir={tmp_path}", f"--workdir={workdir}"]
    r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PYTHONPATH": REPO})
    assert r.returncode == 2, r.stderr[-2000:]
    assert r.stderr.strip().startswith("error: config.env.data_dir: ") and "\n" not in r.stderr.strip()
    assert os.path.join(str(tmp_path), "bamboogle", "test.parquet") in r.stderr
    assert not workdir.exists()


@pytest.mark.slow
def test_server_holds_1024_concurrent_clients():
    """Bounded loopback load: 1,024 clients connect at once (2,048 requests in all) to the real
    server process; every request is answered, with the embedded retriever's top-3."""
    from seed_jax.envs.search.load import burst, serve_subprocess

    tasks = load_default_tasks()
    queries = [t["question"] for t in tasks]
    proc, url = serve_subprocess()
    try:
        result = burst(url, queries, clients=1024, rounds=2, timeout=60)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert result.errors == [] and len(result.latencies) == 2048, result.summary()
    ref = BM25Retriever(default_corpus_path(), use_cache=False)
    assert result.answers == {q: [p.id for p in ref.search([q], 3)[0]] for q in queries}
