"""Random configs and batches in the train-step layout (for tests and benchmarks only).

`synthetic_seed_batch` builds rows as the batch builder would: a prompt of random length
left-padded to ``P``, a response of random length right-padded to ``R``, and a teacher twin
whose prompt is the student prompt with extra "skill" tokens inserted, left-padded to ``Pt``,
followed by the same response tokens.
"""

from __future__ import annotations

import jax
import numpy as np

from seed_jax.models.config import ModelConfig
from seed_jax.models.decoder import init_params
from seed_jax.train.batch import SeedBatch, SftBatch


def tiny_config(**kw) -> ModelConfig:
    """2 layers, hidden 32, vocab 64, float32 (the unit-test model)."""
    base = dict(model_type="llama", vocab_size=64, hidden_size=32, intermediate_size=64,
                num_layers=2, num_heads=4, num_kv_heads=2, head_dim=8, rms_norm_eps=1e-6,
                max_position_embeddings=512)
    base.update(kw)
    return ModelConfig(**base)


def smollm2_135m_config(**kw) -> ModelConfig:
    """SmolLM2-135M shapes (30 layers, hidden 576, 9/3 heads, inter 1536, vocab 49152, tied)."""
    base = dict(model_type="llama", vocab_size=49152, hidden_size=576, intermediate_size=1536,
                num_layers=30, num_heads=9, num_kv_heads=3, head_dim=64, rope_theta=100000.0,
                rms_norm_eps=1e-5, tie_word_embeddings=True, max_position_embeddings=8192)
    base.update(kw)
    return ModelConfig(**base)


def synthetic_seed_batch(seed: int, B: int, P: int, R: int, Pt: int, vocab: int,
                         full: bool = False) -> dict:
    """A random `SeedBatch` of numpy arrays with every optional field (teacher_logp too).

    ``full=True``: every prompt/response has its maximal length (no padding), for flop counts.
    """
    if Pt < P:
        raise ValueError(f"teacher prompt length Pt={Pt} must be >= P={P}")
    rng = np.random.default_rng(seed)
    sid = np.zeros((B, P + R), np.int32)
    smask = np.zeros((B, P + R), np.int32)
    tid = np.zeros((B, Pt + R), np.int32)
    tmask = np.zeros((B, Pt + R), np.int32)
    rmask = np.zeros((B, R), np.float32)
    for b in range(B):
        lp = P if full else int(rng.integers(1, P + 1))
        lr = R if full else int(rng.integers(1, R + 1))
        ls = (Pt - P) if full else int(rng.integers(0, Pt - lp + 1))
        prompt = rng.integers(1, vocab, lp)
        resp = rng.integers(1, vocab, lr)
        skill = rng.integers(1, vocab, ls)
        cut = int(rng.integers(0, lp + 1))
        tprompt = np.concatenate([prompt[:cut], skill, prompt[cut:]])
        sid[b, P - lp:P], smask[b, P - lp:P] = prompt, 1
        sid[b, P:P + lr], smask[b, P:P + lr] = resp, 1
        tid[b, Pt - len(tprompt):Pt], tmask[b, Pt - len(tprompt):Pt] = tprompt, 1
        tid[b, Pt:Pt + lr], tmask[b, Pt:Pt + lr] = resp, 1
        rmask[b, :lr] = 1
    adv = rng.normal(0, 1, (B,)).astype(np.float32)
    base = -rng.exponential(4.0, (B, R)).astype(np.float32)
    return SeedBatch(
        student_ids=sid, student_mask=smask, teacher_ids=tid, teacher_mask=tmask,
        response_mask=rmask,
        has_skill=(rng.random(B) < 0.7).astype(np.float32),
        advantages=(adv[:, None] * rmask).astype(np.float32),
        old_logp=(base + rng.normal(0, 0.3, (B, R))).astype(np.float32) * rmask,
        ref_logp=(base + rng.normal(0, 0.3, (B, R))).astype(np.float32) * rmask,
        teacher_logp=(base + rng.normal(0, 1.0, (B, R))).astype(np.float32) * rmask,
    )


def synthetic_sft_batch(seed: int, B: int, P: int, R: int, vocab: int) -> SftBatch:
    """A random `SftBatch`: ``input_ids``, ``attention_mask`` ``[B, P+R]``, ``loss_mask [B, R]``."""
    s = synthetic_seed_batch(seed, B, P, R, P, vocab)
    return SftBatch(input_ids=s.student_ids, attention_mask=s.student_mask, loss_mask=s.response_mask)


def random_params(cfg: ModelConfig, seed: int = 0) -> dict:
    """`decoder.init_params` under jit (un-jitted Flax init runs op by op and is slow)."""
    return jax.jit(init_params, static_argnums=0)(cfg, jax.random.PRNGKey(seed))
