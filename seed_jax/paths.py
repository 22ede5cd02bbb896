"""Run-directory paths: one type for local and remote (``gs://``, ``s3://``) run directories.

Every file a run writes or reads under its workdir goes through `run_path`, an
``etils.epath.Path`` (the path type orbax uses): a local path is made absolute, a URL keeps
its scheme (``gs://b/run`` stays ``gs://b/run``; ``pathlib.Path(...).absolute()`` would turn it
into ``<cwd>/gs:/b/run``, a local copy per host). Remote paths go through epath's fsspec
backend (``gs://`` needs ``gcsfs``, ``pip install -e .[gcs]``).

A remote store is an object store: an object appears whole when its upload finishes, there is no
append, and a rename is a copy. So:

- `write_text_atomic`: local, a temporary file then ``os.replace``; remote, one upload.
- appends (`seed_jax.jsonl.append_jsonl`) rewrite the whole object on a remote path.
- `staged_dir`: a directory written by code that needs real files (safetensors), then put in
  place whole: renamed locally, uploaded file by file to a remote destination.
- `local_copy`: a remote directory downloaded once for readers that need real files.

Standard library and ``etils.epath`` only (the jsonl layer).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from etils import epath

_COPY_CHUNK = 16 << 20  # bytes per read when copying a file between local disk and a remote store


def is_remote(path: str | os.PathLike) -> bool:
    """True for a URL (``scheme://...``), False for a local path."""
    return "://" in os.fspath(path)


def run_path(path: str | os.PathLike) -> epath.Path:
    """``path`` as an ``epath.Path``: a local path absolute (``~`` expanded), a URL with its scheme.

    Raises ``ValueError`` naming the scheme when epath has no backend for it (it knows
    ``gs://``, ``s3://``, ``az://``, ``hf://``)."""
    if isinstance(path, epath.Path) and is_remote(path):
        return path
    if is_remote(path):
        try:
            return epath.Path(os.fspath(path))
        except KeyError:
            scheme = os.fspath(path).split("://", 1)[0]
            raise ValueError(f"{path}: no file system for the scheme {scheme}:// "
                             "(use a local path or gs://, s3://, az://)") from None
    return epath.Path(os.path.abspath(os.path.expanduser(os.fspath(path))))


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` (UTF-8) so that a reader sees the old or the new content, never a part:
    locally through ``<path>.tmp`` and ``os.replace``, remotely in one upload."""
    path = run_path(path)
    if is_remote(path):
        path.write_text(text, encoding="utf-8")
        return
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _upload_tree(src: Path, dest: epath.Path) -> None:
    """Copy every file under the local ``src`` to the same relative path under ``dest``."""
    for root, _, files in os.walk(src):
        for name in files:
            f = Path(root) / name
            target = dest.joinpath(*f.relative_to(src).parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            with open(f, "rb") as s, target.open("wb") as d:
                shutil.copyfileobj(s, d, _COPY_CHUNK)


@contextlib.contextmanager
def staged_dir(dest: str | os.PathLike) -> Iterator[Path]:
    """A local directory to write ``dest``'s content into; when the block ends without an error it
    replaces ``dest`` whole.

    Local ``dest``: the directory is ``<dest>.tmp`` beside it (removed first if a killed write left
    it), renamed to ``dest`` after the old ``dest`` is removed. Remote ``dest``: a temporary local
    directory, uploaded file by file after the old ``dest`` is removed, then deleted; a reader
    that must not see a half-written ``dest`` waits for a marker written after it (a stage's
    marker)."""
    dest = run_path(dest)
    if not is_remote(dest):
        tmp = Path(dest.with_name(dest.name + ".tmp"))
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir(parents=True)
        yield tmp
        if dest.exists():
            shutil.rmtree(dest)
        tmp.rename(dest)
        return
    _DOWNLOADS.pop(os.fspath(dest), None)  # a download of the old content is stale
    with tempfile.TemporaryDirectory(prefix="seed_jax_stage_") as d:
        yield Path(d)
        if dest.exists():
            dest.rmtree()
        _upload_tree(Path(d), dest)


_DOWNLOADS: dict[str, Path] = {}


def local_copy(path: str | os.PathLike) -> Path:
    """A local directory with ``path``'s files: ``path`` itself when local; a remote directory is
    downloaded once per process into a temporary directory (deleted at exit)."""
    if not is_remote(path):
        return Path(os.path.abspath(os.path.expanduser(os.fspath(path))))
    src = run_path(path)
    key = os.fspath(src)
    if key in _DOWNLOADS:
        return _DOWNLOADS[key]
    local = Path(tempfile.mkdtemp(prefix="seed_jax_download_"))
    atexit.register(shutil.rmtree, local, True)
    _download_tree(src, local)
    _DOWNLOADS[key] = local
    return local


def _download_tree(src: epath.Path, local: Path) -> None:
    """Copy every file under the remote ``src`` to the same relative path under ``local``
    (``iterdir``, not fsspec's ``walk``, whose roots lose the scheme)."""
    local.mkdir(parents=True, exist_ok=True)
    for p in src.iterdir():
        if p.is_dir():
            _download_tree(p, local / p.name)
        else:
            with p.open("rb") as s, open(local / p.name, "wb") as d:
                shutil.copyfileobj(s, d, _COPY_CHUNK)
