"""One Flax decoder for the Llama / Qwen2 / Qwen3 family.

Pre-norm blocks: ``x += Attn(RMSNorm(x)); x += SwiGLU(RMSNorm(x))``. Attention is grouped-query
with rotary embeddings in Hugging Face's rotate-half convention (no q/k permutation), optional
qkv bias (Qwen2) and per-head q/k RMSNorm before RoPE (Qwen3). The layers are stacked with
``nn.scan`` (one compiled block, parameters with a leading ``[num_layers]`` axis), optionally
rematerialised.

Two ways to call it, sharing the same blocks:

* scoring / training (scanned layers): ``tokens [B, T]``, ``positions [B, T]``,
  ``kv_mask [B, T]`` and no cache;
* cached decoding (`forward_cached_unrolled`): the blocks run as a Python loop over per-layer
  weights (`unstack_layers`) and one `KVCache` per layer (`KVCache.split`) of ``S`` slots, the
  write offset ``cache_index`` (same for the whole batch) and ``kv_mask [B, S]`` telling which
  cache slots hold real tokens. Query ``t`` attends to slot ``s`` iff ``kv_mask[b, s]`` and
  ``s <= cache_index + t``. Only the new tokens' slots are written, in place. Generation does
  not use the scanned loop because it copies each layer's weights out of the stacked arrays at
  every call (XLA CPU cannot feed a slice to a matmul in place), a quarter of a decode step's
  time at batch 16 on SmolLM2-135M.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
from collections.abc import Sequence
from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from seed_jax.models.config import ATTENTION_IMPLS, ModelConfig, remat_name, resolve_dtype

_ROWS: contextvars.ContextVar = contextvars.ContextVar("seed_jax_activation_rows", default=None)


@contextlib.contextmanager
def activation_sharding(mesh, row_axes: Sequence[str] = ("data", "fsdp"), tensor_axis: str | None = "tensor"):
    """While tracing inside this context, activations are constrained to rows over ``row_axes``.

    `constrain_rows` then pins the embedding output, every block's residual stream and the
    LM head's hidden states / logits to ``P(row_axes)`` (batch rows split, features whole), so
    XLA all-gathers each layer's weights instead of splitting activations by feature and
    all-reducing partial sums. ``mesh=None`` (or no context): every constraint is a no-op.
    """
    token = _ROWS.set(None if mesh is None else (mesh, tuple(row_axes), tensor_axis))
    try:
        yield
    finally:
        _ROWS.reset(token)


def row_context():
    """``(mesh, row_axes)`` inside `activation_sharding`, else None."""
    ctx = _ROWS.get()
    return None if ctx is None else ctx[:2]


def tensor_split(*sizes: int) -> str | None:
    """The context's tensor axis when it has more than one device and divides every one of
    ``sizes`` (e.g. the query and kv head counts), else None: the spec entry of a dimension
    split over the tensor axis (`attend_flash`'s heads, the LM head's positions)."""
    ctx = _ROWS.get()
    if ctx is None:
        return None
    mesh, _, tensor = ctx
    n = mesh.shape.get(tensor, 1) if tensor is not None else 1
    return tensor if n > 1 and all(s % n == 0 for s in sizes) else None


def constrain_rows(x: jax.Array) -> jax.Array:
    """``x [B, ...]`` with its rows split over the context's row axes (identity without one)."""
    ctx = _ROWS.get()
    if ctx is None:
        return x
    return jax.lax.with_sharding_constraint(x, NamedSharding(ctx[0], P(ctx[1])))


def gather_weight(w: jax.Array, last_axis_tensor: bool = True) -> jax.Array:
    """``w`` whole on every row shard (split over the tensor axis on its last dim when that
    divides): the all-gather made explicit, in ``w``'s (compute) dtype. Identity without context."""
    ctx = _ROWS.get()
    if ctx is None:
        return w
    mesh, _, tensor = ctx
    last = tensor if (last_axis_tensor and tensor in mesh.shape and mesh.shape[tensor] > 1
                      and w.shape[-1] % mesh.shape[tensor] == 0) else None
    return jax.lax.with_sharding_constraint(w, NamedSharding(mesh, P(*([None] * (w.ndim - 1)), last)))


