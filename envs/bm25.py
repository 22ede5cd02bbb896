"""Okapi BM25, the one implementation of the search and WebShop environments, on ``bm25s``.

Score of document d for query q (Lucene's form, pyserini's defaults k1 = 0.9, b = 0.4; bm25s
method ``"lucene"``)::

    score(q, d) = sum_{t in q} qtf(t) * idf(t) * tf(t,d) / (tf(t,d) + k1 * (1 - b + b * |d| / avgdl))
    idf(t)      = ln(1 + (N - df(t) + 0.5) / (df(t) + 0.5))

with qtf the count of t in the query (a repeated query word counts again, as a Lucene boolean
query of term clauses does), |d| the number of terms of d, avgdl the mean |d| and N the number
of documents. Terms are whatever the caller's analyzer (text -> list of terms) makes of the
text: the search environment's `tokenize`, WebShop's stemming `envs.webshop.search.analyze`.
bm25s stores ``idf(t) * tf / (tf + ...)`` per (term, document) in a CSC matrix, so a query
sums precomputed columns; scores are float32 by default (``dtype``).

`BM25.top` ranks the documents with score > 0, best first, ties by lower document index.

On disk (`BM25.save` / `BM25.load`) an index is bm25s's directory format: ``.npy`` arrays
(read with ``allow_pickle=False``), the vocabulary and parameters as JSON, plus our
``meta.json``; `load` memory-maps the arrays, so a wiki-scale index is paged in on demand
instead of read into memory.
"""

from __future__ import annotations

import array
import importlib
import json
import os
import shutil
import sys
from collections.abc import Callable, Iterable

import numpy as np

Analyzer = Callable[[str], list[str]]
META_FILE = "meta.json"


def _import_bm25s():
    """``bm25s``, imported with JAX hidden unless the process has imported JAX already: bm25s
    imports ``jax.lax`` when it can and runs a top-k on the default device at import time, which
    would start an accelerator runtime in every environment worker. Hidden, it falls back to its
    numpy selection (top-k is done here anyway)."""
    if "bm25s" in sys.modules or "jax" in sys.modules:
        return importlib.import_module("bm25s")
    saved = {name: sys.modules.get(name) for name in ("jax", "jax.lax")}
    sys.modules["jax"] = sys.modules["jax.lax"] = None  # type: ignore[assignment]  # import -> ImportError
    try:
        return importlib.import_module("bm25s")
    finally:
        for name, mod in saved.items():
            if mod is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = mod


class BM25:
    """A bm25s index and the analyzer that made its terms (formula in the module docstring)."""

    def __init__(self, model, analyzer: Analyzer):
        self.model, self.analyzer = model, analyzer
        self.vocab: dict[str, int] = model.vocab_dict

    @classmethod
    def build(cls, texts: Iterable[str], analyzer: Analyzer, k1: float = 0.9, b: float = 0.4,
              dtype: str = "float32") -> BM25:
        """Analyze every text and index the terms. Each document's term ids are kept as a
        compact ``array('i')`` until bm25s has scored them."""
        if k1 < 0 or not 0.0 <= b <= 1.0:
            raise ValueError(f"BM25 needs k1 >= 0 and 0 <= b <= 1, got k1={k1}, b={b}")
        vocab: dict[str, int] = {}
        docs = [array.array("i", [vocab.setdefault(w, len(vocab)) for w in analyzer(text)]) for text in texts]
        if not docs:
            raise ValueError("BM25: no documents to index")
        if not vocab:  # no document has a term: one unused term keeps the matrix well formed
            vocab[""] = 0
        model = _import_bm25s().BM25(k1=k1, b=b, method="lucene", dtype=dtype)
        model.index((docs, vocab), create_empty_token=False, show_progress=False)
        return cls(model, analyzer)

    @property
    def num_docs(self) -> int:
        return int(self.model.scores["num_docs"])

    def save(self, path: str | os.PathLike, meta: dict) -> None:
        """Write the index directory (bm25s format + ``meta.json``); atomic via rename."""
        path = os.fspath(path)
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        self.model.save(tmp, show_progress=False)
        with open(os.path.join(tmp, META_FILE), "w", encoding="utf-8") as f:
            json.dump(meta, f, sort_keys=True)
        shutil.rmtree(path, ignore_errors=True)
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: str | os.PathLike, analyzer: Analyzer, expect_meta: dict, mmap: bool = True) -> BM25 | None:
        """The index saved at ``path`` with meta ``expect_meta``, arrays memory-mapped; None
        when absent, unreadable or stale."""
        path = os.fspath(path)
        try:
            with open(os.path.join(path, META_FILE), encoding="utf-8") as f:
                if json.load(f) != expect_meta:
                    return None
            model = _import_bm25s().BM25.load(path, mmap=mmap, show_progress=False)
        except (OSError, ValueError, KeyError, TypeError):
            return None
        s = model.scores
        if s["num_docs"] != expect_meta.get("num_docs") or len(s["indptr"]) != len(model.vocab_dict) + 1 \
                or len(s["data"]) != len(s["indices"]) or (len(s["indptr"]) and s["indptr"][-1] != len(s["data"])):
            return None
        return cls(model, analyzer)

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of every document for ``query`` ([N], the index's dtype)."""
        ids = [self.vocab[w] for w in self.analyzer(query) if w in self.vocab]
        if not ids:
            return np.zeros(self.num_docs, dtype=self.model.dtype)
        return self.model.get_scores_from_ids(ids)

    def top(self, query: str, k: int) -> list[tuple[int, float]]:
        """Up to k (doc index, score) with score > 0, best first; ties by lower doc index."""
        if k <= 0:
            return []
        sc = self.scores(query)
        hit = np.flatnonzero(sc > 0)
        if hit.size > k:
            # keep every doc tied with the k-th best so the tie-break below is exact
            kth = np.partition(sc[hit], hit.size - k)[hit.size - k]
            hit = hit[sc[hit] >= kth]
        order = np.lexsort((hit, -sc[hit]))[:k]
        return [(int(hit[i]), float(sc[hit[i]])) for i in order]
