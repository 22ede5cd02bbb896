"""Retriever interface of the Search QA environment and its two backends.

- `BM25Retriever`: embedded Okapi BM25 (`envs.bm25`, on bm25s) over a ``{"id", "contents"}``
  jsonl corpus; the index is built once per corpus file (keyed by its sha256), cached on disk
  and memory-mapped.
- `HttpRetriever`: client of the Search-R1 retrieval API
  (``POST /retrieve {"queries": [..], "topk": k, "return_scores": true}`` ->
  ``{"result": [[{"document": {"id", "contents"}, "score": s}, ...], ...]}``), with timeouts,
  bounded retries with exponential backoff and `RetrieverUnavailableError` naming the URL.
"""

from __future__ import annotations

import http.client
import json
import os
import time
import urllib.error
import urllib.request
from typing import Protocol, runtime_checkable

import numpy as np

from seed_jax.envs.bm25 import BM25
from seed_jax.envs.search.bm25 import FORMAT_VERSION, analyzer, default_cache_dir, file_sha256
from seed_jax.envs.search.corpus import CorpusFile, Passage, iter_corpus_jsonl


class RetrieverError(RuntimeError):
    """A retriever answered, but not with a usable result (bad request, bad response)."""


class RetrieverUnavailableError(RetrieverError):
    """The retriever could not be reached after all retries."""


@runtime_checkable
class Retriever(Protocol):
    def search(self, queries: list[str], topk: int) -> list[list[Passage]]:
        """For each query, up to `topk` passages, best first."""
        ...


def _check_queries(queries: list[str], topk: int) -> None:
    if isinstance(queries, str) or not all(isinstance(q, str) for q in queries):
        raise TypeError(f"queries must be a list of str, got {type(queries).__name__}")
    if not isinstance(topk, int) or isinstance(topk, bool) or topk < 1:
        raise ValueError(f"topk must be a positive int, got {topk!r}")


class BM25Retriever:
    """Embedded BM25 (`envs.bm25`; k1=0.9, b=0.4 by default, as Pyserini) over a jsonl corpus.

    The index is cached in ``<cache_dir>/<sha256 of corpus>-sw<0|1>-k<k1>-b<b>-v<format>/``
    (bm25s's format, memory-mapped when loaded) with the byte span of every corpus line
    (``spans.npy``): passages are read from the corpus file on demand, so neither the corpus
    nor the index has to fit in memory. A stale or unreadable cache is rebuilt. Passages with
    zero score are never returned, so a query without any corpus word gives an empty list.
    """

    def __init__(
        self,
        corpus_path: str | os.PathLike,
        *,
        k1: float = 0.9,
        b: float = 0.4,
        stopwords: bool = True,
        cache_dir: str | os.PathLike | None = None,
        use_cache: bool = True,
    ):
        self.corpus_path = os.fspath(corpus_path)
        if not os.path.isfile(self.corpus_path):
            raise FileNotFoundError(f"BM25 corpus not found: {self.corpus_path}")
        sha = file_sha256(self.corpus_path)
        meta = {"format": FORMAT_VERSION, "corpus_sha256": sha, "stopwords": bool(stopwords), "k1": k1, "b": b}
        cache_dir = os.fspath(cache_dir) if cache_dir is not None else default_cache_dir()
        self.cache_path = os.path.join(cache_dir, f"{sha}-sw{int(bool(stopwords))}-k{k1:g}-b{b:g}-v{FORMAT_VERSION}")
        spans_path = os.path.join(self.cache_path, "spans.npy")
        index = spans = None
        if use_cache and os.path.exists(spans_path):
            try:
                spans = np.load(spans_path, mmap_mode="r", allow_pickle=False)
            except (OSError, ValueError):
                spans = None
            if spans is not None:
                index = BM25.load(self.cache_path, analyzer(stopwords), {**meta, "num_docs": len(spans)})
        self.loaded_from_cache = index is not None
        if index is None:
            rows: list[tuple[int, int]] = []

            def contents():
                for offset, length, doc in iter_corpus_jsonl(self.corpus_path):
                    rows.append((offset, length))
                    yield doc["contents"]

            index = BM25.build(contents(), analyzer(stopwords), k1=k1, b=b)
            spans = np.asarray(rows, dtype=np.int64).reshape(-1, 2)
            if use_cache:
                index.save(self.cache_path, {**meta, "num_docs": len(spans)})
                np.save(spans_path, spans, allow_pickle=False)
        self.index = index
        self.docs = CorpusFile(self.corpus_path, spans)

    @property
    def num_docs(self) -> int:
        return len(self.docs)

    def search(self, queries: list[str], topk: int) -> list[list[Passage]]:
        _check_queries(queries, topk)
        out = []
        for q in queries:
            hits = self.index.top(q, topk)
            docs = [self.docs[i] for i, _ in hits]
            out.append([Passage(d["id"], d["contents"], s) for d, (_, s) in zip(docs, hits)])
        return out


