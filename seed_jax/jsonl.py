"""JSON-lines files of typed records: one ``record.to_json()`` line per record, UTF-8.

Used for trajectories (`seed_jax.rollout.trajectory`) and stage-1 SFT records
(`seed_jax.skills`); each record type brings its own ``to_json`` / ``from_json``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from typing import Protocol, TypeVar

T = TypeVar("T")


class JsonRecord(Protocol):
    def to_json(self) -> str: ...


def write_records(path: str | os.PathLike, records: Iterable[JsonRecord]) -> int:
    """Write one ``record.to_json()`` line per record (UTF-8); returns the number written.
    Overwrites `path`."""
    n = 0
    with open(path, "w", encoding="utf-8") as f:
        for rec in records:
            f.write(rec.to_json() + "\n")
            n += 1
    return n


def iter_records(path: str | os.PathLike, from_json: Callable[[str], T], what: str) -> Iterator[T]:
    """``from_json(line)`` for each non-blank line of `path`, in order. A line that
    ``from_json`` rejects (ValueError, TypeError or KeyError) raises ``ValueError`` naming the
    file, the line number and `what` (e.g. 'trajectory')."""
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = from_json(line)
            except (ValueError, TypeError, KeyError) as e:
                raise ValueError(f"{path}:{lineno}: not a {what} record: {e}") from e
            yield rec
