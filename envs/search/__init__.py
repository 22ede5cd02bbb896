"""Search QA environment: retrievers (embedded BM25, Search-R1 HTTP), datasets, EM reward.

Importable without JAX (standard library + numpy; pyarrow only for parquet loading).
"""

from seed_jax.envs.search.corpus import Passage, format_information, read_corpus_jsonl
from seed_jax.envs.search.data import (
    SEARCH_R1_EVAL_SPLITS,
    default_corpus_path,
    find_search_r1_file,
    load_default_tasks,
    load_flashrag_jsonl,
    load_hotpotqa_json,
    load_searchr1_parquet,
    load_tasks,
    search_r1_files,
)
from seed_jax.envs.search.env import SEARCH_SPEC, SearchEnv
from seed_jax.envs.search.factory import RetrieverSpec, SearchEnvFactory, build_retriever, make_search_env
from seed_jax.envs.search.retriever import (
    BM25Retriever,
    HttpRetriever,
    Retriever,
    RetrieverError,
    RetrieverUnavailableError,
)
from seed_jax.envs.search.reward import exact_match, normalize_answer

__all__ = [
    "BM25Retriever", "HttpRetriever", "Passage", "Retriever", "RetrieverError", "RetrieverSpec",
    "RetrieverUnavailableError", "SEARCH_R1_EVAL_SPLITS", "SEARCH_SPEC", "SearchEnv", "SearchEnvFactory", "build_retriever",
    "default_corpus_path", "exact_match", "find_search_r1_file", "format_information", "load_default_tasks",
    "load_flashrag_jsonl", "load_hotpotqa_json", "load_searchr1_parquet", "load_tasks",
    "make_search_env", "normalize_answer", "read_corpus_jsonl", "search_r1_files",
]
