"""Per-token log-probabilities (and entropies) of the response tokens of a batch.

Layout (contract with the batch builder): row b holds a prompt LEFT-padded to ``P`` tokens and
a response RIGHT-padded to ``R`` tokens, so response token j sits at position ``P + j`` and is
predicted by the hidden state at position ``P - 1 + j``. Only those ``R`` hidden states reach
the LM head, and the head is applied in chunks of ``chunk`` response positions (``lax.map``
with each chunk rematerialised), so ``[B, R, V]`` logits never exist at once::

    logp[b, j]    = z[b, j, ids[b, P + j]] - logsumexp_v z[b, j, v]
    entropy[b, j] = logsumexp_v z - sum_v softmax(z)_v z_v         (losses.entropy_from_logits)
    with z[b, j] = W_out^T h[b, P - 1 + j] / T  (float32)

T is the sampling temperature (static, default 1): with T != 1 these are the log-probs and
entropy of the tempered policy softmax(logits / T) that a sampler at temperature T draws from.

Values at padded response positions are computed but meaningless; mask them.

Under a mesh (`seed_jax.models.decoder.activation_sharding`) the rows stay split over
('data', 'fsdp') through the head, and the response positions over 'tensor' (when it divides
``R``): the head matrix enters in its parameter sharding (`mesh.PARAM_RULES`) and is gathered
whole once per call, each device computes the logits of its own rows and positions (no logits
cross devices), and the auto chunk is sized by the rows per device. The transpose of that
gather is a reduce-scatter: each device receives the summed gradient of its own shard of the
head (plus an all-reduce of that shard over the axes the head is not split on, 'data'), never
the whole ``vocab x hidden`` matrix.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

from seed_jax.losses import entropy_from_logits
from seed_jax.models import decoder
from seed_jax.models.config import ModelConfig
from seed_jax.models.decoder import init_params
from seed_jax.train.mesh import PARAM_RULES, batch_divisor, batch_sharding, spec_for, tree_shardings

# Auto chunk: at most this many float32 logits (rows per device x chunk x V) per chunk (64 MiB).
LOGITS_BUDGET = 1 << 24


def auto_chunk(batch: int, resp_len: int, vocab: int, budget: int = LOGITS_BUDGET) -> int:
    """Largest chunk with ``batch * chunk * vocab <= budget`` (at least 1, at most R)."""
    return int(max(1, min(resp_len, budget // max(1, batch * vocab))))


def token_logprobs_from_hidden(params, cfg: ModelConfig, hidden: jax.Array, targets: jax.Array,
                               chunk: int | None = None, with_entropy: bool = True, temperature: float = 1.0):
    """``hidden [B, R, H]`` (already aligned: row j predicts ``targets[:, j]``) ->
    ``(logp [B, R], entropy [B, R] or None)``, float32, LM head chunked over R, of the policy at
    ``temperature`` (static; module docstring).

    Under `decoder.activation_sharding` the head runs per device on its own rows and, over
    'tensor', its own response positions (``shard_map``): the head matrix enters in its
    parameter sharding and is gathered whole once per call, its gradient is summed over the
    chunks locally and reduce-scattered to the shards once per call (module docstring), and the
    auto chunk is sized by the rows each device holds.
    """
    w, vocab_major = decoder.head_matrix(params, cfg)
    head = functools.partial(_head_logprobs, chunk=chunk, with_entropy=with_entropy, vocab_major=vocab_major,
                             temperature=float(temperature))
    rows = decoder.row_context()
    if rows is None:
        return head(w, hidden, targets)
    mesh, axes = rows
    tensor = decoder.tensor_split(hidden.shape[1])
    per_row = P(axes, tensor)
    out_axes = (*axes, *([tensor] if tensor else []))  # the axes the logits vary over
    rule = "embed_tokens/embedding" if vocab_major else "lm_head"
    w_spec = spec_for(rule, w.shape, mesh, [(pattern, _on_mesh(spec, mesh, out_axes)) for pattern, spec in PARAM_RULES])
    split = {a for entry in w_spec if entry is not None for a in ((entry,) if isinstance(entry, str) else entry)}
    varying = tuple(a for a in out_axes if a not in split)

    def local(w, h, t):
        # the whole head once, outside the chunk loop: the transpose of this gather is the one
        # reduce-scatter of the head's gradient, of the cast the one all-reduce of its shard over
        # the other row axes (inside the loop they would be one per chunk)
        for dim, entry in enumerate(w_spec):
            if entry is not None:
                w = jax.lax.all_gather(w, entry, axis=dim, tiled=True)
        return head(jax.lax.pcast(w, varying, to="varying") if varying else w, h, t)

    return jax.shard_map(local, mesh=mesh, in_specs=(w_spec, per_row, per_row), out_specs=per_row)(
        w, hidden, targets)


def _on_mesh(spec: P, mesh, axes: tuple[str, ...]) -> P:
    """``spec`` with only the names of ``axes`` of more than one device on ``mesh`` (the head
    enters whole over the others: split over an axis the logits do not vary over, its gather
    would make them vary)."""
    def keep(entry):
        names = tuple(a for a in ((entry,) if isinstance(entry, str) else entry or ())
                      if a in axes and mesh.shape.get(a, 1) > 1)
        return None if not names else names[0] if len(names) == 1 else names
    return P(*(keep(e) for e in spec))


def _head_logprobs(w, hidden, targets, chunk, with_entropy, vocab_major, temperature=1.0):
    """`token_logprobs_from_hidden` on one device's rows with the whole head ``w``
    (`decoder.head_matrix`)."""
    B, R, H = hidden.shape
    c = min(chunk or auto_chunk(B, R, w.shape[0 if vocab_major else 1]), R)

    def piece(h, t):
        z = decoder.project_logits(h, w, vocab_major)  # [B, c, V] float32
        if temperature != 1.0:
            z = z / temperature
        lse = jax.nn.logsumexp(z, axis=-1)
        logp = jnp.take_along_axis(z, t[..., None], axis=-1)[..., 0] - lse
        ent = entropy_from_logits(z) if with_entropy else jnp.zeros_like(logp)
        return logp, ent

    if c >= R:
        logp, ent = piece(hidden, targets)
    else:
        n = math.ceil(R / c)
        pad = n * c - R
        h = jnp.pad(hidden, ((0, 0), (0, pad), (0, 0))).reshape(B, n, c, H).swapaxes(0, 1)
        t = jnp.pad(targets, ((0, 0), (0, pad))).reshape(B, n, c).swapaxes(0, 1)
        logp, ent = jax.lax.map(jax.checkpoint(lambda xs: piece(*xs)), (h, t))
        logp = logp.swapaxes(0, 1).reshape(B, n * c)[:, :R]
        ent = ent.swapaxes(0, 1).reshape(B, n * c)[:, :R]
    return logp, (ent if with_entropy else None)


def response_logprobs(params, cfg: ModelConfig, ids: jax.Array, mask: jax.Array,
                      prompt_len: int, resp_len: int, chunk: int | None = None,
                      with_entropy: bool = True, positions: jax.Array | None = None,
                      temperature: float = 1.0):
    """``(logp [B, R], entropy [B, R] or None)`` of ``ids[:, P:P+R]`` (module docstring), at the
    sampling ``temperature`` (static).

    ``ids``/``mask`` are ``[B, P + R]``; positions default to ``positions_from_mask(mask)``.
    ``prompt_len``, ``resp_len``, ``chunk`` and ``with_entropy`` are static.
    """
    if ids.shape[1] != prompt_len + resp_len:
        raise ValueError(f"ids has {ids.shape[1]} columns, expected prompt_len + resp_len = "
                         f"{prompt_len} + {resp_len}")
    if prompt_len < 1:
        raise ValueError(f"prompt_len must be >= 1 (the first response token needs a "
                         f"predecessor), got {prompt_len}")
    h = decoder.hidden_states(params, cfg, ids, mask, positions)
    h = jax.lax.slice_in_dim(h, prompt_len - 1, prompt_len - 1 + resp_len, axis=1)
    targets = jax.lax.slice_in_dim(ids, prompt_len, prompt_len + resp_len, axis=1)
    return token_logprobs_from_hidden(params, cfg, h, targets, chunk, with_entropy, temperature)


@functools.lru_cache(maxsize=16)
def param_shardings(model_cfg: ModelConfig, mesh):
    """NamedShardings of the model's parameter tree by `mesh.PARAM_RULES` (nothing allocated)."""
    abstract = jax.eval_shape(lambda: init_params(model_cfg, jax.random.PRNGKey(0)))
    return tree_shardings(abstract, mesh)


