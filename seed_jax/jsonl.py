"""JSON-lines files, UTF-8, one JSON object per line.

- Typed records (`write_records` / `iter_records`): trajectories (`seed_jax.rollout.trajectory`)
  and stage-1 SFT records (`seed_jax.skills`); each record type brings its own ``to_json`` /
  ``from_json``.
- Append-only logs of dicts (`append_jsonl` / `read_jsonl`; `append_lines` for records that
  bring their own ``to_json``): metrics.jsonl, skills.jsonl, the other per-update logs and the
  part files of chunked rollouts. Appends are crash-safe: one write of whole lines, then flush and
  ``os.fsync``; `repair_torn_tail` removes a line torn by a kill before the next append, and
  `read_jsonl` skips one at the end with a warning.

Remote paths (``gs://...``, `seed_jax.paths`): an object store has no append, so `append_jsonl`
reads the object and uploads it again with the new lines (an object appears whole: nothing is
ever torn, `repair_torn_tail` has nothing to do). The cost grows with the file (each append
re-uploads it), small for these logs next to an RL update. Local files behave as above.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import IO, Any, Protocol, TypeVar

from seed_jax.paths import is_remote, run_path

T = TypeVar("T")


class JsonRecord(Protocol):
    def to_json(self) -> str: ...


def _open(path: str | os.PathLike, mode: str) -> IO[str]:
    """A text file (UTF-8) of a local or remote path."""
    if is_remote(path):
        return run_path(path).open(mode, encoding="utf-8")
    return open(path, mode, encoding="utf-8")


def write_records(path: str | os.PathLike, records: Iterable[JsonRecord]) -> int:
    """Write one ``record.to_json()`` line per record (UTF-8); returns the number written.
    Overwrites `path`."""
    n = 0
    with _open(path, "w") as f:
        for rec in records:
            f.write(rec.to_json() + "\n")
            n += 1
    return n


def iter_records(path: str | os.PathLike, from_json: Callable[[str], T], what: str) -> Iterator[T]:
    """``from_json(line)`` for each non-blank line of `path`, in order. A line that
    ``from_json`` rejects (ValueError, TypeError or KeyError) raises ``ValueError`` naming the
    file, the line number and `what` (e.g. 'trajectory')."""
    with _open(path, "r") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = from_json(line)
            except (ValueError, TypeError, KeyError) as e:
                raise ValueError(f"{path}:{lineno}: not a {what} record: {e}") from e
            yield rec


def repair_torn_tail(path: str | os.PathLike) -> None:
    """Make ``path`` end with a newline before appending: a final line without one is completed
    when it is a whole JSON object, else (torn by a kill mid-write) truncated away with a warning.
    Nothing to do on a remote path (an uploaded object is whole)."""
    if is_remote(path) or not os.path.exists(path):
        return
    with open(path, "rb+") as f:
        size = f.seek(0, os.SEEK_END)
        if size == 0:
            return
        f.seek(size - 1)
        if f.read(1) == b"\n":
            return
        pos, keep = size, 0
        while pos > 0:  # scan backwards for the last newline
            start = max(0, pos - 65536)
            f.seek(start)
            chunk = f.read(pos - start)
            idx = chunk.rfind(b"\n")
            if idx >= 0:
                keep = start + idx + 1
                break
            pos = start
        f.seek(keep)
        tail = f.read()
        try:
            whole = isinstance(json.loads(tail.decode("utf-8")), dict)
        except (UnicodeDecodeError, json.JSONDecodeError):
            whole = False
        if whole:
            f.seek(size)
            f.write(b"\n")
        else:
            warnings.warn(f"{path}: removing a torn last line ({size - keep} bytes) before "
                          "appending", stacklevel=3)
            f.truncate(keep)
        f.flush()
        os.fsync(f.fileno())


def append_jsonl(path: str | os.PathLike, records: Iterable[Mapping[str, Any]]) -> None:
    """Append ``records`` as strict-JSON lines in one write, then flush and fsync; on a remote
    path, upload the old content plus the new lines as one object."""
    append_lines(path, [json.dumps(r, allow_nan=False, ensure_ascii=False) for r in records])


def append_lines(path: str | os.PathLike, lines: Iterable[str]) -> None:
    """Append ``lines`` (each one JSON object, without its newline) in one write, then flush and
    fsync; on a remote path, upload the old content plus the new lines as one object."""
    text = "".join(line + "\n" for line in lines)
    if not text:
        return
    if is_remote(path):
        remote = run_path(path)
        old = remote.read_text(encoding="utf-8") if remote.exists() else ""
        if old and not old.endswith("\n"):
            old += "\n"
        remote.write_text(old + text, encoding="utf-8")
        return
    with open(path, "a", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def read_jsonl(path: str | os.PathLike) -> list[dict]:
    """Records of a jsonl file. A torn last line (invalid JSON: the process was killed while
    writing it) is skipped with a warning; an invalid line elsewhere raises ``ValueError``
    naming file and line."""
    path = run_path(path)
    lines = path.read_bytes().decode("utf-8", errors="replace").split("\n")
    while lines and not lines[-1].strip():
        lines.pop()
    out = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            if i == len(lines) - 1:
                warnings.warn(f"{path}: skipping torn last line {i + 1} ({e.msg})", stacklevel=2)
                continue
            raise ValueError(f"{path}: line {i + 1} is not valid JSON ({e.msg})") from e
        if not isinstance(rec, dict):
            raise ValueError(f"{path}: line {i + 1} is not a JSON object")
        out.append(rec)
    return out
