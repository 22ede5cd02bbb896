"""Passages, corpus files and the `<information>` block of the Search QA environment.

A corpus is a jsonl file with one ``{"id": str, "contents": str}`` object per line, where
``contents = '"Title"\\ntext'`` (the wiki-18 / FlashRAG / Search-R1 convention).
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterator

import numpy as np


@dataclasses.dataclass(frozen=True)
class Passage:
    """One retrieved passage: corpus id, raw ``contents`` and the retriever's score."""

    id: str
    contents: str
    score: float = 0.0

    @property
    def title(self) -> str:
        """First line of ``contents`` without the surrounding double quotes."""
        return self.contents.split("\n", 1)[0].strip().strip('"')

    @property
    def text(self) -> str:
        """Everything after the first line of ``contents``."""
        parts = self.contents.split("\n", 1)
        return parts[1] if len(parts) > 1 else ""

    def document(self) -> dict:
        """The JSON document of the Search-R1 API: ``{"id", "contents"}``."""
        return {"id": self.id, "contents": self.contents}


def iter_corpus_jsonl(path: str | os.PathLike) -> Iterator[tuple[int, int, dict]]:
    """``(offset, length, {"id", "contents"})`` per non-blank line of a jsonl corpus (byte
    offset and length of the line), ids as strings.

    Raises ValueError naming the file and line for malformed lines, missing keys, duplicated
    ids and an empty corpus."""
    seen: set[str] = set()
    offset = 0
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            start, offset = offset, offset + len(raw)
            if not raw.strip():
                continue
            doc = _corpus_line(raw, path, lineno)
            if doc["id"] in seen:
                raise ValueError(f"{path}:{lineno}: duplicated id {doc['id']!r}")
            seen.add(doc["id"])
            yield start, len(raw), doc
    if not seen:
        raise ValueError(f"{path}: empty corpus")


def _corpus_line(raw: bytes, path, lineno) -> dict:
    try:
        row = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}:{lineno}: not a JSON object ({e})") from e
    if not isinstance(row, dict) or "contents" not in row or "id" not in row:
        raise ValueError(f'{path}:{lineno}: expected keys "id" and "contents"')
    if not isinstance(row["contents"], str):
        raise ValueError(f'{path}:{lineno}: "contents" must be a string')
    return {"id": str(row["id"]), "contents": row["contents"]}


def read_corpus_jsonl(path: str | os.PathLike) -> list[dict]:
    """Read a ``{"id", "contents"}`` jsonl corpus into memory (`iter_corpus_jsonl`'s checks)."""
    return [doc for _, _, doc in iter_corpus_jsonl(path)]


class CorpusFile:
    """Documents of a jsonl corpus read on demand: ``corpus[i]`` reads line i (its byte range
    ``spans[i] = (offset, length)``, from `iter_corpus_jsonl`) with one ``os.pread``, so a
    wiki-scale corpus is not held in memory; safe to share between threads."""

    def __init__(self, path: str | os.PathLike, spans: np.ndarray):
        self.path, self.spans = os.fspath(path), spans
        self._fd = os.open(self.path, os.O_RDONLY)

    def __len__(self) -> int:
        return int(self.spans.shape[0])

    def __getitem__(self, i: int) -> dict:
        offset, length = (int(x) for x in self.spans[i])
        return _corpus_line(os.pread(self._fd, length, offset), self.path, f"byte {offset}")

    def __del__(self):
        fd = getattr(self, "_fd", None)
        if fd is not None:
            os.close(fd)


def format_passages(passages: list[Passage]) -> str:
    """Search-R1's passage listing: ``Doc i(Title: <first line>) <rest>`` one per line.

    The title is the raw first line of ``contents`` (quotes kept), as Search-R1 prints it.
    """
    lines = []
    for i, p in enumerate(passages, 1):
        parts = p.contents.split("\n", 1)
        text = parts[1] if len(parts) > 1 else ""
        lines.append(f"Doc {i}(Title: {parts[0]}) {text}")
    return "\n".join(lines)


def format_information(passages: list[Passage]) -> str:
    """The observation of a search step: ``<information>Doc 1(...) ...</information>``."""
    return f"<information>{format_passages(passages).strip()}</information>"
