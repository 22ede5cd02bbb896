"""Question sets and the vendored default corpus of the Search QA environment.

Every loader returns JSON-serialisable task dicts::

    {"task_id": str, "question": str, "golden_answers": [str, ...], "data_source": str}

Formats: Search-R1 parquet (columns ``question``, ``golden_answers``, ``data_source``, ``id``;
answers fall back to ``reward_model.ground_truth.target``), HotpotQA json (a list of
``{"_id", "question", "answer", ...}``, as the official files and HippoRAG's copies) and
FlashRAG jsonl (``{"id", "question", "golden_answers"}``).

The paper's data (`SEARCH_R1_EVAL_SPLITS`, `search_r1_files`): Search-R1's training set (NQ +
HotpotQA train) and the test sets of seven QA benchmarks, one file per split under a data
directory::

    <data_dir>/nq_hotpotqa_train/train.parquet      (split 'train')
    <data_dir>/nq/test.parquet                      (split 'nq'; likewise triviaqa, popqa, bamboogle)
    <data_dir>/hotpotqa/dev.parquet                 (split 'hotpotqa'; likewise 2wikimultihopqa, musique)

An eval split takes the first of ``test.parquet``, ``test.jsonl``, ``dev.parquet``,
``dev.jsonl`` in its folder (test, else dev, as Search-R1's data script picks; the .jsonl
files in FlashRAG's format); the train split ``train.parquet`` or ``train.jsonl``.

The default set (``envs/search/data/``, see SOURCES.md there) is the 100 HotpotQA questions
of HippoRAG's ``hotpotqa_train.json`` over a corpus of their 994 context paragraphs plus
1,000 wiki-18 passages of FlashRAG's sample; rebuild it with
``python -m seed_jax.envs.search.data --build-default SRC_DIR envs/search/data``, with ``SRC_DIR`` a
folder holding HippoRAG's ``hipporag/hotpotqa_train{,_corpus}.json`` and FlashRAG's
``flashrag/wiki_sample_data.jsonl`` (``$SEED_SEARCH_QA_DATA`` in the development setup).
"""

from __future__ import annotations

import argparse
import json
import os

from seed_jax.envs.search.corpus import read_corpus_jsonl

DATA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
DEFAULT_CORPUS = "default_corpus.jsonl"
DEFAULT_TASKS = "default_tasks.jsonl"
TASK_KEYS = ("task_id", "question", "golden_answers", "data_source")
# the QA benchmarks the paper evaluates on (Search-R1's seven test sets)
SEARCH_R1_EVAL_SPLITS = ("nq", "triviaqa", "popqa", "hotpotqa", "2wikimultihopqa", "musique", "bamboogle")
SEARCH_R1_TRAIN_DIR = "nq_hotpotqa_train"  # Search-R1's training set: NQ + HotpotQA train


def make_task(task_id, question, golden_answers, data_source: str) -> dict:
    """A validated task dict; `golden_answers` may be a str or a sequence of str."""
    if isinstance(golden_answers, str):
        golden_answers = [golden_answers]
    answers = [str(a) for a in (golden_answers or [])]
    if not isinstance(question, str) or not question.strip():
        raise ValueError(f"task {task_id!r}: empty or non-string question")
    if not answers:
        raise ValueError(f"task {task_id!r}: no golden answers")
    return {"task_id": str(task_id), "question": question.strip(), "golden_answers": answers, "data_source": str(data_source)}


def validate_task(task: dict) -> dict:
    """Check a task dict has the four keys with the right types; returns it."""
    if not isinstance(task, dict):
        raise TypeError(f"a search task is a dict with keys {TASK_KEYS}, got {type(task).__name__}")
    missing = [k for k in TASK_KEYS if k not in task]
    if missing:
        raise ValueError(f"search task missing keys {missing}; needs {TASK_KEYS}")
    if not isinstance(task["question"], str) or not task["question"].strip():
        raise ValueError(f"task {task['task_id']!r}: empty or non-string question")
    ga = task["golden_answers"]
    if isinstance(ga, str) or not ga or not all(isinstance(a, str) for a in ga):
        raise ValueError(f"task {task['task_id']!r}: golden_answers must be a non-empty list of str")
    return task


