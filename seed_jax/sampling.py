"""Batched generation: one prefill, then a `jax.lax.while_loop` decode over a donated KV cache.

Prompts are left-padded into a few static length buckets (and the batch into power-of-two
row buckets), so a new prompt length does not recompile. The decode loop runs on device in
chunks of ``chunk`` tokens; between chunks the host looks for stop strings (``</action>``,
``</search>``, ``</answer>`` ...) in the decoded text and marks those rows finished, and the
cache is donated back into the next chunk. With ``think_tags`` a stop string counts only
outside thinking, by the action parser's rule (`envs.actions.find_stop`): a ``</action>``
written inside ``<think>...</think>``, or after a ``<think>`` not yet closed, does not end
the response. Rows also finish on an EOS token. Prefill and
decode run the layer-unrolled decoder on per-layer weights (`decoder.unstack_layers`: views of
the stacked arrays on CPU, a copy made once per call on other backends) and per-layer caches.

Sampling per step (``logits`` float32 of the last position):

* greedy when ``temperature == 0``: ``argmax(logits)``;
* else ``z = logits / temperature``; top-k keeps the k largest ``z``; top-p keeps the smallest
  set of tokens whose probability mass reaches ``top_p``; sample from ``softmax(z)`` restricted.

The returned log-prob of each sampled token is ``log_softmax(z)[token]`` before top-k/top-p
truncation (``z = logits`` when greedy), i.e. the policy's log-prob at the sampling
temperature. Randomness is per row: ``fold_in(fold_in(PRNGKey(seed), row_id), step)``, where
``row_id`` names the row (its index, or the caller's ``row_ids``), so a given seed reproduces
and a row draws the same tokens whichever batch (or wave) it is sampled in.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import weakref
from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from seed_jax.buckets import BUCKETS, round_to_multiple, round_up, row_bucket
from seed_jax.envs.actions import find_stop
from seed_jax.models import decoder, scan_cache
from seed_jax.models.config import ModelConfig, resolve_dtype
from seed_jax.models.decoder import KVCache
from seed_jax.models.scan_cache import StackedCache


@dataclasses.dataclass(frozen=True)
class SamplingParams:
    """Decode settings. What shapes the compiled programs is their static key (`program_key`:
    ``max_new_tokens``, ``chunk``, ``top_k``, greedy or not, top-p filtering or not); the
    temperature and top-p values are runtime arguments (`knobs`), so runs at T = 0.4 and T = 1.0
    share one prefill and one decode program per bucket.

    The field names are `generate`'s keyword arguments:
    ``generate(model, tok, prompts, **dataclasses.asdict(sp))`` decodes with ``sp``.
    """

    max_new_tokens: int = 128
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    chunk: int = 32

    def __post_init__(self):
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0, got {self.top_k}")


def program_key(sp: SamplingParams) -> SamplingParams:
    """The static part of ``sp`` (the jitted prefill / decode programs' key): ``max_new_tokens``
    (a shape: the token buffers are ``N`` long, the KV cache ``P + N``), ``chunk`` (the decode
    loop's bound per call), ``top_k`` (``lax.top_k``'s static k), whether sampling is greedy
    (``temperature == 0``: kept as 0, else 1) and whether top-p filters (``top_p < 1``: kept as
    0.5, else 1). The values themselves travel in `knobs`."""
    return dataclasses.replace(sp, temperature=float(sp.temperature > 0), top_p=1.0 if sp.top_p >= 1 else 0.5)


def knobs(sp: SamplingParams) -> jax.Array:
    """``[temperature, top_p]`` float32: the runtime part of ``sp`` (`program_key`)."""
    return jnp.asarray([sp.temperature, sp.top_p], jnp.float32)


BACKENDS = ("auto", "unrolled", "scan")


@dataclasses.dataclass(frozen=True)
class SamplerSpec:
    """Where and how generation runs (hashable: part of the compiled programs' key).

    ``backend``: ``"unrolled"`` is the CPU path (a Python loop over per-layer weights and
    per-layer ``[B, K, D, S]`` key / ``[B, K, S, D]`` value caches; fastest on one CPU device,
    where the weights are views of the stacked arrays; on several devices or an accelerator a
    compute-dtype per-layer replica on every device and rows over the devices: no per-step
    slicing of weights or cache, compile time linear in depth); ``"scan"`` is the sharded path (`seed_jax.models.scan_cache`: one scanned layer body, a
    ``[L, B, S, K, D]`` cache, rows over devices); ``"auto"`` takes ``unrolled`` on one CPU
    device and ``scan`` everywhere else. ``tensor_parallel``: the scan path's sampler copy is
    split over that many devices by heads (and MLP columns, and vocabulary columns of the
    output head), rows over the remaining ``devices / tensor_parallel``; 1: a full replica
    per device. ``prefill_scratch_bytes``: per-device budget of one prefill chunk's float32
    attention scores and MLP activations (the prompt pass runs in as many row chunks as that
    needs). ``devices``: None for this host's devices (`jax.local_devices`).
    """

    backend: str = "auto"
    tensor_parallel: int = 1
    prefill_scratch_bytes: int = 1 << 30
    devices: tuple | None = None

    def __post_init__(self):
        if self.backend not in BACKENDS:
            raise ValueError(f"sampler backend must be one of {BACKENDS}, got {self.backend!r}")
        if self.tensor_parallel < 1:
            raise ValueError(f"tensor_parallel must be >= 1, got {self.tensor_parallel}")
        if self.prefill_scratch_bytes < 1:
            raise ValueError(f"prefill_scratch_bytes must be >= 1, got {self.prefill_scratch_bytes}")


@dataclasses.dataclass(frozen=True)
class Layout:
    """A resolved `SamplerSpec`: the backend and, for ``scan``, the ``('rows', 'heads')`` mesh."""

    backend: str
    mesh: Mesh | None = None
    prefill_scratch_bytes: int = 1 << 30

    @property
    def row_shards(self) -> int:
        return self.mesh.shape["rows"] if self.mesh is not None else 1

    @property
    def head_shards(self) -> int:
        return self.mesh.shape["heads"] if self.mesh is not None else 1

    def spec(self, cfg: ModelConfig, role: str, ndim: int) -> P:
        """The PartitionSpec of an array of ``role`` (rows over 'rows'; heads, MLP columns and
        vocabulary over 'heads' when they divide it, else whole)."""
        t = self.head_shards
        heads = "heads" if cfg.num_heads % t == 0 else None
        kv = "heads" if cfg.num_kv_heads % t == 0 else None
        ffn = "heads" if cfg.intermediate_size % t == 0 else None
        vocab = "heads" if cfg.vocab_size % t == 0 else None
        specs = {"hidden": P("rows"), "rows": P("rows"), "heads": P("rows", None, heads),
                 "kv_heads": P("rows", None, kv), "ffn": P("rows", None, ffn), "logits": P("rows", vocab),
                 "cache": P(None, "rows", None, kv)}
        return specs[role] if ndim else P()

    def shard(self, cfg: ModelConfig):
        """The `scan_cache.Shard` of this layout (identity without a mesh)."""
        if self.mesh is None:
            return scan_cache.no_shard

        def shard(x, role):
            return jax.lax.with_sharding_constraint(x, NamedSharding(self.mesh, self.spec(cfg, role, x.ndim)))

        return shard

    def weight_specs(self, cfg: ModelConfig, tree: dict) -> dict:
        """PartitionSpecs of the sampler copy (`scan_cache.sampler_tree`): q/k/v columns, o_proj
        rows, gate/up columns, down rows and lm_head columns over 'heads' where they divide it;
        everything else replicated."""
        t = self.head_shards
        H, K = cfg.num_heads, cfg.num_kv_heads

        def one(path, leaf):
            p = decoder_path(path)
            col = P(*([None] * (leaf.ndim - 1)), "heads")
            row = P(None, "heads", None)
            if p.startswith("layers/self_attn/q_proj/") and H % t == 0:
                return col
            if p.startswith(("layers/self_attn/k_proj/", "layers/self_attn/v_proj/")) and K % t == 0:
                return col
            if p == "layers/self_attn/o_proj/kernel" and H % t == 0:
                return row
            if p.startswith(("layers/mlp/gate_proj/", "layers/mlp/up_proj/")) and cfg.intermediate_size % t == 0:
                return col
            if p == "layers/mlp/down_proj/kernel" and cfg.intermediate_size % t == 0:
                return row
            if p == "lm_head" and cfg.vocab_size % t == 0:
                return P(None, "heads")
            return P()

        return jax.tree_util.tree_map_with_path(one, tree)


def decoder_path(path) -> str:
    """``a/b/c`` of a parameter-tree key path."""
    return "/".join(str(getattr(k, "key", getattr(k, "name", getattr(k, "idx", k)))) for k in path)


def resolve_layout(spec: SamplerSpec | None = None) -> Layout:
    """The `Layout` a `SamplerSpec` (None: the default one) asks for on this host."""
    spec = spec or SamplerSpec()
    devices = sorted(spec.devices if spec.devices is not None else jax.local_devices(), key=lambda d: d.id)
    backend = spec.backend
    if backend == "auto":
        backend = "unrolled" if len(devices) == 1 and devices[0].platform == "cpu" else "scan"
    if backend == "unrolled" and spec.tensor_parallel != 1:
        raise ValueError("tensor_parallel needs the scan backend")
    if backend == "unrolled" and len(devices) == 1 and devices[0].platform == "cpu":
        return Layout("unrolled")  # weight views, no mesh: the CPU path as it always was
    t = spec.tensor_parallel
    if len(devices) % t:
        raise ValueError(f"tensor_parallel={t} must divide the device count {len(devices)}")
    mesh = Mesh(np.asarray(devices, dtype=object).reshape(len(devices) // t, t), ("rows", "heads"))
    return Layout(backend, mesh, spec.prefill_scratch_bytes)


def prefill_chunks(cfg: ModelConfig, layout: Layout, rows: int, prompt_len: int) -> int:
    """Row chunks of the prompt pass: the fewest (a power of two dividing the rows per row
    shard) such that one chunk's per-device float32 scratch, ``4 P (H P + 3 I)`` bytes per row
    (attention scores and the MLP's gate/up/product), fits ``layout.prefill_scratch_bytes``."""
    per_dev = rows // layout.row_shards
    per_row = 4 * prompt_len * (cfg.num_heads * prompt_len + 3 * cfg.intermediate_size) // layout.head_shards
    fit = max(1, layout.prefill_scratch_bytes // max(per_row, 1))
    c = 1
    while c * 2 <= min(fit, per_dev) and per_dev % (c * 2) == 0:
        c *= 2
    return per_dev // c


def prefill_query_chunk(cfg: ModelConfig, layout: Layout, rows: int, prompt_len: int, chunks: int) -> int:
    """Queries per attention block of the prompt pass: the largest divisor ``c`` of ``P`` whose
    float32 scores, ``4 * (rows / row_shards / chunks) * H * c * P / head_shards`` bytes per
    device, fit ``layout.prefill_scratch_bytes`` (at least 1); ``P`` itself when the whole
    prompt's scores fit (one block)."""
    per_dev = max(1, rows // layout.row_shards // max(1, chunks))
    per_query = 4 * per_dev * cfg.num_heads * prompt_len // layout.head_shards
    fit = max(1, layout.prefill_scratch_bytes // max(per_query, 1))
    if fit >= prompt_len:
        return prompt_len
    return max(c for c in range(1, fit + 1) if prompt_len % c == 0)


class _Scope(NamedTuple):
    """One open `sampler_scope`: the params version it was made for (weak references to every
    leaf, so an old version is not kept alive), its (config, layout) and the copy itself."""

    key: tuple
    refs: list
    tree: dict


_SCOPES: list[_Scope] = []  # the open `sampler_scope` blocks, innermost last


def _scoped_copy(params, cfg: ModelConfig, layout: Layout):
    """The copy of the innermost open `sampler_scope` made for this very ``params`` version
    (every leaf the same object) and layout; None when no open scope holds it."""
    leaves = jax.tree.leaves(params)
    for s in reversed(_SCOPES):
        if s.key == (cfg, layout) and len(s.refs) == len(leaves) and all(r() is a for r, a in zip(s.refs, leaves)):
            return s.tree
    return None


@contextlib.contextmanager
def sampler_scope(params, cfg: ModelConfig, sampler: SamplerSpec | None = None):
    """The sampler's copy of ``params`` (compute dtype, ``sampler``'s layout), made on entry and
    used by every `generate` on the same ``params`` inside the block; released on exit, so its
    memory is free for the next phase (e.g. a donating train step).

    With parameters sharded over several hosts the copy is gathered by a collective, so every
    host enters the block at the same point, also a host that then has nothing to sample.
    Yields the copy. Outside any scope `generate` makes a copy for that call alone; a scope
    inside one that already holds this version and layout reuses its copy (no second copy).
    """
    layout = resolve_layout(sampler)
    held = _scoped_copy(params, cfg, layout)
    if held is not None:
        yield held
        return
    scope = _Scope((cfg, layout), [weakref.ref(a) for a in jax.tree.leaves(params)],
                   _make_sampler_params(params, cfg, layout))
    _SCOPES.append(scope)
    try:
        yield scope.tree
    finally:
        _SCOPES.remove(scope)


def local_replica(params):
    """``params`` whole on this host's first device. Leaves sharded over several hosts are made
    whole by one compiled gather (device to device, never through host memory), so with such
    leaves every host calls this together."""
    leaves = jax.tree.leaves(params)
    if all(not isinstance(a, jax.Array) or a.is_fully_addressable for a in leaves):
        return params
    sharded = [a for a in leaves if not a.is_fully_replicated]
    if sharded:
        whole = NamedSharding(sharded[0].sharding.mesh, P())
        params = jax.jit(lambda p: p, out_shardings=whole)(params)
    return jax.tree.map(lambda a: a.addressable_data(0), params)


def _make_sampler_params(params, cfg: ModelConfig, layout: Layout):
    dtype = resolve_dtype(cfg.dtype)
    if layout.backend == "unrolled":
        if layout.mesh is None:
            return _decode_params(local_replica(params), cfg)
        # per-layer arrays in the compute dtype, a replica on every device (copied once per version)
        params = jax.device_put(local_replica(params), NamedSharding(layout.mesh, P()))
        return jax.jit(lambda p: decoder.unstack_layers(jax.tree.map(lambda a: a.astype(dtype), p), cfg),
                       out_shardings=NamedSharding(layout.mesh, P()))(params)
    shapes = jax.eval_shape(lambda p: scan_cache.sampler_tree(p, cfg, dtype), params)
    specs = layout.weight_specs(cfg, shapes)
    leaves = jax.tree.leaves(params)
    if not all(not isinstance(a, jax.Array) or a.is_fully_addressable for a in leaves):
        return _gather_to_local(params, cfg, layout, specs, dtype)
    mesh_devices = set(layout.mesh.devices.flat)
    if any(isinstance(a, jax.Array) and a.committed and set(a.devices()) != mesh_devices for a in leaves):
        params = jax.device_put(params, NamedSharding(layout.mesh, P()))  # e.g. a copy on one device
    out = jax.tree.map(lambda s: NamedSharding(layout.mesh, s), specs)
    return jax.jit(lambda p: scan_cache.sampler_tree(p, cfg, dtype), out_shardings=out)(params)


def _gather_to_local(params, cfg: ModelConfig, layout: Layout, specs, dtype):
    """Multi-host: the sampler copy made on a global ``('rows', 'heads')`` mesh of every device
    (device to device, compute dtype; never through host memory), then each host's shards
    re-wrapped as arrays of its own ``layout.mesh`` (this host's devices, sorted by id as the
    global mesh orders them, so each device keeps its 'heads' coordinate)."""
    t = layout.head_shards
    devices = sorted(jax.devices(), key=lambda d: (d.process_index, d.id))
    gmesh = Mesh(np.asarray(devices, dtype=object).reshape(len(devices) // t, t), ("rows", "heads"))
    out = jax.tree.map(lambda s: NamedSharding(gmesh, s), specs)
    glob = jax.jit(lambda p: scan_cache.sampler_tree(p, cfg, dtype), out_shardings=out)(params)
    by_device = {}

    def localize(a, spec):
        by_device.clear()
        for s in a.addressable_shards:
            by_device[s.device] = s.data
        sharding = NamedSharding(layout.mesh, spec)
        return jax.make_array_from_single_device_arrays(
            a.shape, sharding, [by_device[d] for d in sharding.addressable_devices_indices_map(a.shape)])

    return jax.tree.map(localize, glob, specs)


class DecodeState(NamedTuple):
    tokens: jax.Array  # [B, N] generated ids (pad after finish)
    logprobs: jax.Array  # [B, N]
    done: jax.Array  # [B] bool
    length: jax.Array  # [B] number of generated tokens
    step: jax.Array  # scalar: tokens generated so far (all rows)
    cache: tuple[KVCache, ...] | StackedCache  # unrolled: one per layer; scan: stacked
    kv_mask: jax.Array  # [B, S]
    next_pos: jax.Array  # [B] position id of the next input token


@dataclasses.dataclass
class GenerationResult:
    token_ids: list[list[int]]
    texts: list[str]
    logprobs: list[list[float]]
    finish_reasons: list[str]  # "eos" | "stop" | "length"


def _greedy(logits: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``argmax`` (first index of the maximum) and its ``log_softmax``, sharing one max.

    ``lp = (z - m)[tok] - log(sum(exp(z - m)))`` with ``m = max(z)``, as `jax.nn.log_softmax`
    computes it. Two plain reductions instead of XLA's index-carrying argmax reduce, which
    is several times slower on CPU over a whole vocabulary.
    """
    m = jnp.max(logits, axis=-1, keepdims=True)
    iota = jax.lax.broadcasted_iota(jnp.int32, logits.shape, logits.ndim - 1)
    tok = jnp.min(jnp.where(logits == m, iota, logits.shape[-1] - 1), axis=-1)
    shifted = logits - m
    lp = jnp.take_along_axis(shifted, tok[:, None], -1)[:, 0] - jnp.log(jnp.sum(jnp.exp(shifted), -1))
    return tok, lp


def sample_token(logits: jax.Array, rng: jax.Array, sp: SamplingParams,
                 values: jax.Array | None = None) -> tuple[jax.Array, jax.Array]:
    """(token [B], log-prob [B]) for one decode step; see the module docstring. ``rng``: one
    key for the whole batch, or one key per row (``[B, 2]``). ``values``: `knobs` (traced
    ``[temperature, top_p]``) standing in for ``sp``'s values, ``sp`` then being a `program_key`."""
    temperature, top_p = (sp.temperature, sp.top_p) if values is None else (values[0], values[1])
    if sp.temperature == 0:
        return _greedy(logits)
    z = logits / temperature
    logp = jax.nn.log_softmax(z)
    filt = z
    if sp.top_k:
        kth = jax.lax.top_k(z, sp.top_k)[0][:, -1:]
        filt = jnp.where(z < kth, -jnp.inf, filt)
    if sp.top_p < 1.0:
        sorted_z = jnp.sort(filt, axis=-1)[:, ::-1]
        probs = jax.nn.softmax(sorted_z, axis=-1)
        mass_before = jnp.cumsum(probs, axis=-1) - probs
        cutoff_idx = jnp.sum(mass_before < top_p, axis=-1) - 1
        cutoff = jnp.take_along_axis(sorted_z, cutoff_idx[:, None], -1)
        filt = jnp.where(filt < cutoff, -jnp.inf, filt)
    if rng.ndim == 2:
        tok = jax.vmap(lambda k, f: jax.random.categorical(k, f, axis=-1))(rng, filt)
    else:
        tok = jax.random.categorical(rng, filt, axis=-1)
    return tok, jnp.take_along_axis(logp, tok[:, None], -1)[:, 0]


def _step_keys(row_keys, step):
    """``fold_in(row_key, step)`` for every row's key ``[B, 2]``."""
    return jax.vmap(lambda k: jax.random.fold_in(k, step))(row_keys)


def _initial_state(cfg, sp: SamplingParams, values, logits, cache, kv_mask, positions, rng, eos_ids, row_live,
                   shard) -> DecodeState:
    B, N = kv_mask.shape[0], sp.max_new_tokens
    tok, lp = sample_token(logits, _step_keys(rng, 0), sp, values)
    done = jnp.isin(tok, eos_ids) | ~row_live
    out = shard(jnp.zeros((B, N), jnp.int32).at[:, 0].set(tok), "rows")
    lps = shard(jnp.zeros((B, N), jnp.float32).at[:, 0].set(lp), "rows")
    return DecodeState(out, lps, done, jnp.where(row_live, 1, 0), jnp.array(1, jnp.int32),
                       cache, kv_mask, positions[:, -1] + 1)


@functools.partial(jax.jit, static_argnums=(1, 4, 8, 9))
def _prefill(uparams, cfg: ModelConfig, tokens, mask, sp: SamplingParams, rng, eos_ids, row_live,
             layout: Layout, chunks: int, values):
    """``sp``: a `program_key`; ``values``: its `knobs`."""
    B, P = tokens.shape
    N = sp.max_new_tokens
    shard = layout.shard(cfg)
    positions = decoder.positions_from_mask(mask)
    kv_mask = shard(jnp.concatenate([mask, jnp.zeros((B, N), mask.dtype)], axis=1), "rows")
    if layout.backend == "unrolled":
        cache = tuple(KVCache(shard(c.k, "rows"), shard(c.v, "rows")) for c in KVCache.zeros(cfg, B, P + N).split())
        logits, cache = decoder.forward_cached_unrolled(uparams, cfg, tokens, positions, kv_mask, cache,
                                                        0, last_only=True)
        logits = logits[:, -1]
    else:
        cache = StackedCache.zeros(cfg, B, P + N, uparams["lm_head"].dtype, shard)
        q_chunk = prefill_query_chunk(cfg, layout, B, P, chunks)
        logits, cache = scan_cache.prefill(uparams, cfg, tokens, positions, kv_mask, cache, chunks, shard, q_chunk)
    return _initial_state(cfg, sp, values, logits, cache, kv_mask, positions, rng, eos_ids, row_live, shard)


_unstack_layers = jax.jit(decoder.unstack_layers, static_argnums=1)


def _decode_params(params, cfg: ModelConfig) -> dict:
    """`decoder.unstack_layers` for generation, without copying layer weights on CPU.

    On the CPU backend, ``jax.device_put`` of a NumPy view into an array's memory aliases that
    memory, so each layer's arrays are views of the stacked ones (no second copy of the
    weights). Elsewhere (accelerators, sharded arrays) the layers are copied, once per call.
    """
    leaves = jax.tree.leaves(params)
    on_cpu = all(isinstance(a, jax.Array) and len(a.devices()) == 1
                 and next(iter(a.devices())).platform == "cpu" for a in leaves)
    if not on_cpu:
        return _unstack_layers(params, cfg)
    host = {**params, "layers": jax.tree.map(np.asarray, params["layers"])}  # zero-copy on CPU
    out = decoder.unstack_layers(host, cfg, take_layer=lambda a, i: jax.device_put(a[i]))
    # the other leaves uncommitted too, as the layers are: the sampler's programs then do not depend on
    # the shardings of the tree copied from (a train mesh's), so `lower_programs` builds the same ones
    return {k: v if k.startswith("layers_") else jax.tree.map(lambda a: jax.device_put(np.asarray(a)), v)
            for k, v in out.items()}


@functools.partial(jax.jit, static_argnums=(1, 3, 8), donate_argnums=(2,))
def _decode_chunk(uparams, cfg: ModelConfig, state: DecodeState, sp: SamplingParams, prompt_len,
                  rng, eos_ids, pad_id, layout: Layout, values):
    """``sp``: a `program_key`; ``values``: its `knobs`."""
    end = jnp.minimum(state.step + sp.chunk, sp.max_new_tokens)
    shard = layout.shard(cfg)

    def forward(prev, positions, kv_mask, cache, slot):
        if layout.backend == "unrolled":
            logits, cache = decoder.forward_cached_unrolled(uparams, cfg, prev, positions, kv_mask, cache, slot)
            return logits[:, -1], cache
        return scan_cache.decode_step(uparams, cfg, prev, positions, kv_mask, cache, slot, shard)

    def cond(s: DecodeState):
        return (s.step < end) & ~jnp.all(s.done)

    def body(s: DecodeState):
        prev = jax.lax.dynamic_index_in_dim(s.tokens, s.step - 1, axis=1, keepdims=True)  # [B, 1]
        slot = prompt_len + s.step - 1
        kv_mask = jax.lax.dynamic_update_slice_in_dim(
            s.kv_mask, jnp.ones((s.kv_mask.shape[0], 1), s.kv_mask.dtype), slot, axis=1)
        logits, cache = forward(prev, s.next_pos[:, None], kv_mask, s.cache, slot)
        tok, lp = sample_token(logits, _step_keys(rng, s.step), sp, values)
        tok = jnp.where(s.done, pad_id, tok)
        lp = jnp.where(s.done, 0.0, lp)
        tokens = jax.lax.dynamic_update_slice_in_dim(s.tokens, tok[:, None], s.step, axis=1)
        logprobs = jax.lax.dynamic_update_slice_in_dim(s.logprobs, lp[:, None], s.step, axis=1)
        length = s.length + (~s.done).astype(jnp.int32)
        done = s.done | jnp.isin(tok, eos_ids)
        return DecodeState(tokens, logprobs, done, length, s.step + 1, cache, kv_mask, s.next_pos + 1)

    return jax.lax.while_loop(cond, body, state)


def _find_stop(tokenizer, ids: list[int], stop_strings: Sequence[str], start: int,
               think_tags: tuple[str, str] | None = None) -> int | None:
    """Smallest k >= start such that decode(ids[:k]) holds a stop string (outside thinking when
    ``think_tags`` are given, `envs.actions.find_stop`), else None."""
    if not stop_strings:
        return None

    def holds_stop(k: int) -> bool:
        return find_stop(tokenizer.decode(ids[:k], skip_special_tokens=True), stop_strings, think_tags) is not None

    if not holds_stop(len(ids)):
        return None
    for k in range(max(1, start), len(ids) + 1):
        if holds_stop(k):
            return k
    return len(ids)


def _tail_may_stop(tokenizer, ids: list[int], stop_strings: Sequence[str], checked: int) -> bool:
    """Whether a stop string may end in ``ids[checked:]``: the text of the new tokens and the
    ``max(bytes(stop)) + 8`` tokens before them holds one (thinking ignored).

    A stop string that ends after token ``checked`` lies within that window, since every token
    but a special one stands for at least one byte of text; False therefore means no new stop, and
    only rows that pass this filter pay for `_find_stop`'s decoding of their whole text.
    """
    lo = max(0, checked - max(len(s.encode()) for s in stop_strings) - 8)
    tail = tokenizer.decode(ids[lo:], skip_special_tokens=True)
    return any(s in tail for s in stop_strings)


def generate(model, tokenizer, prompts, *, max_new_tokens: int = 128, temperature: float = 1.0,
             top_p: float = 1.0, top_k: int = 0, seed: int = 0, stop_strings: Sequence[str] = (),
             prompt_buckets: Sequence[int] = BUCKETS, chunk: int = 32,
             params=None, ignore_eos: bool = False,
             think_tags: tuple[str, str] | None = None,
             sampler: SamplerSpec | None = None, row_ids: Sequence[int] | None = None) -> GenerationResult:
    """Generate continuations for a batch of prompts.

    ``model`` is a `seed_jax.models.Model` (``params`` overrides its parameters, e.g. the
    trainer's current ones). ``prompts`` are strings (already chat-templated; tokenized without
    extra special tokens) or lists of token ids. Returns the new token ids (EOS included when
    produced, nothing after a stop string's last token), their text (special tokens skipped,
    cut right after the stop string) and the sampled tokens' log-probs. ``think_tags`` (opening,
    closing; e.g. `envs.actions.THINK_TAGS`): stop strings inside thinking do not count (None:
    they count anywhere). ``ignore_eos`` runs all ``max_new_tokens`` steps (for benchmarks).
    ``sampler``: the backend and device layout (`SamplerSpec`; None: the default). The
    sampler's copy of the parameters comes from the open `sampler_scope` of ``params`` (else one
    is made for this call).
    ``row_ids``: one integer per prompt naming its random stream (default: its index), so that
    a prompt sampled with the same seed and id draws the same tokens in any batch.
    """
    cfg: ModelConfig = model.config
    params = model.params if params is None else params
    sp = SamplingParams(max_new_tokens, temperature, top_p, top_k, min(chunk, max_new_tokens))
    if isinstance(prompts, (str, bytes)):
        raise TypeError("prompts must be a list of strings or of token-id lists")
    ids = [list(p) if not isinstance(p, str) else tokenizer(p, add_special_tokens=False)["input_ids"]
           for p in prompts]
    n = len(ids)
    if n == 0:
        return GenerationResult([], [], [], [])
    if any(len(x) == 0 for x in ids):
        raise ValueError("empty prompt")
    layout = resolve_layout(sampler)
    P_len = round_up(max(len(x) for x in ids), prompt_buckets)
    B = round_to_multiple(row_bucket(n), layout.row_shards)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    tokens = np.full((B, P_len), pad_id, np.int32)
    mask = np.zeros((B, P_len), np.int32)
    for i, x in enumerate(ids):
        tokens[i, P_len - len(x):] = x
        mask[i, P_len - len(x):] = 1
    mask[n:, -1] = 1  # filler rows: one dummy token so their attention is well defined
    row_live = np.arange(B) < n
    eos = sorted(set(cfg.eos_token_ids) | ({tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()))
    if ignore_eos:  # benchmarks: always run max_new_tokens steps
        eos = []
    eos_ids = jnp.asarray(eos or [-1], jnp.int32)
    if row_ids is None:
        row_ids = range(n)
    elif len(row_ids) != n:
        raise ValueError(f"row_ids: {len(row_ids)} ids for {n} prompts")
    key_ids = np.asarray(list(row_ids) + [(1 << 30) + i for i in range(B - n)], np.int32)  # filler rows
    rng = jax.vmap(lambda i: jax.random.fold_in(jax.random.PRNGKey(seed), i))(jnp.asarray(key_ids))
    uparams = _scoped_copy(params, cfg, layout)
    if uparams is None:  # no open scope holds this version: a copy for this call alone
        uparams = _make_sampler_params(params, cfg, layout)
    put = jnp.asarray
    if layout.mesh is not None:
        rows = NamedSharding(layout.mesh, P("rows"))

        def put(a):
            return jax.device_put(a, rows)
    chunks = prefill_chunks(cfg, layout, B, P_len) if layout.backend == "scan" else 1
    rng = put(rng)
    key, values = program_key(sp), knobs(sp)
    state = _prefill(uparams, cfg, put(tokens), put(mask), key, rng, eos_ids, put(row_live), layout, chunks, values)
    stop_at: dict[int, int] = {}
    checked = [0] * n
    while True:
        if stop_strings:  # one transfer per chunk: flags, step and the tokens the stop check reads
            done, step, toks, lengths = jax.device_get((state.done, state.step, state.tokens, state.length))
            newly = False
            for i in range(n):
                if i in stop_at or lengths[i] <= checked[i]:
                    continue
                row = toks[i, :lengths[i]].tolist()
                k = None
                if _tail_may_stop(tokenizer, row, stop_strings, checked[i]):
                    k = _find_stop(tokenizer, row, stop_strings, checked[i], think_tags)
                checked[i] = int(lengths[i])
                if k is not None:
                    stop_at[i] = k
                    newly = True
            if newly:
                mark = np.array([i in stop_at for i in range(B)])
                state = state._replace(done=state.done | put(mark))
                done = done | mark
        else:
            done, step = jax.device_get((state.done, state.step))
        if int(step) >= max_new_tokens or bool(np.all(done)):
            break
        state = _decode_chunk(uparams, cfg, state, key, P_len, rng, eos_ids, jnp.int32(pad_id), layout, values)
    toks, lps, lengths, done = jax.device_get((state.tokens, state.logprobs, state.length, state.done))
    out_ids, texts, out_lps, reasons = [], [], [], []
    eos_set = set(eos)
    for i in range(n):
        k = int(lengths[i])
        reason = "length"
        if i in stop_at:
            k, reason = min(k, stop_at[i]), "stop"
        elif k and int(toks[i, k - 1]) in eos_set:
            reason = "eos"
        row = toks[i, :k].tolist()
        text = tokenizer.decode(row, skip_special_tokens=True)
        if reason == "stop":
            cut = find_stop(text, stop_strings, think_tags)
            text = text[:cut] if cut is not None else text
        out_ids.append(row)
        texts.append(text)
        out_lps.append([float(v) for v in lps[i, :k]])
        reasons.append(reason)
    return GenerationResult(out_ids, texts, out_lps, reasons)


def shape_buckets(max_rows: int, max_prompt_tokens: int, layout: Layout,
                  prompt_buckets: Sequence[int] = BUCKETS) -> list[tuple[int, int]]:
    """Every ``(rows, prompt_len)`` pair `generate` can compile for calls of at most ``max_rows``
    prompts of at most ``max_prompt_tokens`` tokens on ``layout``: rows are powers of two
    (rounded up to a multiple of the row shards), prompt lengths the buckets up to the one that
    holds ``max_prompt_tokens``."""
    rows = sorted({round_to_multiple(row_bucket(n), layout.row_shards)
                   for n in [1 << i for i in range(max(max_rows, 1).bit_length())] + [max_rows]})
    top = round_up(max_prompt_tokens, prompt_buckets)
    lens = sorted({b for b in prompt_buckets if b <= top} | {top})
    return [(r, p) for r in rows for p in lens]


def lower_programs(cfg: ModelConfig, layout: Layout, rows: int, prompt_len: int, sp: SamplingParams,
                   eos_count: int = 1) -> dict:
    """The prefill and decode-chunk programs of one ``(rows, prompt_len)`` bucket, lowered from
    abstract inputs (no parameters or cache allocated): ``{"prefill": Lowered, "decode":
    Lowered}``, e.g. for ``.compile().memory_analysis()`` in a capacity plan. ``layout``:
    `resolve_layout` (``scan``: the arguments carry the sampler's shardings); ``eos_count``: the
    EOS ids `generate` stops on (a shape)."""
    shard = None if layout.mesh is None else (lambda spec: NamedSharding(layout.mesh, spec))

    def abstract(shape, dtype, spec=None):
        spec = P("rows") if spec is None else spec
        return jax.ShapeDtypeStruct(shape, dtype, sharding=None if shard is None else shard(spec))

    if layout.backend == "scan":
        dtype = resolve_dtype(cfg.dtype)
        tree = jax.eval_shape(lambda p: scan_cache.sampler_tree(p, cfg, dtype),
                              jax.eval_shape(lambda: decoder.init_params(cfg, jax.random.PRNGKey(0))))
        specs = layout.weight_specs(cfg, tree)
        uparams = jax.tree.map(lambda a, s: abstract(a.shape, a.dtype, s), tree, specs)
    else:
        stacked = jax.eval_shape(lambda: decoder.init_params(cfg, jax.random.PRNGKey(0)))
        uparams = jax.eval_shape(lambda p: decoder.unstack_layers(p, cfg), stacked)
        if shard is not None:  # a compute-dtype replica on every device
            uparams = jax.tree.map(lambda a: abstract(a.shape, resolve_dtype(cfg.dtype), P()), uparams)
    chunks = prefill_chunks(cfg, layout, rows, prompt_len) if layout.backend == "scan" else 1
    args = (abstract((rows, prompt_len), jnp.int32), abstract((rows, prompt_len), jnp.int32), sp,
            abstract((rows, 2), jnp.uint32), jax.ShapeDtypeStruct((eos_count,), jnp.int32), abstract((rows,), jnp.bool_))
    values = jax.ShapeDtypeStruct((2,), jnp.float32)
    prefill = _prefill.lower(uparams, cfg, *args[:2], program_key(sp), args[3], args[4], args[5], layout, chunks,
                             values)
    # the decode chunk's state as `generate` passes it: the prefill's outputs, their shardings and weak types
    weak = jax.eval_shape(lambda u, t, m, r, e, live, v: _prefill(u, cfg, t, m, program_key(sp), r, e, live, layout,
                                                                   chunks, v), uparams, *args[:2], *args[3:], values)
    state = jax.tree.map(lambda o, w: jax.ShapeDtypeStruct(o.shape, o.dtype, sharding=o.sharding, weak_type=w.weak_type),
                         prefill.out_info, weak)
    decode = _decode_chunk.lower(uparams, cfg, state, program_key(sp), prompt_len, args[3], args[4],
                                 jax.ShapeDtypeStruct((), jnp.int32), layout, values)
    return {"prefill": prefill, "decode": decode}
