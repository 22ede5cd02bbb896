"""Decoder parity with transformers' PyTorch models, HF round trip, and loader errors."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from seed_jax.models import ModelConfig, UnsupportedModelError, WeightLoadError, load_model, save_model
from tests.conftest import TINY_KINDS, tiny_hf_model


def _padded_batch(seed=0, vocab=128, lengths=(11, 7, 3)):
    g = np.random.default_rng(seed)
    T = max(lengths)
    ids = g.integers(3, vocab, size=(len(lengths), T))
    mask = np.zeros_like(ids)
    for i, n in enumerate(lengths):
        mask[i, T - n:] = 1  # left padding
        ids[i, :T - n] = 2
    return ids, mask


def _torch_logits(model, ids, mask):
    pos = np.maximum(mask.cumsum(-1) - 1, 0)
    with torch.no_grad():
        return model(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask),
                     position_ids=torch.tensor(pos)).logits.numpy()


@pytest.mark.parametrize("kind", TINY_KINDS)
def test_logits_match_transformers_padded_batch(kind, tiny_model_dirs):
    hf, d = tiny_model_dirs[kind]
    model = load_model(d, dtype="float32")
    ids, mask = _padded_batch()
    ref = _torch_logits(hf, ids, mask)
    out = np.asarray(model(ids, mask))
    assert out.shape == ref.shape and out.dtype == np.float32
    real = mask.astype(bool)
    assert np.abs(out - ref)[real].max() <= 1e-4


@pytest.mark.parametrize("impl, lengths", [("dot_product", (11, 7, 3)), ("flash", (128, 90, 33))])
@pytest.mark.parametrize("kind", TINY_KINDS)
def test_fused_attention_logits_match_transformers_and_reference(kind, impl, lengths, tiny_model_dirs):
    """``jax.nn.dot_product_attention``, and the Pallas TPU flash kernel (run by Pallas' TPU
    interpreter here) on a left-padded batch whose length its 128-token blocks divide."""
    from seed_jax.models.decoder import forward, uses_flash

    hf, d = tiny_model_dirs[kind]
    model = load_model(d, dtype="float32")
    ids, mask = _padded_batch(seed=4, lengths=lengths)
    assert uses_flash(impl, ids.shape[1]) == (impl == "flash")  # dot_product off TPU: XLA's attention
    ref = _torch_logits(hf, ids, mask)
    out = np.asarray(forward(model.params, model.config.replace(attention=impl), ids, mask))
    own = np.asarray(forward(model.params, model.config.replace(attention="reference"), ids, mask))
    real = mask.astype(bool)
    assert np.abs(out - ref)[real].max() <= 1e-4
    assert np.abs(out - own)[real].max() <= 1e-5


def test_flash_kernel_takes_only_lengths_its_blocks_divide():
    from seed_jax.models.decoder import uses_flash

    assert uses_flash("flash", 128) and uses_flash("flash", 384) and not uses_flash("flash", 120)
    assert not uses_flash("reference", 128)


def test_flash_attention_gradients_match_reference(tiny_model_dirs):
    """The kernel's backward pass (dq, dk, dv kernels) against the einsum reference's autodiff."""
    import jax
    import jax.numpy as jnp

    from seed_jax.models.decoder import forward

    _, d = tiny_model_dirs["qwen2"]
    model = load_model(d, dtype="float32")
    ids, mask = _padded_batch(seed=6, lengths=(128, 70))
    real = jnp.asarray(mask, jnp.float32)[..., None]

    def loss(params, impl):
        logits = forward(params, model.config.replace(attention=impl), ids, mask)
        return (jax.nn.log_softmax(logits)[..., 5] * real[..., 0]).sum()

    g_flash = jax.grad(loss)(model.params, "flash")
    g_ref = jax.grad(loss)(model.params, "reference")
    diffs = jax.tree.leaves(jax.tree.map(lambda a, b: float(jnp.abs(a - b).max() / (jnp.abs(b).max() + 1e-6)),
                                         g_flash, g_ref))
    assert max(diffs) <= 1e-4, max(diffs)
    q = g_ref["layers"]["self_attn"]["q_proj"]["kernel"]
    assert float(jnp.abs(q).max()) > 0  # the attention weights do get a gradient to compare


def test_dot_product_attention_in_query_blocks_matches_reference_values_and_gradients():
    """Longer than ``q_block``: the queries go in rematerialised blocks (a loop in the program); the
    output and the gradients of q, k, v equal the einsum reference's."""
    import jax
    import jax.numpy as jnp

    from seed_jax.models.decoder import attend, attention_mask

    B, T, H, K, D = 2, 384, 4, 2, 16
    ks = jax.random.split(jax.random.PRNGKey(3), 4)
    q = jax.random.normal(ks[0], (B, T, H, D))
    k, v = (jax.random.normal(x, (B, T, K, D)) for x in ks[1:3])
    kv = jnp.asarray(np.arange(T)[None, :] >= np.array([[0], [100]]))  # row 1 left-padded
    mask = attention_mask(kv, T, 0)
    w = jax.random.normal(ks[3], (B, T, H, D)) * kv[:, :, None, None]

    def loss(q, k, v, impl, q_block):
        return (attend(q, k, v, mask, impl, q_block=q_block) * w).sum()

    blocked = jax.make_jaxpr(lambda *a: loss(*a, "dot_product", 128))(q, k, v)
    assert "scan" in str(blocked) and "scan" not in str(jax.make_jaxpr(lambda *a: loss(*a, "dot_product", 0))(q, k, v))
    got = jax.value_and_grad(loss, argnums=(0, 1, 2))(q, k, v, "dot_product", 128)
    want = jax.value_and_grad(loss, argnums=(0, 1, 2))(q, k, v, "reference", 0)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5)
    for a, b in zip(got[1], want[1]):
        np.testing.assert_allclose(a, b, atol=1e-4, rtol=1e-4)


