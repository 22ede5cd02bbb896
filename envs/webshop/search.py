"""BM25 product search (stands in for the original pyserini/Lucene index).

Documents are built as the original ``search_engine/convert_product_file_format.py``:
``" ".join([Title, Description, BulletPoints[0], option_text]).lower()`` with
``option_text = ", and ".join(f"{name}: {', '.join(values)}")``.

Analyzer: lower-case, split on non-alphanumerics, drop Lucene's English stop words, and a
light plural stemmer (``ies`` -> ``y``; ``xes/ches/shes/sses`` -> drop ``es``; trailing ``s``
except ``ss``/``us``/``is`` dropped). Lucene uses a Porter stemmer; this lighter one is a
simplification.

Score: Lucene BM25 of `envs.bm25` (the search environment's too; pyserini defaults ``k1 = 0.9``,
``b = 0.4``), summed over query terms (with repetition):
``idf(t) * tf / (tf + k1 * (1 - b + b * dl / avgdl))``,
``idf(t) = ln(1 + (N - df + 0.5) / (df + 0.5))``. Documents with score > 0 are ranked by
score, ties by catalog order; the top ``SEARCH_RETURN_N = 50`` are returned, shown
``PRODUCT_WINDOW = 10`` per page.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

import numpy as np

from seed_jax.envs.bm25 import BM25

SEARCH_RETURN_N = 50
PRODUCT_WINDOW = 10
K1 = 0.9
B = 0.4

LUCENE_STOP_WORDS = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their "
    "then there these they this to was will with".split())
_TOKEN = re.compile(r"[a-z0-9]+")


def stem(token: str) -> str:
    """Light plural stemmer (see module docstring)."""
    if len(token) > 4 and token.endswith("ies"):
        return token[:-3] + "y"
    if len(token) > 4 and token.endswith(("xes", "ches", "shes", "sses")):
        return token[:-2]
    if len(token) > 3 and token.endswith("s") and not token.endswith(("ss", "us", "is")):
        return token[:-1]
    return token


def analyze(text: str) -> list[str]:
    """Text -> index terms (lower-case, tokenise, drop stop words, stem)."""
    return [stem(t) for t in _TOKEN.findall(text.lower()) if t not in LUCENE_STOP_WORDS]


def product_document(title: str, description: str, bullet_points: Sequence[str],
                     options: dict[str, list[str]]) -> str:
    """The indexed text of one product (original document layout)."""
    option_text = ", and ".join(f"{name}: {', '.join(values)}" for name, values in options.items())
    first_bullet = bullet_points[0] if bullet_points else ""
    return " ".join([title, description, first_bullet, option_text]).lower()


class BM25Index:
    """BM25 over (doc_id, text) pairs: `envs.bm25.BM25` with this module's `analyze`, in memory,
    float64 scores (a catalog is small)."""

    def __init__(self, docs: Iterable[tuple[str, str]], k1: float = K1, b: float = B):
        pairs = list(docs)
        self.doc_ids: list[str] = [doc_id for doc_id, _ in pairs]
        self.bm25 = BM25.build((text for _, text in pairs), analyze, k1=k1, b=b, dtype="float64")

    @property
    def n_docs(self) -> int:
        return len(self.doc_ids)

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of every document for `query`, float64 [N]."""
        return self.bm25.scores(query)

    def search(self, query: str, k: int = SEARCH_RETURN_N) -> list[str]:
        """Top-k doc ids by score (score > 0; ties by insertion order)."""
        return [self.doc_ids[i] for i, _ in self.bm25.top(query, k)]


def page_slice(items: Sequence[str], page: int, window: int = PRODUCT_WINDOW) -> list[str]:
    """Items shown on 1-based results `page` (original `get_product_per_page`)."""
    return list(items[(page - 1) * window: page * window])
