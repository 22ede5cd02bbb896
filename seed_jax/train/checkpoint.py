"""Checkpoints of the whole TrainState plus a JSON dict of host-side state (orbax).

Layout: ``<dir>/<step>/state`` (the TrainState pytree: params, optimizer state, step,
data position, skip counter, RNG) and ``<dir>/<step>/host`` (JSON: e.g. data-loader position,
RNG seeds, stage name). Saves are asynchronous (the device -> host copy happens before
`save` returns, so the state may be donated to the next step right away; the write finishes
in the background; `wait` / `close` block until it is committed). Only the last
``max_to_keep`` checkpoints are kept.

`restore_latest` tries the newest checkpoint first; if it cannot be read (truncated or
missing files, unreadable metadata) it logs a warning naming the step and the error and
falls back to the previous one (the unreadable newer ones are deleted once a step is restored,
so that the resumed run can write those steps again). A checkpoint whose tree does not fit the target state (other
config) raises `CheckpointMismatchError` listing the differing leaves instead - that is a
configuration error, not corruption, so there is no fallback.

On several hosts every host verifies each step it tries (metadata, then the read and its
fingerprint) and the hosts agree, by all-gathers, on the newest step that every host verified
(`newest_common_step`): a shard only one host reads (each process reads its own shards) can be
broken for that host alone, and all hosts still resume from the same step. A read error comes
back from orbax's handler as a value (`_read_errors_as_values`), so a host whose read failed still
takes part in orbax's barrier after the read, and the fingerprint (a collective) is computed only
once every host has read its part. Steps newer than the one restored (some host could not
verify them) are deleted, so that the resumed run can write them again.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
from etils import epath
from jax.experimental import multihost_utils

from seed_jax.paths import run_path
from seed_jax.train.mesh import path_string

log = logging.getLogger(__name__)


class CheckpointMismatchError(ValueError):
    """The checkpoint's tree differs from the target state (message lists the leaves)."""


class CheckpointCorruptError(RuntimeError):
    """A checkpoint's data cannot be read back intact."""


FINGERPRINT_KEY = "_state_fingerprint"


# elements per step of a leaf's fingerprint loop: the temporaries stay this small whatever the leaf
_FINGERPRINT_CHUNK = 1 << 20