# Names tagged with `checkpoint_name` in the blocks (what the remat policies may keep).
ATTN_DOTS = ("query_proj", "key_proj", "value_proj", "attn_out", "out_proj")
MLP_DOTS = ("mlp_gate", "mlp_up", "mlp_down")


def remat_policy(remat: bool | str):
    """``(remat?, policy)`` of a `REMAT_POLICIES` name (or the old boolean) for each block.

    ``none``: nothing recomputed (every intermediate kept for the backward pass);
    ``full``: only the block input kept, the whole block recomputed;
    ``save_dots``: every weight matmul output kept (no attention scores);
    ``save_dots_except_mlp``: the attention projections and attention output kept, the MLP
    recomputed; ``save_qkv_proj``: only q/k/v kept;
    ``offload``: like ``save_dots_except_mlp`` but the kept tensors go to pinned host memory
    (backends with host offload: GPU / TPU).
    """
    name = remat_name(remat)
    cp = jax.checkpoint_policies
    policies = {
        "none": None,
        "full": cp.nothing_saveable,
        "save_dots": cp.save_only_these_names(*ATTN_DOTS, *MLP_DOTS),
        "save_dots_except_mlp": cp.save_only_these_names(*ATTN_DOTS),
        "save_qkv_proj": cp.save_only_these_names(*ATTN_DOTS[:3]),
        "offload": None if name != "offload" else cp.save_and_offload_only_these_names(
            names_which_can_be_saved=[], names_which_can_be_offloaded=list(ATTN_DOTS),
            offload_src="device", offload_dst="pinned_host"),
    }
    return name != "none", policies[name]


class KVCache(NamedTuple):
    """Stacked per-layer keys and values of ``S`` slots.

    ``k: [num_layers, B, num_kv_heads, head_dim, S]`` (keys stored transposed) and
    ``v: [num_layers, B, num_kv_heads, S, head_dim]``: per (batch, kv head), ``q k^T`` and
    ``p v`` are then plain (non-transposed) matmuls over the cache as stored.
    """

    k: jax.Array
    v: jax.Array

    @classmethod
    def zeros(cls, cfg: ModelConfig, batch: int, slots: int, dtype=None) -> KVCache:
        dtype = resolve_dtype(dtype or cfg.dtype)
        lead = (cfg.num_layers, batch, cfg.num_kv_heads)
        return cls(jnp.zeros(lead + (cfg.head_dim, slots), dtype),
                   jnp.zeros(lead + (slots, cfg.head_dim), dtype))

    def split(self) -> tuple[KVCache, ...]:
        """One `KVCache` per layer (``[B, K, D, S]`` keys, ``[B, K, S, D]`` values)."""
        return tuple(KVCache(k, v) for k, v in zip(self.k, self.v))


