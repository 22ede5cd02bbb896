"""The search environment's BM25 analyzer and index cache location (the scoring is `envs.bm25`).

Tokenisation: lower-cased maximal runs of Unicode letters/digits (``[^\\W_]+``), optionally
without Lucene's classic English stop words (the Anserini/Pyserini default analyzer also
removes these; it additionally Porter-stems, which is not done here). Scores follow Lucene's
BM25 (k1 = 0.9, b = 0.4 defaults, formula in `envs.bm25`); Lucene encodes |d| lossily, so
absolute scores differ slightly from Pyserini's.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re

from seed_jax.envs.cache import cache_root

FORMAT_VERSION = 2  # 1: npz inverted index; 2: bm25s directory + corpus line spans

# Lucene's classic English stop set (EnglishAnalyzer.ENGLISH_STOP_WORDS_SET).
ENGLISH_STOPWORDS = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their "
    "then there these they this to was will with".split()
)

_WORD = re.compile(r"[^\W_]+")


def tokenize(text: str, stopwords: bool = True) -> list[str]:
    """Lower-case alphanumeric words of `text`; drops ENGLISH_STOPWORDS when `stopwords`."""
    words = _WORD.findall(text.lower())
    if stopwords:
        return [w for w in words if w not in ENGLISH_STOPWORDS]
    return words


def analyzer(stopwords: bool = True):
    """`tokenize` with ``stopwords`` fixed (the analyzer of an `envs.bm25.BM25`)."""
    return functools.partial(tokenize, stopwords=stopwords)


def default_cache_dir() -> str:
    """``<cache root>/bm25`` (`envs.cache.cache_root`: ``$SEED_JAX_CACHE``, else
    ``$XDG_CACHE_HOME/seed_jax``, else ``~/.cache/seed_jax``)."""
    return os.fspath(cache_root() / "bm25")


def file_sha256(path: str | os.PathLike) -> str:
    """Hex sha256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