def load_searchr1_parquet(path: str, limit: int | None = None, data_source: str | None = None) -> list[dict]:
    """Search-R1 parquet rows -> tasks; task_id = ``<data_source>-<id>`` (or row index).

    A row without ``data_source`` takes `data_source`, else the file's name, or its folder's
    name when the file is named after a split (``nq/test.parquet`` -> 'nq')."""
    import pyarrow.parquet as pq  # deferred: heavy, needed only for parquet files

    table = pq.read_table(path)
    cols = set(table.column_names)
    if "question" not in cols:
        raise ValueError(f"{path}: no 'question' column (columns: {sorted(cols)})")
    if limit is not None:
        table = table.slice(0, limit)
    default_source = os.path.splitext(os.path.basename(path))[0]
    if default_source in ("train", "test", "dev"):
        default_source = os.path.basename(os.path.dirname(os.path.abspath(path))) or default_source
    default_source = data_source or default_source
    tasks = []
    for i, row in enumerate(table.to_pylist()):
        answers = row.get("golden_answers")
        if answers is None:
            answers = ((row.get("reward_model") or {}).get("ground_truth") or {}).get("target")
        source = row.get("data_source") or default_source
        rid = row.get("id")
        if rid is None:
            rid = (row.get("extra_info") or {}).get("index", i)
        tasks.append(make_task(f"{source}-{rid}", row["question"], answers, source))
    return tasks


def load_hotpotqa_json(path: str, limit: int | None = None) -> list[dict]:
    """HotpotQA json (list of {"_id", "question", "answer"}) -> tasks, data_source 'hotpotqa'."""
    with open(path, encoding="utf-8") as f:
        items = json.load(f)
    if not isinstance(items, list):
        raise ValueError(f"{path}: expected a JSON list of HotpotQA items")
    tasks = []
    for i, it in enumerate(items[:limit]):
        if "question" not in it or "answer" not in it:
            raise ValueError(f"{path}: item {i} lacks 'question' or 'answer'")
        tasks.append(make_task(f"hotpotqa-{it.get('_id', i)}", it["question"], [it["answer"]], "hotpotqa"))
    return tasks


def load_flashrag_jsonl(path: str, data_source: str | None = None, limit: int | None = None) -> list[dict]:
    """FlashRAG jsonl ({"id", "question", "golden_answers"}) -> tasks.

    data_source defaults to the parent folder name (FlashRAG's ``<dataset>/<split>.jsonl``).
    """
    source = data_source or os.path.basename(os.path.dirname(os.path.abspath(path))) or "flashrag"
    tasks = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            row = json.loads(line)
            if "question" not in row or "golden_answers" not in row:
                raise ValueError(f"{path}:{lineno}: needs 'question' and 'golden_answers'")
            tasks.append(make_task(f"{source}-{row.get('id', lineno - 1)}", row["question"], row["golden_answers"], source))
            if limit is not None and len(tasks) >= limit:
                break
    return tasks


def load_tasks(path: str, data_source: str | None = None, limit: int | None = None) -> list[dict]:
    """Dispatch on the extension: .parquet (Search-R1), .json (HotpotQA), .jsonl (FlashRAG or
    already-made task dicts, recognised by a ``task_id`` key)."""
    if path.endswith(".parquet"):
        return load_searchr1_parquet(path, limit, data_source)
    if path.endswith(".json"):
        return load_hotpotqa_json(path, limit)
    if path.endswith(".jsonl"):
        with open(path, encoding="utf-8") as f:
            first = next((json.loads(l) for l in f if l.strip()), {})
        if "task_id" in first:
            return read_tasks_jsonl(path, limit)
        return load_flashrag_jsonl(path, data_source, limit)
    raise ValueError(f"unknown task file type {path!r}: expected .parquet, .json or .jsonl")


