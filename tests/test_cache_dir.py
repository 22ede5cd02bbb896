"""One cache variable: ``$SEED_JAX_CACHE`` roots every cache (BM25 indexes, converted
tokenizers); the old ``$SEED_JAX_CACHE_DIR`` still works, with a deprecation warning."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from seed_jax.envs.cache import cache_root
from seed_jax.envs.search import BM25Retriever
from seed_jax.models.tokenizer import _cache_dir


def test_cache_root_rule():
    assert cache_root({"SEED_JAX_CACHE": "/a", "XDG_CACHE_HOME": "/x"}) == Path("/a")
    assert cache_root({"XDG_CACHE_HOME": "/x"}) == Path("/x/seed_jax")
    assert cache_root({}) == Path.home() / ".cache" / "seed_jax"
    with pytest.warns(FutureWarning, match=r"SEED_JAX_CACHE_DIR is deprecated \(read for now"):
        assert cache_root({"SEED_JAX_CACHE_DIR": "/old"}) == Path("/old")
    with pytest.warns(FutureWarning, match=r"deprecated \(ignored: \$SEED_JAX_CACHE is set"):
        assert cache_root({"SEED_JAX_CACHE": "/a", "SEED_JAX_CACHE_DIR": "/old"}) == Path("/a")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cache_root({"SEED_JAX_CACHE": "/a"})  # no warning with the one variable


@pytest.mark.parametrize("var, warns", [("SEED_JAX_CACHE", False), ("SEED_JAX_CACHE_DIR", True)])
def test_every_cache_follows_the_variable(tmp_path, monkeypatch, var, warns):
    monkeypatch.delenv("SEED_JAX_CACHE", raising=False)
    monkeypatch.delenv("SEED_JAX_CACHE_DIR", raising=False)
    monkeypatch.setenv(var, str(tmp_path / "root"))
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(json.dumps({"id": "a", "contents": '"A"\nred apple'}) + "\n")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        r = BM25Retriever(corpus)
        tok_root = _cache_dir()
    assert Path(r.cache_path).parent == tmp_path / "root" / "bm25" and Path(r.cache_path).is_dir()
    assert tok_root == tmp_path / "root"
    deprecations = [w for w in caught if issubclass(w.category, FutureWarning)]
    assert bool(deprecations) == warns
