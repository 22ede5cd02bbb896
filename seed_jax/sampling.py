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
temperature. Randomness is ``fold_in(PRNGKey(seed), step)``: a given seed reproduces.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from envs.actions import find_stop
from seed_jax.buckets import BUCKETS, round_up, row_bucket
from seed_jax.models import decoder
from seed_jax.models.config import ModelConfig
from seed_jax.models.decoder import KVCache


@dataclasses.dataclass(frozen=True)
class SamplingParams:
    """Static decode settings (hashable: part of the compiled program's key).

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


class DecodeState(NamedTuple):
    tokens: jax.Array  # [B, N] generated ids (pad after finish)
    logprobs: jax.Array  # [B, N]
    done: jax.Array  # [B] bool
    length: jax.Array  # [B] number of generated tokens
    step: jax.Array  # scalar: tokens generated so far (all rows)
    cache: tuple[KVCache, ...]  # one per layer
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


def sample_token(logits: jax.Array, rng: jax.Array, sp: SamplingParams) -> tuple[jax.Array, jax.Array]:
    """(token [B], log-prob [B]) for one decode step; see the module docstring."""
    if sp.temperature == 0:
        return _greedy(logits)
    z = logits / sp.temperature
    logp = jax.nn.log_softmax(z)
    filt = z
    if sp.top_k:
        kth = jax.lax.top_k(z, sp.top_k)[0][:, -1:]
        filt = jnp.where(z < kth, -jnp.inf, filt)
    if sp.top_p < 1.0:
        sorted_z = jnp.sort(filt, axis=-1)[:, ::-1]
        probs = jax.nn.softmax(sorted_z, axis=-1)
        mass_before = jnp.cumsum(probs, axis=-1) - probs
        cutoff_idx = jnp.sum(mass_before < sp.top_p, axis=-1) - 1
        cutoff = jnp.take_along_axis(sorted_z, cutoff_idx[:, None], -1)
        filt = jnp.where(filt < cutoff, -jnp.inf, filt)
    tok = jax.random.categorical(rng, filt, axis=-1)
    return tok, jnp.take_along_axis(logp, tok[:, None], -1)[:, 0]


@functools.partial(jax.jit, static_argnums=(1, 4))
def _prefill(uparams, cfg: ModelConfig, tokens, mask, sp: SamplingParams, rng, eos_ids, row_live):
    B, P = tokens.shape
    N = sp.max_new_tokens
    positions = decoder.positions_from_mask(mask)
    cache = KVCache.zeros(cfg, B, P + N).split()
    kv_mask = jnp.concatenate([mask, jnp.zeros((B, N), mask.dtype)], axis=1)
    logits, cache = decoder.forward_cached_unrolled(uparams, cfg, tokens, positions, kv_mask, cache,
                                                    0, last_only=True)
    tok, lp = sample_token(logits[:, -1], jax.random.fold_in(rng, 0), sp)
    done = jnp.isin(tok, eos_ids) | ~row_live
    out = jnp.zeros((B, N), jnp.int32).at[:, 0].set(tok)
    lps = jnp.zeros((B, N), jnp.float32).at[:, 0].set(lp)
    return DecodeState(out, lps, done, jnp.where(row_live, 1, 0), jnp.array(1, jnp.int32),
                       cache, kv_mask, positions[:, -1] + 1)


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
    return decoder.unstack_layers(host, cfg, take_layer=lambda a, i: jax.device_put(a[i]))


@functools.partial(jax.jit, static_argnums=(1, 3), donate_argnums=(2,))
def _decode_chunk(uparams, cfg: ModelConfig, state: DecodeState, sp: SamplingParams, prompt_len,
                  rng, eos_ids, pad_id):
    end = jnp.minimum(state.step + sp.chunk, sp.max_new_tokens)

    def cond(s: DecodeState):
        return (s.step < end) & ~jnp.all(s.done)

    def body(s: DecodeState):
        prev = jax.lax.dynamic_index_in_dim(s.tokens, s.step - 1, axis=1, keepdims=True)  # [B, 1]
        slot = prompt_len + s.step - 1
        kv_mask = jax.lax.dynamic_update_slice_in_dim(
            s.kv_mask, jnp.ones((s.kv_mask.shape[0], 1), s.kv_mask.dtype), slot, axis=1)
        logits, cache = decoder.forward_cached_unrolled(uparams, cfg, prev, s.next_pos[:, None],
                                                        kv_mask, s.cache, slot)
        tok, lp = sample_token(logits[:, -1], jax.random.fold_in(rng, s.step), sp)
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


def generate(model, tokenizer, prompts, *, max_new_tokens: int = 128, temperature: float = 1.0,
             top_p: float = 1.0, top_k: int = 0, seed: int = 0, stop_strings: Sequence[str] = (),
             prompt_buckets: Sequence[int] = BUCKETS, chunk: int = 32,
             params=None, ignore_eos: bool = False,
             think_tags: tuple[str, str] | None = None) -> GenerationResult:
    """Generate continuations for a batch of prompts.

    ``model`` is a `seed_jax.models.Model` (``params`` overrides its parameters, e.g. the
    trainer's current ones). ``prompts`` are strings (already chat-templated; tokenized without
    extra special tokens) or lists of token ids. Returns the new token ids (EOS included when
    produced, nothing after a stop string's last token), their text (special tokens skipped,
    cut right after the stop string) and the sampled tokens' log-probs. ``think_tags`` (opening,
    closing; e.g. `envs.actions.THINK_TAGS`): stop strings inside thinking do not count (None:
    they count anywhere). ``ignore_eos`` runs all ``max_new_tokens`` steps (for benchmarks).
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
    P = round_up(max(len(x) for x in ids), prompt_buckets)
    B = row_bucket(n)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    tokens = np.full((B, P), pad_id, np.int32)
    mask = np.zeros((B, P), np.int32)
    for i, x in enumerate(ids):
        tokens[i, P - len(x):] = x
        mask[i, P - len(x):] = 1
    mask[n:, -1] = 1  # filler rows: one dummy token so their attention is well defined
    row_live = np.arange(B) < n
    eos = sorted(set(cfg.eos_token_ids) | ({tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()))
    if ignore_eos:  # benchmarks: always run max_new_tokens steps
        eos = []
    eos_ids = jnp.asarray(eos or [-1], jnp.int32)
    rng = jax.random.PRNGKey(seed)
    uparams = _decode_params(params, cfg)
    state = _prefill(uparams, cfg, jnp.asarray(tokens), jnp.asarray(mask), sp, rng, eos_ids,
                     jnp.asarray(row_live))
    stop_at: dict[int, int] = {}
    checked = [0] * n
    while True:
        done, step, toks = jax.device_get((state.done, state.step, state.tokens))
        lengths = np.asarray(jax.device_get(state.length))
        if stop_strings:
            newly = False
            for i in range(n):
                if i in stop_at:
                    continue
                k = _find_stop(tokenizer, toks[i, :lengths[i]].tolist(), stop_strings, checked[i], think_tags)
                checked[i] = int(lengths[i])
                if k is not None:
                    stop_at[i] = k
                    newly = True
            if newly:
                mark = np.array([i in stop_at for i in range(B)])
                state = state._replace(done=state.done | jnp.asarray(mark))
                done = done | mark
        if int(step) >= max_new_tokens or bool(np.all(done)):
            break
        state = _decode_chunk(uparams, cfg, state, sp, P, rng, eos_ids, jnp.int32(pad_id))
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