def test_unknown_attention_impl_is_named():
    with pytest.raises(ValueError, match="attention must be one of"):
        ModelConfig(model_type="llama", vocab_size=8, hidden_size=8, intermediate_size=8, num_layers=1,
                    num_heads=2, num_kv_heads=1, head_dim=4, attention="splash")


@pytest.mark.parametrize("kind", TINY_KINDS)
def test_save_reload_by_transformers_same_logits(kind, tiny_model_dirs, tmp_path):
    hf, d = tiny_model_dirs[kind]
    model = load_model(d)
    save_model(model, tmp_path / "out")
    reloaded = type(hf).from_pretrained(tmp_path / "out").eval()
    ids, mask = _padded_batch(seed=1)
    np.testing.assert_allclose(_torch_logits(reloaded, ids, mask), _torch_logits(hf, ids, mask), atol=1e-6)


def test_sharded_checkpoint_with_index_loads(tiny_model_dirs, tmp_path):
    from seed_jax.models.weights import export_tensors, save_safetensors

    hf, d = tiny_model_dirs["qwen2"]
    model = load_model(d)
    out = tmp_path / "sharded"
    save_safetensors(export_tensors(model.params, model.config), out, max_shard_bytes=20_000)
    (out / "config.json").write_text((d / "config.json").read_text())
    assert len(list(out.glob("*.safetensors"))) > 2 and (out / "model.safetensors.index.json").exists()
    ids, mask = _padded_batch(seed=2)
    np.testing.assert_array_equal(np.asarray(load_model(out)(ids, mask)), np.asarray(model(ids, mask)))


def test_bfloat16_compute_is_close(tiny_model_dirs):
    hf, d = tiny_model_dirs["qwen3"]
    ids, mask = _padded_batch(seed=3)
    ref = _torch_logits(hf, ids, mask)
    out = np.asarray(load_model(d, dtype="bfloat16", param_dtype="float32")(ids, mask))
    assert np.abs(out - ref)[mask.astype(bool)].max() < 0.05


