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

import math
from collections.abc import Sequence
from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp

from seed_jax.models.config import ModelConfig, resolve_dtype


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


def _attend(q, kt, v, mask, head_dim):
    """Grouped-query attention, ``softmax(q k^T / sqrt(D) + mask) v`` with float32 scores.

    ``q [B, T, H, D]``; ``kt [B, K, D, S]`` (keys transposed), ``v [B, K, S, D]`` (query head
    ``h`` reads kv head ``h // (H/K)``); ``mask [B, T, S]``. The ``G = H/K`` heads of a group
    and the ``T`` queries form the rows of one ``[T*G, S]`` matrix per (batch, kv head), so
    both products are plain batched matmuls over the cache as stored. Returns ``[B, T, H*D]``.
    """
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
        q = _dense(H * D, cfg, "q_proj", cfg.qkv_bias)(x).reshape(B, T, H, D)
        k = _dense(K * D, cfg, "k_proj", cfg.qkv_bias)(x).reshape(B, T, K, D)
        v = _dense(K * D, cfg, "v_proj", cfg.qkv_bias)(x).reshape(B, T, K, D)
        if cfg.qk_norm:
            norm = dict(eps=cfg.rms_norm_eps, dtype=resolve_dtype(cfg.dtype),
                        param_dtype=resolve_dtype(cfg.param_dtype))
            q = RMSNorm(name="q_norm", **norm)(q)
            k = RMSNorm(name="k_norm", **norm)(k)
        inv_freq = rope_inv_freq(cfg)
        q = apply_rope(q, positions, inv_freq)
        k = apply_rope(k, positions, inv_freq)
        k, v = k.transpose(0, 2, 3, 1), v.transpose(0, 2, 1, 3)  # [B, K, D, T], [B, K, T, D]
        if cache is not None:
            ck, cv = cache
            zero = jnp.zeros((), jnp.int32)
            ck = jax.lax.dynamic_update_slice(ck, k.astype(ck.dtype), (zero, zero, zero, cache_index))
            cv = jax.lax.dynamic_update_slice(cv, v.astype(cv.dtype), (zero, zero, cache_index, zero))
            cache, k, v = (ck, cv), ck, cv
        out = _attend(q, k, v, mask, D)
        return _dense(cfg.hidden_size, cfg, "o_proj")(out.astype(resolve_dtype(cfg.dtype))), cache


class MLP(nn.Module):
    cfg: ModelConfig

    @nn.compact
    def __call__(self, x):
        cfg = self.cfg
        gate = _dense(cfg.intermediate_size, cfg, "gate_proj")(x)
        up = _dense(cfg.intermediate_size, cfg, "up_proj")(x)
        return _dense(cfg.hidden_size, cfg, "down_proj")(nn.silu(gate) * up)


class Block(nn.Module):
    """One pre-norm decoder layer: ``(x, cache) -> ((x, cache), None)`` (the scan's form)."""

    cfg: ModelConfig

    @nn.compact
    def __call__(self, carry, positions, mask, cache_index):
        cfg = self.cfg
        x, cache = carry
        norm = dict(eps=cfg.rms_norm_eps, dtype=resolve_dtype(cfg.dtype),
                    param_dtype=resolve_dtype(cfg.param_dtype))
        h, cache = Attention(cfg, name="self_attn")(
            RMSNorm(name="input_layernorm", **norm)(x), positions, mask, cache, cache_index)
        x = x + h
        x = x + MLP(cfg, name="mlp")(RMSNorm(name="post_attention_layernorm", **norm)(x))
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
        x = embed(tokens)
        mask = attention_mask(kv_mask, tokens.shape[1], cache_index)
        cache_index = jnp.asarray(cache_index, jnp.int32)
        block = Block
        if cfg.remat:
            block = nn.remat(Block, prevent_cse=False,
                             policy=jax.checkpoint_policies.nothing_saveable)
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
        x = RMSNorm(cfg.rms_norm_eps, dtype, pdtype, name="norm")(x)
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


def lm_head_matrix(params: dict, cfg: ModelConfig) -> jax.Array:
    """``[hidden, vocab]`` output projection: ``lm_head`` when the tree has one, else (tied
    embeddings) the transposed embedding."""
    if "lm_head" in params or not cfg.tie_word_embeddings:
        return params["lm_head"]
    return params["embed_tokens"]["embedding"].T


def logits_from_hidden(params: dict, cfg: ModelConfig, hidden: jax.Array) -> jax.Array:
    """``logits = hidden @ W_out``, accumulated in float32."""
    w = lm_head_matrix(params, cfg).astype(resolve_dtype(cfg.dtype))
    return jnp.einsum("bth,hv->btv", hidden.astype(w.dtype), w, preferred_element_type=jnp.float32)


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