def scoring_params(params, model_cfg: ModelConfig, mesh=None):
    """Parameters for log-prob passes only (e.g. the frozen reference): cast to the compute
    dtype and, with a ``mesh``, placed sharded by the parameter rules like the policy's.

    ``params`` themselves (no copy, shared buffers) when they already are so: every leaf in
    the dtype the cast gives it and, with a ``mesh``, in its rule's sharding. The caller must
    then not donate ``params`` to a step while the result is in use.
    """
    cast = functools.partial(decoder.cast_to_compute, cfg=model_cfg)
    target = jax.eval_shape(cast, params)
    shardings = param_shardings(model_cfg, mesh) if mesh is not None else None
    if _already_placed(params, target, shardings):
        return params
    if mesh is None:
        return jax.jit(cast)(params)
    return jax.jit(cast, out_shardings=shardings)(params)


def _already_placed(params, target, shardings) -> bool:
    """Every leaf of ``params`` a `jax.Array` with ``target``'s dtype and, when ``shardings`` is
    given, a sharding equivalent to its own."""
    leaves, tree = jax.tree_util.tree_flatten(params)
    if tree != jax.tree_util.tree_structure(target):
        return False
    wanted = jax.tree_util.tree_leaves(shardings) if shardings is not None else [None] * len(leaves)
    return all(isinstance(a, jax.Array) and a.dtype == t.dtype
               and (s is None or a.sharding.is_equivalent_to(s, a.ndim))
               for a, t, s in zip(leaves, jax.tree_util.tree_leaves(target), wanted))