def _parse_document(item, where: str) -> Passage:
    """One entry of a Search-R1 result list: ``{"document": {...}, "score": s}`` or a bare doc."""
    if isinstance(item, dict) and isinstance(item.get("document"), dict):
        doc, score = item["document"], item.get("score", 0.0)
    elif isinstance(item, dict) and "contents" in item:
        doc, score = item, 0.0
    else:
        raise RetrieverError(f"{where}: unexpected result entry {str(item)[:200]!r}")
    if not isinstance(doc.get("contents"), str):
        raise RetrieverError(f'{where}: document without string "contents"')
    try:
        score = float(score)
    except (TypeError, ValueError) as e:
        raise RetrieverError(f"{where}: non-numeric score {score!r}") from e
    return Passage(str(doc.get("id", "")), doc["contents"], score)


class HttpRetriever:
    """Client of a Search-R1 compatible ``/retrieve`` server.

    ``request_form="batched"`` sends ``{"queries": [...]}`` in one request (what Search-R1's
    retrieval_server.py accepts); ``"single"`` sends one ``{"query": q}`` request per query.
    A request is tried ``1 + max_retries`` times on connection errors, timeouts and HTTP 5xx
    / 429, sleeping ``min(backoff * 2**i, max_backoff)`` between tries; then
    RetrieverUnavailableError names the URL and the last error. HTTP 4xx and malformed
    responses raise RetrieverError at once.
    """

    def __init__(
        self,
        url: str,
        *,
        timeout: float = 10.0,
        max_retries: int = 3,
        backoff: float = 0.5,
        max_backoff: float = 8.0,
        request_form: str = "batched",
        use_env_proxy: bool = False,
    ):
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"retriever url must start with http:// or https://, got {url!r}")
        if request_form not in ("batched", "single"):
            raise ValueError(f"request_form must be 'batched' or 'single', got {request_form!r}")
        if max_retries < 0 or timeout <= 0:
            raise ValueError("need max_retries >= 0 and timeout > 0")
        self.url = url if url.rstrip("/").endswith("/retrieve") else url.rstrip("/") + "/retrieve"
        self.timeout, self.max_retries = timeout, max_retries
        self.backoff, self.max_backoff = backoff, max_backoff
        self.request_form = request_form
        handlers = [] if use_env_proxy else [urllib.request.ProxyHandler({})]
        self._opener = urllib.request.build_opener(*handlers)

    def _post(self, payload: dict) -> dict:
        body = json.dumps(payload).encode("utf-8")
        last: Exception | None = None
        for attempt in range(self.max_retries + 1):
            if attempt:
                time.sleep(min(self.backoff * 2 ** (attempt - 1), self.max_backoff))
            req = urllib.request.Request(self.url, data=body, headers={"Content-Type": "application/json"}, method="POST")
            try:
                with self._opener.open(req, timeout=self.timeout) as resp:
                    raw = resp.read()
            except urllib.error.HTTPError as e:
                detail = e.read()[:500].decode("utf-8", "replace")
                if e.code >= 500 or e.code == 429:
                    last = RuntimeError(f"HTTP {e.code}: {detail}")
                    continue
                raise RetrieverError(f"retriever at {self.url} rejected the request: HTTP {e.code}: {detail}") from e
            except (urllib.error.URLError, ConnectionError, TimeoutError, http.client.HTTPException) as e:
                last = e
                continue
            try:
                data = json.loads(raw)
            except json.JSONDecodeError as e:
                raise RetrieverError(f"retriever at {self.url} returned non-JSON: {raw[:200]!r}") from e
            if not isinstance(data, dict) or not isinstance(data.get("result"), list):
                raise RetrieverError(f'retriever at {self.url} returned no "result" list: {str(data)[:200]}')
            return data
        raise RetrieverUnavailableError(
            f"retriever at {self.url} unavailable after {self.max_retries + 1} attempts "
            f"(timeout {self.timeout}s each): {type(last).__name__}: {last}"
        )

    def search(self, queries: list[str], topk: int) -> list[list[Passage]]:
        _check_queries(queries, topk)
        if not queries:
            return []
        if self.request_form == "batched":
            result = self._post({"queries": list(queries), "topk": topk, "return_scores": True})["result"]
        else:
            result = []
            for q in queries:
                r = self._post({"query": q, "topk": topk, "return_scores": True})["result"]
                if len(r) != 1:
                    raise RetrieverError(f"retriever at {self.url}: expected 1 result list for one query, got {len(r)}")
                result.append(r[0])
        if len(result) != len(queries) or not all(isinstance(r, list) for r in result):
            raise RetrieverError(f"retriever at {self.url}: expected {len(queries)} result lists, got {str(result)[:200]}")
        return [[_parse_document(item, self.url) for item in r[:topk]] for r in result]
