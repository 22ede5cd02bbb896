"""Checkpoints of the whole TrainState plus a JSON dict of host-side state (orbax).

Layout: ``<dir>/<step>/state`` (the TrainState pytree: params, optimizer state, step,
data position, skip counter, RNG) and ``<dir>/<step>/host`` (JSON: e.g. data-loader position,
RNG seeds, stage name). Saves are asynchronous (the device -> host copy happens before
`save` returns, so the state may be donated to the next step right away; the write finishes
in the background; `wait` / `close` block until it is committed). Only the last
``max_to_keep`` checkpoints are kept.

`restore_latest` tries the newest checkpoint first; if it cannot be read (truncated or
missing files, unreadable metadata) it logs a warning naming the step and the error and
falls back to the previous one. A checkpoint whose tree does not fit the target state (other
config) raises `CheckpointMismatchError` listing the differing leaves instead - that is a
configuration error, not corruption, so there is no fallback.
"""

from __future__ import annotations

import logging

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp

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


class Checkpointer:
    """`orbax.checkpoint.CheckpointManager` for (TrainState, host JSON) pairs."""

    def __init__(self, directory, max_to_keep: int = 3, async_save: bool = True, save_concurrent_gb: int | None = None):
        """``save_concurrent_gb``: bound on the bytes a save has in flight at once (orbax's
        default, 96 GB, when None); a smaller bound writes in several rounds with less memory."""
        self.directory = run_path(directory)  # local or gs:// (orbax takes epath paths)
        options = ocp.CheckpointManagerOptions(
            max_to_keep=max_to_keep, enable_async_checkpointing=async_save, create=True)
        handler = (ocp.StandardCheckpointHandler() if save_concurrent_gb is None
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

    def _read(self, step: int, target):
        out = self.manager.restore(int(step), args=ocp.args.Composite(
            state=ocp.args.StandardRestore(_abstract(target)), host=ocp.args.JsonRestore()))
        state, host = out["state"], dict(out["host"] or {})
        want = host.pop(FINGERPRINT_KEY, None)
        if want is not None:
            got = state_fingerprint(state)
            bad = sorted(k for k in want if got.get(k) != want[k])
            if bad:
                raise CheckpointCorruptError(
                    f"step {step}: checksum mismatch in {len(bad)} leaves, e.g. {bad[:3]}")
        return state, host

    def restore(self, step: int, target):
        """``(state, host)`` of checkpoint ``step``, placed like ``target`` (arrays or abstract).

        Raises CheckpointMismatchError if the saved tree does not fit ``target``.
        """
        err = self._mismatch(step, target)
        if err is not None:
            raise err
        return self._read(step, target)

    def restore_latest(self, target):
        """``(state, host, step)`` of the newest readable checkpoint, or None if there is none.

        Unreadable checkpoints are skipped with a warning; a tree mismatch raises.
        """
        steps = self.all_steps()
        for i in range(len(steps) - 1, -1, -1):
            step = steps[i]
            try:
                err = self._mismatch(step, target)
            except Exception as e:
                self._warn(step, e, steps[:i])
                continue
            if err is not None:
                raise err
            try:
                state, host = self._read(step, target)
                return state, host, step
            except Exception as e:
                self._warn(step, e, steps[:i])
        return None

    def _warn(self, step, err, older):
        log.warning("checkpoint step %d in %s is unreadable (truncated or corrupt?): %s: %s; %s",
                    step, self.directory, type(err).__name__, str(err)[:500],
                    f"falling back to step {older[-1]}" if older else "no older checkpoint left")