@functools.lru_cache(maxsize=32)
def make_logprob_pass(model_cfg: ModelConfig, prompt_len: int, resp_len: int, chunk: int | None = None,
                      mesh=None, temperature: float = 1.0):
    """``pass(params, ids [B, P+R], mask [B, P+R]) -> logp [B, R]``: one jitted scoring pass (of
    the policy at the sampling ``temperature``).

    With a ``mesh``: params sharded by the parameter rules, rows over ('data', 'fsdp') in and
    out, activations constrained to rows (`decoder.activation_sharding`); the params are cast
    to the compute dtype inside (before their all-gather). Cached on its (hashable) arguments;
    accepts abstract inputs (``.lower(ShapeDtypeStruct ...)``) for ahead-of-time plans.
    """
    def run(params, ids, mask):
        with decoder.activation_sharding(mesh if mesh is not None and mesh.size > 1 else None):
            return response_logprobs(decoder.cast_to_compute(params, model_cfg), model_cfg, ids, mask,
                                     prompt_len, resp_len, chunk, with_entropy=False, temperature=temperature)[0]

    if mesh is None:
        return jax.jit(run)
    rows = batch_sharding(mesh)
    return jax.jit(run, in_shardings=(param_shardings(model_cfg, mesh), rows, rows), out_shardings=rows)