def rope_inv_freq(cfg: ModelConfig) -> jax.Array:
    """Inverse frequencies ``theta^(-2i/d)``, with Llama-3 / linear scaling when configured."""
    d = cfg.head_dim
    inv = 1.0 / (cfg.rope_theta ** (jnp.arange(0, d, 2, dtype=jnp.float32) / d))
    rs = cfg.rope_scaling_dict
    if not rs:
        return inv
    rtype = rs.get("rope_type", rs.get("type"))
    if rtype == "linear":
        return inv / rs["factor"]
    # llama3: keep high frequencies, divide low ones by `factor`, blend in between.
    factor, lo, hi = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
    old_ctx = rs["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv
    smooth = (old_ctx / wavelen - lo) / (hi - lo)
    scaled = jnp.where(wavelen > old_ctx / lo, inv / factor, inv)
    mid = (1 - smooth) * scaled / factor + smooth * scaled
    is_mid = (wavelen <= old_ctx / lo) & (wavelen >= old_ctx / hi)
    return jnp.where(is_mid, mid, scaled)


def apply_rope(x: jax.Array, positions: jax.Array, inv_freq: jax.Array) -> jax.Array:
    """Rotate-half RoPE: ``x * cos + rotate_half(x) * sin`` with ``x: [B, T, N, D]``."""
    freqs = positions[..., None].astype(jnp.float32) * inv_freq  # [B, T, D/2]
    emb = jnp.concatenate([freqs, freqs], axis=-1)[:, :, None, :]
    cos, sin = jnp.cos(emb), jnp.sin(emb)
    x32 = x.astype(jnp.float32)
    half = x.shape[-1] // 2
    rotated = jnp.concatenate([-x32[..., half:], x32[..., :half]], axis=-1)
    return (x32 * cos + rotated * sin).astype(x.dtype)


class RMSNorm(nn.Module):
    """``y = w * x / sqrt(mean(x^2) + eps)``, statistics in float32."""

    eps: float
    dtype: jnp.dtype
    param_dtype: jnp.dtype

    @nn.compact
    def __call__(self, x):
        w = self.param("scale", nn.initializers.ones, (x.shape[-1],), self.param_dtype)
        x32 = x.astype(jnp.float32)
        y = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + self.eps)
        return (w.astype(jnp.float32) * y).astype(self.dtype)


def _dense(features, cfg, name, bias=False):
    return nn.Dense(features, use_bias=bias, dtype=resolve_dtype(cfg.dtype),
                    param_dtype=resolve_dtype(cfg.param_dtype), name=name,
                    kernel_init=nn.initializers.normal(0.02))


QUERY_BLOCK = 2048  # `attend`: dot_product attention over longer sequences runs in query blocks


def attend(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array,
           impl: str = "reference", q_block: int = QUERY_BLOCK) -> jax.Array:
    """Grouped-query attention ``softmax(q k^T / sqrt(D) + mask) v`` -> ``[B, T, H, D]``.

    ``q [B, T, H, D]``, ``k, v [B, S, K, D]`` (query head ``h`` reads kv head ``h // (H/K)``),
    ``mask [B, T, S]`` boolean (True = may attend), or ``[B, T]`` segment ids for the flash
    kernel (`attend_flash`: causal within a segment; the scanned decoder passes these where
    `uses_flash` says so). ``impl``:

    * ``"reference"``: einsums with float32 scores; the ``G = H/K`` heads of a group and the
      ``T`` queries form the rows of one ``[T*G, S]`` score matrix per (batch, kv head), keys
      transposed to ``[B, K, D, S]`` and values to ``[B, K, S, D]`` so that both products and
      their gradients are plain batched matmuls (no transposed copy of the scores);
    * ``"dot_product"``: `jax.nn.dot_product_attention` with JAX's default implementation (XLA's
      attention, scores materialised, on CPU and GPU in this JAX); on TPU the scanned decoder
      takes `attend_flash` instead when the length allows;
    * ``"flash"``: `attend_flash` wherever the length allows (off TPU in Pallas' TPU
      interpreter: slow, for tests), ``"dot_product"`` otherwise.

    ``"dot_product"`` over more than ``q_block`` queries (0: never) runs in query blocks
    (`attend_in_query_blocks`, the largest divisor of ``T`` up to ``q_block``): XLA's attention
    materialises whole score matrices, 40 GB per row and layer for the 24,576-token analyzer
    prompts of the paper's stage-1 SFT.

    A query row whose mask is all False gets a uniform average (reference) or zeros / an
    arbitrary row (dot_product); such rows are padding and are masked downstream.
    """
    if mask.ndim == 2:
        return attend_flash(q, k, v, mask)
    T = q.shape[1]
    if impl in ("dot_product", "flash") and q_block and T > q_block:
        block = max(d for d in range(1, q_block + 1) if T % d == 0)
        if block >= FLASH_BLOCKS[-1]:
            return attend_in_query_blocks(q, k, v, mask, impl, block)
    if impl in ("dot_product", "flash"):
        return jax.nn.dot_product_attention(q, k.astype(q.dtype), v.astype(q.dtype),
                                            mask=mask[:, None, :, :])
    if impl != "reference":
        raise ValueError(f"attention impl must be one of {ATTENTION_IMPLS}, got {impl!r}")
    B, T, H, D = q.shape
    out = _attend_cached(q, k.transpose(0, 2, 3, 1), v.transpose(0, 2, 1, 3), mask, D)
    return out.reshape(B, T, H, D)