def test_config_reads_qwen3_head_dim_and_flags(tiny_model_dirs):
    _, d = tiny_model_dirs["qwen3"]
    cfg = ModelConfig.from_hf(json.loads((d / "config.json").read_text()))
    assert (cfg.model_type, cfg.head_dim, cfg.qk_norm, cfg.qkv_bias) == ("qwen3", 24, True, False)
    _, d = tiny_model_dirs["qwen2"]
    cfg = ModelConfig.from_hf(json.loads((d / "config.json").read_text()))
    assert (cfg.model_type, cfg.head_dim, cfg.qk_norm, cfg.qkv_bias) == ("qwen2", 16, False, True)


def test_missing_directory_is_clear(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_model(tmp_path / "nope")
    with pytest.raises(FileNotFoundError, match="config.json"):
        load_model(tmp_path)


def test_unknown_architecture_is_clear(tiny_model_dirs, tmp_path):
    _, d = tiny_model_dirs["llama"]
    cfg = json.loads((d / "config.json").read_text())
    cfg["architectures"], cfg["model_type"] = ["GPT2LMHeadModel"], "gpt2"
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(UnsupportedModelError, match="GPT2LMHeadModel"):
        load_model(tmp_path)


def test_shape_mismatch_names_the_tensor(tiny_model_dirs, tmp_path):
    import shutil

    _, d = tiny_model_dirs["llama"]
    for f in d.iterdir():
        shutil.copy(f, tmp_path / f.name)
    cfg = json.loads((d / "config.json").read_text())
    cfg["intermediate_size"] = 80
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(WeightLoadError, match=r"shape mismatch for 'model\.layers\.0\.mlp\.(gate|up|down)_proj"):
        load_model(tmp_path)


def test_truncated_safetensors_is_clear(tiny_model_dirs, tmp_path):
    import shutil

    _, d = tiny_model_dirs["qwen2"]
    for f in d.iterdir():
        shutil.copy(f, tmp_path / f.name)
    st = tmp_path / "model.safetensors"
    data = st.read_bytes()
    st.write_bytes(data[: len(data) // 2])
    with pytest.raises(WeightLoadError, match="truncated"):
        load_model(tmp_path)


def test_missing_tensor_is_listed(tiny_model_dirs, tmp_path):
    from safetensors.numpy import load_file, save_file

    _, d = tiny_model_dirs["qwen2"]
    tensors = load_file(str(d / "model.safetensors"))
    del tensors["model.layers.1.self_attn.q_proj.bias"]
    save_file(tensors, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text((d / "config.json").read_text())
    with pytest.raises(WeightLoadError, match=r"missing parameters.*q_proj/bias layers \[1\]"):
        load_model(tmp_path)


def test_llama3_rope_scaling_matches(tmp_path):
    hf = tiny_hf_model("llama", rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                               "high_freq_factor": 4.0, "original_max_position_embeddings": 16})
    hf.save_pretrained(tmp_path)
    ids, mask = _padded_batch(seed=4, lengths=(40, 23))
    out = np.asarray(load_model(tmp_path)(ids, mask))
    assert np.abs(out - _torch_logits(hf, ids, mask))[mask.astype(bool)].max() <= 1e-4


def test_missing_and_corrupt_gguf_are_clear(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_model(tmp_path / "model.gguf")
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\x03\x00\x00\x00" + b"\xff" * 40)
    with pytest.raises(WeightLoadError, match="bad.gguf"):
        load_model(bad)


def test_gguf_q_k_unpermute_inverts_llama_cpp_permutation():
    from seed_jax.models.gguf_file import _unpermute

    # llama.cpp's converter (HF -> GGUF) for q/k rows, written independently here
    def permute(w, n_head):
        return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)

    w = np.random.default_rng(0).normal(size=(3 * 8, 5)).astype(np.float32)
    np.testing.assert_array_equal(_unpermute(permute(w, 3), 3), w)
    assert not np.array_equal(permute(w, 3), w)
