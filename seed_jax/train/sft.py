"""Stage-1 SFT step: answer-token-masked NLL on (analyzer prompt -> JSON skill) pairs.

Same layout as the RL batch (prompt LEFT-padded to ``P``, answer RIGHT-padded to ``R``) and
the same state, sharding, optimizer and checkpoints. With ``a`` the answer tokens and
``m = loss_mask [B, R]`` (1 on answer tokens that count), over the whole batch::

    L_sft = - sum_{b,j} m[b,j] * log pi(a[b,j] | prompt_b, a[b,<j]) / sum_{b,j} m[b,j]

a token mean that stays exact under micro-batching (sums divided by the global count).

Batch: a `seed_jax.train.batch.SftBatch` (``input_ids``, ``attention_mask`` ``[B, P+R]`` int32;
``loss_mask`` ``[B, R]``).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from seed_jax import losses
from seed_jax.models.config import ModelConfig
from seed_jax.train.batch import SftBatch
from seed_jax.train.config import TrainConfig
from seed_jax.train.logprobs import response_logprobs
from seed_jax.train.update import build_step


def sft_token_count(batch: SftBatch) -> jax.Array:
    return jnp.sum((batch.loss_mask != 0).astype(jnp.float32))


def sft_micro_loss(params, mb: SftBatch, n_tokens, model_cfg: ModelConfig, train_cfg: TrainConfig):
    """``(sum(-m * logp) / N, {'nll': TokenSum})`` for one micro-batch."""
    R = mb.loss_mask.shape[1]
    P = mb.input_ids.shape[1] - R
    logp, _ = response_logprobs(params, model_cfg, mb.input_ids, mb.attention_mask, P, R,
                                train_cfg.logits_chunk, with_entropy=False)
    nll = losses.masked_sum(-logp, mb.loss_mask)
    return nll.total / jnp.maximum(n_tokens, 1.0), {"nll": nll}


@functools.lru_cache(maxsize=16)
def make_sft_step(model_cfg: ModelConfig, train_cfg: TrainConfig, mesh):
    """``sft_step(state, batch) -> (state, metrics)``; jitted, sharded, state donated.

    Cached on its (hashable) arguments, so equal configs share one compiled program.

    Metrics: ``nll`` (TokenSum), ``loss`` (= the token-mean NLL), ``grad_norm``, ``lr``,
    ``skipped``, ``tokens``. Only lr / schedule / optimizer / micro-batch / dtype fields of
    ``train_cfg`` matter here.
    """
    cfg = train_cfg.apply_to(model_cfg)
    return build_step(
        micro_loss=lambda p, mb, n: sft_micro_loss(p, mb, n, cfg, train_cfg),
        token_count=sft_token_count,
        model_cfg=model_cfg, train_cfg=train_cfg, mesh=mesh)