FLASH_BLOCKS = (512, 256, 128)  # block lengths of the Pallas TPU flash kernel, largest first


def _platform() -> str:
    """The platform the program is traced for: the activation mesh's devices (a plan traces for
    TPU devices from a CPU host), else JAX's default backend."""
    ctx = _ROWS.get()
    return ctx[0].devices.flat[0].platform if ctx is not None else jax.default_backend()


def uses_flash(impl: str, length: int) -> bool:
    """Whether the scanned (cache-free) decoder attends with `attend_flash`: ``impl`` "flash",
    or "dot_product" traced for TPU, and a sequence ``length`` the kernel's blocks divide."""
    return (impl == "flash" or (impl == "dot_product" and _platform() == "tpu")) and length % FLASH_BLOCKS[-1] == 0


def attend_in_query_blocks(q, k, v, mask, impl: str, block: int) -> jax.Array:
    """`attend` with the queries in blocks of ``block`` positions (one `jax.lax.map` step per
    block, each rematerialised in the backward pass): the same ``[B, T, H, D]`` (each query's
    softmax is over all of ``S`` either way) with one block's scores alive at a time, forward and
    backward. ``block`` divides ``T``; ``block >= T`` (or 0) is one block."""
    B, T, H, D = q.shape
    if not block or block >= T:
        return attend(q, k, v, mask, impl, q_block=0)
    n = T // block
    qs = q.reshape(B, n, block, H, D).swapaxes(0, 1)
    ms = mask.reshape(B, n, block, mask.shape[-1]).swapaxes(0, 1)
    one = jax.checkpoint(lambda qb, mb: attend(qb, k, v, mb, impl, q_block=0))
    out = jax.lax.map(lambda xs: one(*xs), (qs, ms))
    return out.swapaxes(0, 1).reshape(B, T, H, D)


def _interpreted(fn, context):
    """``fn(q, k, v, seg)`` whose forward and backward Pallas kernels are both traced inside
    ``context`` (the backward is traced when differentiated, after ``fn`` has returned)."""

    @jax.custom_vjp
    def run(q, k, v, seg):
        with context():
            return fn(q, k, v, seg)

    def fwd(q, k, v, seg):
        with context():
            out, vjp = jax.vjp(lambda q, k, v: fn(q, k, v, seg), q, k, v)
        return out, vjp

    def bwd(vjp, g):
        with context():
            return (*vjp(g), None)

    run.defvjp(fwd, bwd)
    return run


