"""Response log-probs / entropies vs a numpy reference built from full decoder logits.

The gradient through the chunked LM head is checked in test_train_step (micro-batched +
chunked step == full-batch unchunked step).
"""

import jax
import numpy as np
import pytest

from seed_jax.models import decoder
from seed_jax.train.logprobs import compute_logprobs, response_logprobs
from seed_jax.train.synthetic import random_params, synthetic_seed_batch, tiny_config

CFG = tiny_config()
B, P, R = 5, 7, 10


@pytest.fixture(scope="module")
def setup():
    params = random_params(CFG, 1)
    batch = synthetic_seed_batch(3, B, P, R, P, CFG.vocab_size)
    ids, mask = batch.student_ids, batch.student_mask
    # Reference: full [B, T, V] logits, numpy log-softmax, per-row / per-token loops.
    logits = np.asarray(jax.jit(decoder.forward, static_argnums=1)(params, CFG, ids, mask), np.float64)
    ref_logp = np.zeros((B, R))
    ref_ent = np.zeros((B, R))
    for b in range(B):
        for j in range(R):
            z = logits[b, P - 1 + j]
            z = z - z.max()
            logq = z - np.log(np.exp(z).sum())
            ref_logp[b, j] = logq[ids[b, P + j]]
            ref_ent[b, j] = -(np.exp(logq) * logq).sum()
    return params, ids, mask, batch.response_mask, ref_logp, ref_ent


@pytest.mark.parametrize("chunk", [None, 3])
def test_response_logprobs_match_full_logits(setup, chunk):
    params, ids, mask, rmask, ref_logp, ref_ent = setup
    fn = jax.jit(lambda p, i, m: response_logprobs(p, CFG, i, m, P, R, chunk=chunk))
    logp, ent = fn(params, ids, mask)
    valid = rmask > 0
    np.testing.assert_allclose(np.asarray(logp)[valid], ref_logp[valid], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(ent)[valid], ref_ent[valid], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("temperature", [0.5, 1.7])
def test_tempered_logprobs_match_numpy(setup, temperature):
    """log softmax(z / T) and its entropy, against the reference built from the full logits."""
    params, ids, mask, rmask, *_ = setup
    logits = np.asarray(jax.jit(decoder.forward, static_argnums=1)(params, CFG, ids, mask), np.float64)
    z = logits[:, P - 1:P - 1 + R] / temperature
    z = z - z.max(-1, keepdims=True)
    logq = z - np.log(np.exp(z).sum(-1, keepdims=True))
    ref = np.take_along_axis(logq, ids[:, P:P + R, None], -1)[..., 0]
    ref_ent = -(np.exp(logq) * logq).sum(-1)
    logp, ent = jax.jit(lambda p, i, m: response_logprobs(p, CFG, i, m, P, R, chunk=3, temperature=temperature))(
        params, ids, mask)
    valid = rmask > 0
    np.testing.assert_allclose(np.asarray(logp)[valid], ref[valid], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(ent)[valid], ref_ent[valid], rtol=1e-5, atol=1e-5)
    host = compute_logprobs(params, CFG, ids, mask, P, R, micro_batch=2, temperature=temperature)
    np.testing.assert_allclose(host[valid], ref[valid], rtol=1e-5, atol=1e-5)
    plain = compute_logprobs(params, CFG, ids, mask, P, R, micro_batch=2)
    assert np.abs(host - plain)[valid].max() > 1e-2  # the temperature reaches the pass


def test_compute_logprobs_micro_batched(setup):
    params, ids, mask, rmask, ref_logp, _ = setup
    out = compute_logprobs(params, CFG, ids, mask, P, R, micro_batch=2, chunk=4)
    assert out.shape == (B, R) and out.dtype == np.float32
    valid = rmask > 0
    np.testing.assert_allclose(out[valid], ref_logp[valid], rtol=1e-5, atol=1e-5)


def test_bad_layout_is_rejected(setup):
    params, ids, mask, *_ = setup
    with pytest.raises(ValueError, match="prompt_len"):
        response_logprobs(params, CFG, ids, mask, P + 1, R)


def test_scoring_params_share_buffers_only_when_nothing_changes():
    """The frozen reference costs no second copy when the policy's params already are what the
    scoring pass reads (same dtype, no mesh); a cast to another compute dtype is a new tree."""
    from seed_jax.train.logprobs import scoring_params
    from seed_jax.train.mesh import make_mesh

    params = random_params(CFG, 0)
    same = scoring_params(params, CFG)
    assert all(a is b for a, b in zip(jax.tree.leaves(same), jax.tree.leaves(params)))
    same_on_mesh = scoring_params(params, CFG, make_mesh(data=1, fsdp=1))
    assert all(a is b for a, b in zip(jax.tree.leaves(same_on_mesh), jax.tree.leaves(params)))
    cast = scoring_params(params, CFG.replace(dtype="bfloat16"))
    kernels = [(a, b) for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(cast), jax.tree.leaves(params))
               if getattr(path[-1], "key", None) in decoder.MATRIX_PARAMS]
    assert kernels and all(a.dtype == jax.numpy.bfloat16 and a is not b for a, b in kernels)
    np.testing.assert_allclose(np.asarray(kernels[0][0], np.float32), np.asarray(kernels[0][1]), rtol=1e-2)