def _global_passes(run, params, ids, mask, resp_len: int, micro_batch: int, mesh) -> np.ndarray:
    """`compute_logprobs` on several hosts: each global pass of ``micro_batch`` rows holds
    ``micro_batch / hosts`` rows of every host (masked fill rows where a host has run out), the
    params stay sharded over the whole mesh, and each host keeps its own rows' log-probs."""
    from jax.experimental import multihost_utils

    hosts = jax.process_count()
    if micro_batch % hosts:
        raise ValueError(f"micro_batch {micro_batch} must be a multiple of the host count {hosts}")
    local = micro_batch // hosts
    B, T = ids.shape
    shapes = multihost_utils.process_allgather(np.asarray([-(-B // local), T, resp_len], np.int64))
    if len({(int(t), int(r)) for _, t, r in shapes.reshape(hosts, 3)}) > 1:
        raise ValueError(f"hosts disagree on the pass's (width, response length): {shapes.reshape(hosts, 3)[:, 1:]}")
    calls = int(shapes.reshape(hosts, 3)[:, 0].max())
    sharding = batch_sharding(mesh)
    outs = []
    for c in range(calls):
        i, m = ids[c * local:(c + 1) * local], mask[c * local:(c + 1) * local]
        n = i.shape[0]
        fill = np.zeros((local - n, T), np.int32)
        i, m = np.concatenate([i, fill]), np.concatenate([m, fill])
        out = run(params, jax.make_array_from_process_local_data(sharding, i),
                  jax.make_array_from_process_local_data(sharding, m))
        mine = multihost_utils.global_array_to_host_local_array(out, mesh, sharding.spec)
        outs.append(np.asarray(mine)[:n])
    if not outs:
        return np.zeros((0, resp_len), np.float32)
    return np.concatenate(outs).astype(np.float32)


def compute_logprobs(params, cfg: ModelConfig, ids, mask, prompt_len: int, resp_len: int,
                     micro_batch: int, chunk: int | None = None, mesh=None, temperature: float = 1.0) -> np.ndarray:
    """Host helper: ``logp [B, R]`` (numpy float32) in jitted passes of ``micro_batch`` rows, of
    the policy at the sampling ``temperature``.

    For ``old_logp`` (theta_old), ``ref_logp`` (reference params) or ``teacher_logp``
    (theta_old on the teacher twins). The last micro-batch is padded to the static size with
    all-masked rows (their output is dropped), so one program serves every call. With a
    ``mesh`` the pass runs sharded (`make_logprob_pass`); params not yet placed by the rules
    are placed first (`scoring_params` places a frozen tree once).

    Several processes (hosts) sharing ``mesh`` call this together, each with its own rows
    (`_global_passes`): every pass takes ``micro_batch / process_count`` rows of each host, as
    many passes as the host with the most rows needs; ``resp_len`` and the ids' width must
    agree across hosts (the caller widens its rows to the hosts' common lengths first).
    """
    ids = np.asarray(ids, np.int32)
    mask = np.asarray(mask, np.int32)
    B = ids.shape[0]
    if micro_batch < 1:
        raise ValueError(f"micro_batch must be >= 1, got {micro_batch}")
    sharding = None
    if mesh is not None:
        if micro_batch % batch_divisor(mesh):
            raise ValueError(f"micro_batch {micro_batch} must be a multiple of the "
                             f"data x fsdp mesh size {batch_divisor(mesh)}")
        sharding = batch_sharding(mesh)
        params = jax.device_put(params, param_shardings(cfg, mesh))
    run = make_logprob_pass(cfg, prompt_len, resp_len, chunk, mesh, float(temperature))
    if mesh is not None and jax.process_count() > 1:
        return _global_passes(run, params, ids, mask, resp_len, micro_batch, mesh)
    outs = []
    for s in range(0, B, micro_batch):
        i, m = ids[s:s + micro_batch], mask[s:s + micro_batch]
        n = i.shape[0]
        if n < micro_batch:
            i = np.concatenate([i, np.zeros((micro_batch - n, i.shape[1]), np.int32)])
            m = np.concatenate([m, np.zeros((micro_batch - n, m.shape[1]), np.int32)])
        if sharding is not None:
            i, m = jax.device_put(i, sharding), jax.device_put(m, sharding)
        outs.append((n, run(params, i, m)))
    if not outs:
        return np.zeros((0, resp_len), np.float32)
    return np.concatenate([np.asarray(o)[:n] for n, o in outs]).astype(np.float32)