def attend_flash(q: jax.Array, k: jax.Array, v: jax.Array, segment_ids: jax.Array) -> jax.Array:
    """Causal attention by the Pallas TPU flash kernel (scores never leave VMEM) -> ``[B, T, H, D]``.

    Query ``t`` attends key ``s`` iff ``s <= t`` and ``segment_ids[b, s] == segment_ids[b, t]``;
    with ids 1 on real tokens and 0 on padding a real query sees exactly ``s <= t and
    kv_mask[b, s]`` (`attention_mask` without a cache), and padding queries (masked
    downstream) see padding. ``q [B, T, H, D]``, ``k, v [B, T, K, D]``: the kv heads are repeated
    to the ``H`` query heads. Blocks: the largest of `FLASH_BLOCKS` dividing ``T``. Under
    `activation_sharding` each device runs the kernel on its own rows (``shard_map``: a Pallas
    call has no partitioning rule of its own) and, on a tensor axis dividing both head counts,
    its own share of the heads (query heads ``[j H/t, (j+1) H/t)`` read exactly kv heads
    ``[j K/t, (j+1) K/t)``); otherwise every tensor shard would attend all heads again. Off TPU
    the kernel runs in Pallas' TPU interpreter.
    """
    from jax.experimental.pallas import tpu as pltpu
    from jax.experimental.pallas.ops.tpu import flash_attention as fa

    B, T, H, D = q.shape
    G = H // k.shape[2]
    b = next(n for n in FLASH_BLOCKS if T % n == 0)
    blocks = fa.BlockSizes(block_q=b, block_k_major=b, block_k=b, block_b=1, block_q_major_dkv=b,
                           block_k_major_dkv=b, block_k_dkv=b, block_q_dkv=b, block_k_major_dq=b,
                           block_k_dq=b, block_q_dq=b)

    def kernel(q, k, v, seg):
        heads = lambda x: jnp.repeat(x.astype(q.dtype), G, axis=2).transpose(0, 2, 1, 3)  # noqa: E731
        out = fa.flash_attention(q.transpose(0, 2, 1, 3), heads(k), heads(v), segment_ids=fa.SegmentIds(seg, seg),
                                 causal=True, sm_scale=1.0 / math.sqrt(D), block_sizes=blocks)
        return out.transpose(0, 2, 1, 3)

    local = kernel if _platform() == "tpu" else _interpreted(kernel, pltpu.force_tpu_interpret_mode)

    segment_ids = segment_ids.astype(jnp.int32)
    rows = row_context()
    if rows is None:
        return local(q, k, v, segment_ids)
    mesh, axes = rows
    heads = P(axes, None, tensor_split(H, k.shape[2]))
    return jax.shard_map(local, mesh=mesh, in_specs=(heads, heads, heads, P(axes)), out_specs=heads,
                         check_vma=False)(q, k, v, segment_ids)


