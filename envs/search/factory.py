"""Picklable recipes that build a retriever and a SearchEnv inside a worker process."""

from __future__ import annotations

import dataclasses
import functools

from seed_jax.envs.search.data import default_corpus_path
from seed_jax.envs.search.env import SEARCH_SPEC, SearchEnv
from seed_jax.envs.search.retriever import BM25Retriever, HttpRetriever, Retriever


@dataclasses.dataclass(frozen=True)
class RetrieverSpec:
    """Which retriever to build. kind 'bm25': embedded index over `corpus_path` (None = the
    vendored default corpus); kind 'http': Search-R1 API client of `url`."""

    kind: str = "bm25"
    corpus_path: str | None = None
    stopwords: bool = True
    k1: float = 0.9
    b: float = 0.4
    cache_dir: str | None = None
    url: str | None = None
    timeout: float = 10.0
    max_retries: int = 3
    backoff: float = 0.5
    request_form: str = "batched"

    def __post_init__(self):
        if self.kind not in ("bm25", "http"):
            raise ValueError(f"retriever kind must be 'bm25' or 'http', got {self.kind!r}")
        if self.kind == "http" and not self.url:
            raise ValueError("retriever kind 'http' needs a url, e.g. http://127.0.0.1:8000/retrieve")

    @classmethod
    def from_dict(cls, d: dict) -> RetrieverSpec:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown retriever settings {unknown}; known: {sorted(known)}")
        return cls(**d)


@functools.lru_cache(maxsize=8)
def _bm25(spec: RetrieverSpec) -> BM25Retriever:
    return BM25Retriever(
        spec.corpus_path or default_corpus_path(), k1=spec.k1, b=spec.b, stopwords=spec.stopwords, cache_dir=spec.cache_dir
    )


def build_retriever(spec: RetrieverSpec) -> Retriever:
    """The retriever of `spec`; BM25 indexes are shared by all envs of one process."""
    if spec.kind == "bm25":
        return _bm25(spec)
    return HttpRetriever(
        spec.url, timeout=spec.timeout, max_retries=spec.max_retries, backoff=spec.backoff, request_form=spec.request_form
    )


@dataclasses.dataclass(frozen=True)
class SearchEnvFactory:
    """Picklable zero-argument env constructor for worker processes: ``factory() -> SearchEnv``."""

    retriever: RetrieverSpec = RetrieverSpec()
    topk: int = 3
    max_steps: int = SEARCH_SPEC.max_steps
    history_window: int = SEARCH_SPEC.history_window

    def __call__(self) -> SearchEnv:
        return SearchEnv(build_retriever(self.retriever), self.topk, self.max_steps, self.history_window)


def make_search_env(
    retriever: RetrieverSpec | dict | None = None,
    topk: int = 3,
    max_steps: int = SEARCH_SPEC.max_steps,
    history_window: int = SEARCH_SPEC.history_window,
) -> SearchEnv:
    """Build a SearchEnv (top-level, so ``functools.partial(make_search_env, ...)`` pickles)."""
    if retriever is None:
        retriever = RetrieverSpec()
    elif isinstance(retriever, dict):
        retriever = RetrieverSpec.from_dict(retriever)
    return SearchEnvFactory(retriever, topk, max_steps, history_window)()