def _leaf_fingerprint(x: jax.Array) -> jax.Array:
    """``sum_k w_k * ((k * 2654435761) | 1) mod 2^32`` over the leaf's flat raw bits ``w_k`` (as
    uint32 words; ``k`` the row-major flat index): any single bit flip changes it.

    Summed over blocks of leading-axis rows of about `_FINGERPRINT_CHUNK` elements (a loop; the
    last block overlaps the one before and counts only its new rows), each block's bits read in
    the loop, so no leaf-sized temporary is made: summed whole, XLA materialises the weighted
    (or bit-cast) words, one copy of the state at every save.
    """
    bits = jnp.dtype(x.dtype).itemsize * 8
    if bits > 32:
        raise ValueError(f"fingerprints support dtypes up to 32 bits, got {x.dtype}")

    def words(block):
        if block.dtype == jnp.bool_:
            return block.astype(jnp.uint32)
        return jax.lax.bitcast_convert_type(block, jnp.dtype(f"uint{bits}")).astype(jnp.uint32)

    def weighted_sum(block, first_row, fresh_from_row):
        row = x.size // x.shape[0]
        rows = first_row + jax.lax.broadcasted_iota(jnp.uint32, block.shape, 0)
        k = rows * jnp.uint32(row)
        for d in range(1, block.ndim):  # row-major offsets within a row
            k = k + jax.lax.broadcasted_iota(jnp.uint32, block.shape, d) * jnp.uint32(
                int(np.prod(block.shape[d + 1:], dtype=np.int64)))
        terms = words(block) * ((k * jnp.uint32(2654435761)) | jnp.uint32(1))
        return jnp.sum(jnp.where(rows >= fresh_from_row, terms, jnp.uint32(0)), dtype=jnp.uint32)

    if x.ndim == 0:
        x = x.reshape(1)
    if x.size <= _FINGERPRINT_CHUNK:
        return weighted_sum(x, jnp.uint32(0), jnp.uint32(0))
    n = x.shape[0]
    block = min(n, max(1, _FINGERPRINT_CHUNK // (x.size // n)))

    def body(i, acc):
        first = jnp.minimum(i * block, n - block)
        part = jax.lax.dynamic_slice_in_dim(x, first, block)
        return acc + weighted_sum(part, first.astype(jnp.uint32), (i * block).astype(jnp.uint32))

    return jax.lax.fori_loop(0, -(-n // block), body, jnp.uint32(0))


@jax.jit
def _fingerprint_tree(tree):
    return jax.tree_util.tree_map(_leaf_fingerprint, tree)


def state_fingerprint(state) -> dict[str, int]:
    """``{leaf path: uint32 checksum}`` of a state (computed on device, one small transfer)."""
    flat, _ = jax.tree_util.tree_flatten_with_path(jax.device_get(_fingerprint_tree(state)))
    return {path_string(p): int(v) for p, v in flat}


def _leaf_specs(tree) -> dict[str, tuple[tuple[int, ...], str]]:
    flat, _ = jax.tree_util.tree_flatten_with_path(tree)
    return {path_string(p): (tuple(np.shape(x) if not hasattr(x, "shape") else x.shape),
                             str(np.dtype(x.dtype))) for p, x in flat}


def compare_trees(saved, target, limit: int = 20) -> list[str]:
    """Human-readable differences between two trees of arrays / metadata (paths, shapes, dtypes).

    Parameter leaves are listed first (optimizer moments mirror them).
    """
    a, b = _leaf_specs(saved), _leaf_specs(target)
    order = lambda keys: sorted(keys, key=lambda k: (not k.startswith("params/"), k))  # noqa: E731
    diffs = [f"{k}: in checkpoint only {a[k]}" for k in order(a.keys() - b.keys())]
    diffs += [f"{k}: missing from checkpoint, target {b[k]}" for k in order(b.keys() - a.keys())]
    diffs += [f"{k}: checkpoint {a[k][0]} {a[k][1]} vs target {b[k][0]} {b[k][1]}"
              for k in order(a.keys() & b.keys()) if a[k] != b[k]]
    if len(diffs) > limit:
        diffs = diffs[:limit] + [f"... and {len(diffs) - limit} more"]
    return diffs


def _abstract(tree):
    """ShapeDtypeStructs carrying each array's sharding (the restore target)."""
    return jax.tree_util.tree_map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=getattr(x, "sharding", None)),
        tree)


def newest_common_step(verified: Sequence[Collection[int]]) -> int | None:
    """The step every host resumes from: ``max(V_0 & V_1 & ... & V_{H-1})`` over the hosts'
    sets ``V_h`` of verified checkpoint steps; None when they share no step (or no host is given)."""
    if not verified:
        return None
    common = set(verified[0]).intersection(*verified[1:])
    return max(common) if common else None


def unverified_note(step: int | None, tried: Sequence[int], verified: Sequence[Collection[int]]) -> str:
    """Why each tried step newer than ``step`` (every tried step when None) was passed over, newest
    first: ``host 1 could not verify step 4; hosts 0, 1 could not verify step 3``."""
    parts = []
    for s in sorted((t for t in tried if step is None or t > step), reverse=True):
        bad = [h for h, v in enumerate(verified) if s not in v]
        if bad:
            parts.append(f"host{'s' if len(bad) > 1 else ''} {', '.join(map(str, bad))} could not verify step {s}")
    return "; ".join(parts)


def _every_host(values: Sequence[int]) -> np.ndarray:
    """``[hosts, n]``: every host's ``n`` small integers (all hosts call it together, same ``n``)."""
    mine = np.asarray(values, np.int32).reshape(1, -1)
    if jax.process_count() == 1:
        return mine
    return np.asarray(multihost_utils.process_allgather(mine[0])).reshape(jax.process_count(), -1)


def _steps_of_every_host(steps: Sequence[int]) -> list[list[int]]:
    """Every host's list of checkpoint steps (a listing can differ between hosts, e.g. a step
    written while they listed)."""
    n = int(_every_host([len(steps)]).max())
    if n == 0:
        return [[] for _ in range(jax.process_count())]
    rows = _every_host([*steps, *[-1] * (n - len(steps))])
    return [[int(s) for s in row if s >= 0] for row in rows]


class _ReadFailed:
    """A read error of `_read_errors_as_values`, returned in place of the state."""

    def __init__(self, error: BaseException):
        self.error = error


def _read_errors_as_values(handler):
    """``handler`` (an orbax item handler) with a `restore` that returns a read error as
    `_ReadFailed` instead of raising it: orbax's Checkpointer waits at a barrier of every host
    after the read, which a host raising from inside the read would skip, leaving the others
    waiting (or pairing their collectives with the wrong ones). The instance keeps its class, so
    orbax's registries and the handler name in the metadata are the standard ones."""
    read = handler.restore

    def restore(*args, **kwargs):
        try:
            return read(*args, **kwargs)
        except Exception as e:
            return _ReadFailed(e)

    handler.restore = restore
    return handler


_OK, _UNREADABLE, _MISMATCH = 0, 1, 2


class Checkpointer:
    """`orbax.checkpoint.CheckpointManager` for (TrainState, host JSON) pairs."""

    def __init__(self, directory, max_to_keep: int = 3, async_save: bool = True, save_concurrent_gb: int | None = None):
        """``save_concurrent_gb``: bound on the bytes a save has in flight at once (orbax's
        default, 96 GB, when None); a smaller bound writes in several rounds with less memory."""
        self.directory = run_path(directory)  # local or gs:// (orbax takes epath paths)
        options = ocp.CheckpointManagerOptions(
            max_to_keep=max_to_keep, enable_async_checkpointing=async_save, create=True)
        handler = _read_errors_as_values(ocp.StandardCheckpointHandler() if save_concurrent_gb is None
                                         else ocp.StandardCheckpointHandler(save_concurrent_gb=int(save_concurrent_gb)))
        self.manager = ocp.CheckpointManager(
            self.directory, options=options,
            item_handlers={"state": handler, "host": ocp.JsonCheckpointHandler()})

    def save(self, step: int, state, host: dict | None = None) -> None:
        """Start saving ``state`` and ``host`` (JSON-serialisable) as checkpoint ``step``."""
        host = dict(host or {})
        if FINGERPRINT_KEY in host:
            raise ValueError(f"host state may not use the reserved key {FINGERPRINT_KEY!r}")
        host[FINGERPRINT_KEY] = state_fingerprint(state)
        self.manager.save(int(step), args=ocp.args.Composite(
            state=ocp.args.StandardSave(state), host=ocp.args.JsonSave(host)), force=True)

    def latest_step(self) -> int | None:
        """The newest step saved or being saved by this manager (None: none)."""
        return self.manager.latest_step()

    def wait(self) -> None:
        self.manager.wait_until_finished()

    def close(self) -> None:
        self.manager.wait_until_finished()
        self.manager.close()

    def __enter__(self) -> Checkpointer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def all_steps(self) -> list[int]:
        self.manager.reload()
        return sorted(self.manager.all_steps())

    def _mismatch(self, step: int, target) -> CheckpointMismatchError | None:
        saved = self.manager.item_metadata(step)["state"]
        if saved is None or not jax.tree_util.tree_leaves(saved):
            raise CheckpointCorruptError(f"step {step}: no readable tree metadata")
        diffs = compare_trees(saved, target)
        if not diffs:
            return None
        return CheckpointMismatchError(
            f"checkpoint {self.directory / str(step)} does not match the current train "
            f"state ({len(diffs)} differing leaves):\n  " + "\n  ".join(diffs))

    def _load(self, step: int, target):
        """``(state, host)`` of ``step`` as read, unchecked (orbax's read: every host takes part);
        raises CheckpointCorruptError when this host's read failed."""
        out = self.manager.restore(int(step), args=ocp.args.Composite(
            state=ocp.args.StandardRestore(_abstract(target)), host=ocp.args.JsonRestore()))
        state, host = out["state"], dict(out["host"] or {})
        if isinstance(state, _ReadFailed):
            raise CheckpointCorruptError(f"step {step}: {type(state.error).__name__}: {state.error}") from state.error
        return state, host

    @staticmethod
    def _check(step: int, state, host: dict):
        """``(state, host)`` without the fingerprint once the state matches it (a computation
        over the whole state: on several hosts a collective); CheckpointCorruptError if not."""
        host = dict(host)
        want = host.pop(FINGERPRINT_KEY, None)
        if want is not None:
            got = state_fingerprint(state)
            bad = sorted(k for k in want if got.get(k) != want[k])
            if bad:
                raise CheckpointCorruptError(
                    f"step {step}: checksum mismatch in {len(bad)} leaves, e.g. {bad[:3]}")
        return state, host

    def _read(self, step: int, target):
        return self._check(step, *self._load(step, target))

    def restore(self, step: int, target):
        """``(state, host)`` of checkpoint ``step``, placed like ``target`` (arrays or abstract).

        Raises CheckpointMismatchError if the saved tree does not fit ``target``.
        """
        err = self._mismatch(step, target)
        if err is not None:
            raise err
        return self._read(step, target)

    def restore_latest(self, target):
        """``(state, host, step)`` of the newest checkpoint every host can read, or None if there is none.

        Steps are tried newest first; on every host: the tree metadata, the read, the
        fingerprint, each phase's outcome gathered from every host before the next (which runs on
        every host or on none). The first step that every host verified (`newest_common_step`) is
        restored on all of them; on several hosts one line says which step and why. Unreadable
        checkpoints are skipped with a warning; a tree mismatch raises (on every host).
        """
        tried, verified = [], [set() for _ in range(jax.process_count())]
        listed = _steps_of_every_host(self.all_steps())
        steps = sorted(set().union(*listed))
        mine = set(listed[jax.process_index()])
        for i in range(len(steps) - 1, -1, -1):
            step = steps[i]
            tried.append(step)
            ok, got = self._verify(step, target, step in mine, steps[:i])
            for h, good in enumerate(ok):
                if good:
                    verified[h].add(step)
            agreed = newest_common_step(verified)
            if agreed is not None:
                if jax.process_count() > 1:
                    note = unverified_note(agreed, tried, verified)
                    log.info("checkpoint: resuming from step %d of %s, the newest checkpoint every host verified%s",
                             agreed, self.directory, f" ({note})" if note else "")
                self._drop_newer(step, steps)
                state, host = got
                return state, host, step
        if tried and jax.process_count() > 1:
            log.warning("checkpoint: no checkpoint in %s that every host verified (%s)", self.directory,
                        unverified_note(None, tried, verified))
        return None

    def _verify(self, step: int, target, listed: bool, older: list[int]) -> tuple[list[bool], tuple | None]:
        """Whether each host verified ``step`` and this host's ``(state, host)`` when every host did.

        Every host calls it together with the same ``step``; a host's error is its own (logged
        here), the decision is common: the read happens on every host or on none.
        """
        status, err = _OK, None
        if not listed:
            status, err = _UNREADABLE, FileNotFoundError(f"step {step} is not listed in {self.directory} on this host")
        else:
            try:
                err = self._mismatch(step, target)
                status = _OK if err is None else _MISMATCH
            except Exception as e:
                status, err = _UNREADABLE, e
        statuses = _every_host([status])[:, 0]
        if (statuses == _MISMATCH).any():
            raise err if status == _MISMATCH else CheckpointMismatchError(
                f"checkpoint {self.directory / str(step)} does not match the current train state on host(s) "
                f"{', '.join(str(h) for h in np.flatnonzero(statuses == _MISMATCH))} (their logs list the leaves)")
        got = None
        if (statuses == _OK).all():  # the read (orbax's barrier after it: every host or none)
            try:
                got = self._load(step, target)
            except Exception as e:
                status, err = _UNREADABLE, e
            statuses = _every_host([status])[:, 0]
        if (statuses == _OK).all():  # its fingerprint (a collective): only once every host has read its part
            try:
                got = self._check(step, *got)
            except Exception as e:
                status, err = _UNREADABLE, e
            statuses = _every_host([status])[:, 0]
        if status != _OK:
            self._warn(step, err, older)
        elif not (statuses == _OK).all():
            log.warning("checkpoint step %d in %s: fine on this host, but host(s) %s could not verify it", step,
                        self.directory, ", ".join(str(h) for h in np.flatnonzero(statuses != _OK)))
        return [bool(s == _OK) for s in statuses], (got if (statuses == _OK).all() else None)

    def _drop_newer(self, step: int, steps: Sequence[int]) -> None:
        """Delete the checkpoints newer than ``step`` (one that some host could not verify): the
        resumed run writes those steps again (orbax refuses to save a step that exists). Host 0
        deletes, every host waits for it (a collective) and re-lists."""
        newer = [s for s in steps if s > step]
        if not newer:
            return
        if jax.process_index() == 0:
            for s in newer:
                log.warning("checkpoint: deleting step %d in %s (not verified by every host): the run writes it "
                            "again", s, self.directory)
                path = epath.Path(self.directory) / str(s)
                if path.exists():
                    path.rmtree()
        _every_host([0])  # every host past the deletion
        self.manager.reload()

    def _warn(self, step, err, older):
        log.warning("checkpoint step %d in %s is unreadable (truncated or corrupt?): %s: %s; %s",
                    step, self.directory, type(err).__name__, str(err)[:500],
                    f"falling back to step {older[-1]}" if older else "no older checkpoint left")