def _attend_cached(q, kt, v, mask, head_dim):
    """`attend` ("reference") on a cache stored as ``kt [B, K, D, S]`` (keys transposed) and
    ``v [B, K, S, D]``: per (batch, kv head), ``q k^T`` and ``p v`` are plain matmuls over the
    cache as stored. Returns ``[B, T, H*D]``."""
    B, T, H, D = q.shape
    K = kt.shape[1]
    qg = q.reshape(B, T, K, H // K, D).transpose(0, 2, 1, 3, 4).reshape(B, K, T * (H // K), D)
    scores = jnp.einsum("bkqd,bkds->bkqs", qg, kt.astype(qg.dtype),
                        preferred_element_type=jnp.float32) / math.sqrt(head_dim)
    scores = scores.reshape(B, K, T, H // K, -1)
    scores = jnp.where(mask[:, None, :, None, :], scores, jnp.finfo(jnp.float32).min)
    probs = jax.nn.softmax(scores, axis=-1).astype(v.dtype).reshape(B, K, T * (H // K), -1)
    out = jnp.einsum("bkqs,bksd->bkqd", probs, v)
    return out.reshape(B, K, T, H // K, D).transpose(0, 2, 1, 3, 4).reshape(B, T, H * D)


class Attention(nn.Module):
    cfg: ModelConfig

    @nn.compact
    def __call__(self, x, positions, mask, cache, cache_index):
        """``cache``: None, or this layer's own ``(k [B, K, D, S], v [B, K, S, D])``.

        Only the new tokens' slots are written (one small ``dynamic_update_slice``), so a cache
        carried through the decode loop is updated in place instead of being rebuilt every step.
        """
        cfg = self.cfg
        B, T, _ = x.shape
        H, K, D = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        q = checkpoint_name(_dense(H * D, cfg, "q_proj", cfg.qkv_bias)(x), "query_proj").reshape(B, T, H, D)
        k = checkpoint_name(_dense(K * D, cfg, "k_proj", cfg.qkv_bias)(x), "key_proj").reshape(B, T, K, D)
        v = checkpoint_name(_dense(K * D, cfg, "v_proj", cfg.qkv_bias)(x), "value_proj").reshape(B, T, K, D)
        if cfg.qk_norm:
            norm = dict(eps=cfg.rms_norm_eps, dtype=resolve_dtype(cfg.dtype),
                        param_dtype=resolve_dtype(cfg.param_dtype))
            q = RMSNorm(name="q_norm", **norm)(q)
            k = RMSNorm(name="k_norm", **norm)(k)
        inv_freq = rope_inv_freq(cfg)
        q = apply_rope(q, positions, inv_freq)
        k = apply_rope(k, positions, inv_freq)
        if cache is None:
            out = checkpoint_name(attend(q, k, v, mask, cfg.attention).reshape(B, T, H * D), "attn_out")
        else:
            k, v = k.transpose(0, 2, 3, 1), v.transpose(0, 2, 1, 3)  # [B, K, D, T], [B, K, T, D]
            ck, cv = cache
            zero = jnp.zeros((), jnp.int32)
            ck = jax.lax.dynamic_update_slice(ck, k.astype(ck.dtype), (zero, zero, zero, cache_index))
            cv = jax.lax.dynamic_update_slice(cv, v.astype(cv.dtype), (zero, zero, cache_index, zero))
            cache = (ck, cv)
            out = _attend_cached(q, ck, cv, mask, D)
        out = _dense(cfg.hidden_size, cfg, "o_proj")(out.astype(resolve_dtype(cfg.dtype)))
        return checkpoint_name(out, "out_proj"), cache


class MLP(nn.Module):
    cfg: ModelConfig

    @nn.compact
    def __call__(self, x):
        cfg = self.cfg
        gate = checkpoint_name(_dense(cfg.intermediate_size, cfg, "gate_proj")(x), "mlp_gate")
        up = checkpoint_name(_dense(cfg.intermediate_size, cfg, "up_proj")(x), "mlp_up")
        return checkpoint_name(_dense(cfg.hidden_size, cfg, "down_proj")(nn.silu(gate) * up), "mlp_down")


class Block(nn.Module):
    """One pre-norm decoder layer: ``(x, cache) -> ((x, cache), None)`` (the scan's form)."""

    cfg: ModelConfig

    @nn.compact
    def __call__(self, carry, positions, mask, cache_index):
        cfg = self.cfg
        x, cache = carry
        x = constrain_rows(x)
        norm = dict(eps=cfg.rms_norm_eps, dtype=resolve_dtype(cfg.dtype),
                    param_dtype=resolve_dtype(cfg.param_dtype))
        h, cache = Attention(cfg, name="self_attn")(
            RMSNorm(name="input_layernorm", **norm)(x), positions, mask, cache, cache_index)
        x = constrain_rows(x + h)
        x = constrain_rows(x + MLP(cfg, name="mlp")(RMSNorm(name="post_attention_layernorm", **norm)(x)))
        return (x, cache), None


def attention_mask(kv_mask: jax.Array, q_len: int, cache_index) -> jax.Array:
    """``[B, T, S]`` boolean: query t may see slot s iff kv_mask[b, s] and s <= cache_index + t."""
    S = kv_mask.shape[1]
    q_pos = cache_index + jnp.arange(q_len)[:, None]
    causal = jnp.arange(S)[None, :] <= q_pos
    return causal[None] & kv_mask[:, None, :].astype(bool)


class Decoder(nn.Module):
    """Token ids -> final normed hidden states ``[B, T, hidden]`` (and the updated cache).

    Scanned layers (parameters ``layers`` ``[L, ...]``) take no cache. ``unrolled=True`` runs
    the layers as a Python loop over separate parameter trees ``layers_0 .. layers_{L-1}`` (see
    `unstack_layers`) and takes an optional cache, one `KVCache` per layer (``[B, K, D, S]``
    keys, ``[B, K, S, D]`` values). The maths is the same; the unrolled form is for generation.
    """

    cfg: ModelConfig
    unrolled: bool = False

    @nn.compact
    def __call__(self, tokens, positions, kv_mask, cache=None, cache_index=0):
        cfg = self.cfg
        dtype, pdtype = resolve_dtype(cfg.dtype), resolve_dtype(cfg.param_dtype)
        embed = nn.Embed(cfg.vocab_size, cfg.hidden_size, dtype=dtype, param_dtype=pdtype,
                         embedding_init=nn.initializers.normal(0.02), name="embed_tokens")
        x = constrain_rows(embed(tokens))
        if cache is None and uses_flash(cfg.attention, tokens.shape[1]):
            mask = kv_mask.astype(jnp.int32)  # segment ids: the flash kernel masks causally itself
        else:
            mask = attention_mask(kv_mask, tokens.shape[1], cache_index)
        cache_index = jnp.asarray(cache_index, jnp.int32)
        block = Block
        use_remat, policy = remat_policy(cfg.remat)
        if use_remat:
            block = nn.remat(Block, prevent_cse=False, policy=policy)
        if self.unrolled:
            new_cache = []
            for i in range(cfg.num_layers):
                layer_cache = None if cache is None else (cache[i].k, cache[i].v)
                (x, layer_cache), _ = block(cfg, name=f"layers_{i}")(
                    (x, layer_cache), positions, mask, cache_index)
                new_cache.append(None if cache is None else KVCache(*layer_cache))
            new_cache = None if cache is None else tuple(new_cache)
        else:
            if cache is not None:
                raise ValueError("the scanned decoder takes no cache; decode with forward_cached_unrolled")
            layers = nn.scan(
                block,
                variable_axes={"params": 0},
                split_rngs={"params": True},
                in_axes=(nn.broadcast, nn.broadcast, nn.broadcast),
                length=cfg.num_layers,
            )(cfg, name="layers")
            (x, new_cache), _ = layers((x, None), positions, mask, cache_index)
        x = constrain_rows(RMSNorm(cfg.rms_norm_eps, dtype, pdtype, name="norm")(x))
        if not cfg.tie_word_embeddings:
            # Declare the untied head here so that init creates it; applied by `logits_from_hidden`.
            self.param("lm_head", nn.initializers.normal(0.02), (cfg.hidden_size, cfg.vocab_size), pdtype)
        return x, new_cache


def unstack_layers(params: dict, cfg: ModelConfig, take_layer=None) -> dict:
    """The parameter tree of ``Decoder(unrolled=True)``: ``layers`` ``[L, ...]`` -> ``layers_{i}``.

    ``take_layer(stacked, i)`` makes layer ``i``'s array (default ``stacked[i]``, a copy). With
    tied embeddings the tree also holds ``lm_head``, the embedding transposed into its own
    ``[hidden, vocab]`` array, which `lm_head_matrix` then uses: a plain matmul instead of one
    contracting the embedding's minor axis.
    """
    take_layer = take_layer or (lambda a, i: a[i])
    out = {k: v for k, v in params.items() if k != "layers"}
    for i in range(cfg.num_layers):
        out[f"layers_{i}"] = jax.tree.map(lambda a, i=i: take_layer(a, i), params["layers"])
    if cfg.tie_word_embeddings:
        out["lm_head"] = params["embed_tokens"]["embedding"].T
    return out


def cast_to_compute(params, cfg: ModelConfig):
    """The parameter tree with its floating matrices in the compute dtype ``cfg.dtype``.

    Applied to the (sharded) master weights before use, so that each layer's all-gather moves
    compute-dtype bytes (half of float32 for bfloat16); gradients flow back through the cast
    to the master dtype. Vectors (norm scales, biases: per layer ``[L, n]``) keep the master
    dtype: they are tiny, the layers cast them where they are used, and their gradients stay
    full precision. Identity when the dtypes agree.
    """
    dtype = resolve_dtype(cfg.dtype)

    def cast(path, p):
        matrix = getattr(path[-1], "key", None) in MATRIX_PARAMS
        return p.astype(dtype) if matrix and jnp.issubdtype(p.dtype, jnp.floating) else p

    return jax.tree_util.tree_map_with_path(cast, params)


# Leaf names of the weight matrices (`cast_to_compute` casts these).
MATRIX_PARAMS = frozenset({"kernel", "embedding", "lm_head"})


def lm_head_matrix(params: dict, cfg: ModelConfig) -> jax.Array:
    """``[hidden, vocab]`` output projection: ``lm_head`` when the tree has one, else (tied
    embeddings) the transposed embedding."""
    if "lm_head" in params or not cfg.tie_word_embeddings:
        return params["lm_head"]
    return params["embed_tokens"]["embedding"].T


def logits_from_hidden(params: dict, cfg: ModelConfig, hidden: jax.Array) -> jax.Array:
    """``logits = hidden @ W_out``, accumulated in float32.

    Under `activation_sharding` the head is gathered whole (in the compute dtype) and the
    logits keep the hidden states' row split: no partial logits are all-reduced."""
    w = gather_weight(lm_head_matrix(params, cfg).astype(resolve_dtype(cfg.dtype)))
    return constrain_rows(project_logits(constrain_rows(hidden), w))


def project_logits(hidden: jax.Array, w: jax.Array, vocab_major: bool = False) -> jax.Array:
    """``hidden [B, T, H] @ w [H, V]`` (``vocab_major``: ``w [V, H]``, the tied embedding as
    stored, contracted without a transposed copy) in ``w``'s dtype, accumulated in float32."""
    spec = "bth,vh->btv" if vocab_major else "bth,hv->btv"
    return jnp.einsum(spec, hidden.astype(w.dtype), w, preferred_element_type=jnp.float32)


def head_matrix(params: dict, cfg: ModelConfig) -> tuple[jax.Array, bool]:
    """``(w, vocab_major)``: the output projection as stored (`project_logits`), in the compute
    dtype: ``lm_head [H, V]``, or the tied embedding ``[V, H]`` (``vocab_major=True``)."""
    dtype = resolve_dtype(cfg.dtype)
    if "lm_head" in params or not cfg.tie_word_embeddings:
        return params["lm_head"].astype(dtype), False
    return params["embed_tokens"]["embedding"].astype(dtype), True


def positions_from_mask(attention_mask: jax.Array) -> jax.Array:
    """Left- or right-padded masks -> positions ``cumsum(mask) - 1`` (0 on left padding)."""
    return jnp.maximum(jnp.cumsum(attention_mask.astype(jnp.int32), axis=-1) - 1, 0)


def hidden_states(params, cfg: ModelConfig, tokens, attention_mask, positions=None):
    """Final hidden states of a full (uncached) forward pass."""
    if positions is None:
        positions = positions_from_mask(attention_mask)
    h, _ = Decoder(cfg).apply({"params": params}, tokens, positions, attention_mask)
    return h


def forward(params, cfg: ModelConfig, tokens, attention_mask, positions=None) -> jax.Array:
    """Full forward pass -> float32 logits ``[B, T, V]``."""
    return logits_from_hidden(params, cfg, hidden_states(params, cfg, tokens, attention_mask, positions))


def forward_cached_unrolled(uparams, cfg: ModelConfig, tokens, positions, kv_mask,
                            cache: Sequence[KVCache], cache_index, last_only: bool = False):
    """Cached forward on `unstack_layers` parameters and a per-layer cache (`KVCache.split`):
    writes the new keys/values at ``cache_index``; returns (logits, cache).

    ``last_only`` returns the logits of the last position only (``[B, 1, V]``).
    """
    h, cache = Decoder(cfg, unrolled=True).apply({"params": uparams}, tokens, positions, kv_mask,
                                                 tuple(cache), cache_index)
    return logits_from_hidden(uparams, cfg, h[:, -1:] if last_only else h), cache


def init_params(cfg: ModelConfig, rng: jax.Array) -> dict:
    """Random parameters (normal(0.02) kernels, unit norms) for a config."""
    tokens = jnp.zeros((1, 2), jnp.int32)
    return Decoder(cfg).init(rng, tokens, jnp.zeros((1, 2), jnp.int32), jnp.ones((1, 2), jnp.int32))["params"]