def read_tasks_jsonl(path: str, limit: int | None = None) -> list[dict]:
    """Task dicts stored one per line (the format of write_jsonl(tasks))."""
    with open(path, encoding="utf-8") as f:
        tasks = [validate_task(json.loads(l)) for l in f if l.strip()]
    return tasks[:limit]


def write_jsonl(rows: list[dict], path: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")


def hotpotqa_corpus_docs(corpus_json: str, id_prefix: str = "hotpotqa-") -> list[dict]:
    """HippoRAG's ``{title: [sentences]}`` -> ``{"id", "contents": '"title"\\ntext'}`` docs.

    HotpotQA sentences carry their own leading spaces, so the text is their concatenation.
    """
    with open(corpus_json, encoding="utf-8") as f:
        paragraphs = json.load(f)
    return [
        {"id": f"{id_prefix}{i}", "contents": f'"{title}"\n' + "".join(sents).strip()}
        for i, (title, sents) in enumerate(paragraphs.items())
    ]


def build_default_set(src_dir: str, out_dir: str = DATA_DIR) -> tuple[int, int]:
    """Write the default corpus (HotpotQA paragraphs + wiki-18 sample) and tasks.

    `src_dir` holds ``hipporag/hotpotqa_train.json``, ``hipporag/hotpotqa_train_corpus.json`` and
    ``flashrag/wiki_sample_data.jsonl`` (module docstring). Returns (num passages, num tasks).
    """
    docs = hotpotqa_corpus_docs(os.path.join(src_dir, "hipporag", "hotpotqa_train_corpus.json"))
    for d in read_corpus_jsonl(os.path.join(src_dir, "flashrag", "wiki_sample_data.jsonl")):
        docs.append({"id": f"wiki18-{d['id']}", "contents": d["contents"]})
    tasks = load_hotpotqa_json(os.path.join(src_dir, "hipporag", "hotpotqa_train.json"))
    os.makedirs(out_dir, exist_ok=True)
    write_jsonl(docs, os.path.join(out_dir, DEFAULT_CORPUS))
    write_jsonl(tasks, os.path.join(out_dir, DEFAULT_TASKS))
    return len(docs), len(tasks)


def search_r1_files(data_dir: str, split: str) -> list[str]:
    """The files a split may have under `data_dir` in Search-R1's layout (module docstring), in
    order of preference: ``train`` reads ``nq_hotpotqa_train/train.{parquet,jsonl}``, any other
    split ``<split>/{test,dev}.{parquet,jsonl}``."""
    stems = [os.path.join(SEARCH_R1_TRAIN_DIR, "train")] if split == "train" else [
        os.path.join(split, "test"), os.path.join(split, "dev")]
    return [os.path.join(data_dir, stem + ext) for stem in stems for ext in (".parquet", ".jsonl")]


def find_search_r1_file(data_dir: str, split: str) -> str | None:
    """The first of `search_r1_files` that exists, else None."""
    return next((p for p in search_r1_files(data_dir, split) if os.path.isfile(p)), None)


def default_corpus_path() -> str:
    """The vendored default corpus (1,994 passages)."""
    return os.path.join(DATA_DIR, DEFAULT_CORPUS)


def load_default_tasks(limit: int | None = None) -> list[dict]:
    """The vendored default tasks (100 HotpotQA questions answerable from the default corpus)."""
    return read_tasks_jsonl(os.path.join(DATA_DIR, DEFAULT_TASKS), limit)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description="Search QA data tools")
    p.add_argument("--build-default", nargs=2, metavar=("SRC_DIR", "OUT_DIR"),
                   help="build the default corpus/tasks from SRC_DIR (HippoRAG + FlashRAG source files)")
    p.add_argument("--show", metavar="TASK_FILE", help="print the number of tasks and the first one")
    args = p.parse_args(argv)
    if args.build_default:
        n_docs, n_tasks = build_default_set(*args.build_default)
        print(f"wrote {n_docs} passages and {n_tasks} tasks to {args.build_default[1]}")
    if args.show:
        tasks = load_tasks(args.show)
        print(len(tasks), json.dumps(tasks[0], ensure_ascii=False))


if __name__ == "__main__":
    main()
