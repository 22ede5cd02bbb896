"""Read a GGUF file (llama.cpp format) into Hugging Face-named float32 tensors and a config.

Quantised tensors are dequantised with the `gguf` package. llama.cpp's converter permutes the
q/k projection rows of ``llama`` checkpoints into its interleaved RoPE layout; they are
permuted back here so that the decoder's rotate-half RoPE applies unchanged.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from seed_jax.models.config import ModelConfig, UnsupportedModelError
from seed_jax.models.weights import WeightLoadError

_NAME_TABLE = (
    (r"token_embd\.weight", "model.embed_tokens.weight"),
    (r"output_norm\.weight", "model.norm.weight"),
    (r"output\.weight", "lm_head.weight"),
    (r"blk\.(\d+)\.attn_norm\.weight", "model.layers.{0}.input_layernorm.weight"),
    (r"blk\.(\d+)\.ffn_norm\.weight", "model.layers.{0}.post_attention_layernorm.weight"),
    (r"blk\.(\d+)\.attn_(q|k|v)\.(weight|bias)", "model.layers.{0}.self_attn.{1}_proj.{2}"),
    (r"blk\.(\d+)\.attn_output\.weight", "model.layers.{0}.self_attn.o_proj.weight"),
    (r"blk\.(\d+)\.attn_(q|k)_norm\.weight", "model.layers.{0}.self_attn.{1}_norm.weight"),
    (r"blk\.(\d+)\.ffn_(gate|up|down)\.weight", "model.layers.{0}.mlp.{1}_proj.weight"),
)
_ARCHS = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM"}


def _reader(path: Path):
    import gguf  # deferred: needed only for .gguf files

    if not path.exists():
        raise FileNotFoundError(f"GGUF file not found: {path}")
    try:
        return gguf.GGUFReader(str(path))
    except Exception as e:  # the reader raises assorted errors on damaged files
        raise WeightLoadError(f"{path}: cannot read GGUF file ({type(e).__name__}: {e})") from None


def _field(reader, key, default=None):
    f = reader.fields.get(key)
    if f is None:
        return default
    return f.contents()


def gguf_hf_config(reader) -> dict:
    """The Hugging Face config.json equivalent of the GGUF metadata."""
    arch = _field(reader, "general.architecture")
    if arch not in _ARCHS:
        raise UnsupportedModelError(f"unsupported GGUF architecture {arch!r}; supported: {sorted(_ARCHS)}")
    a = lambda k, d=None: _field(reader, f"{arch}.{k}", d)  # noqa: E731
    names = {t.name for t in reader.tensors}
    vocab = a("vocab_size") or len(_field(reader, "tokenizer.ggml.tokens", []))
    heads = a("attention.head_count")
    cfg = {
        "architectures": [_ARCHS[arch]],
        "model_type": arch,
        "vocab_size": int(vocab),
        "hidden_size": int(a("embedding_length")),
        "intermediate_size": int(a("feed_forward_length")),
        "num_hidden_layers": int(a("block_count")),
        "num_attention_heads": int(heads),
        "num_key_value_heads": int(a("attention.head_count_kv", heads)),
        "rope_theta": float(a("rope.freq_base", 10000.0)),
        "rms_norm_eps": float(a("attention.layer_norm_rms_epsilon", 1e-6)),
        "max_position_embeddings": int(a("context_length", 32768)),
        "tie_word_embeddings": "output.weight" not in names,
        "bos_token_id": _field(reader, "tokenizer.ggml.bos_token_id"),
        "eos_token_id": _field(reader, "tokenizer.ggml.eos_token_id"),
        "pad_token_id": _field(reader, "tokenizer.ggml.padding_token_id"),
    }
    if a("attention.key_length"):
        cfg["head_dim"] = int(a("attention.key_length"))
    return cfg


def _unpermute(w: np.ndarray, n_head: int) -> np.ndarray:
    """Undo llama.cpp's q/k row permutation (interleaved -> rotate-half halves)."""
    out = w.shape[0]
    return w.reshape(n_head, out // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def iter_gguf_tensors(reader, hf_cfg: dict) -> Iterator[tuple[str, np.ndarray]]:
    """Dequantised ``(hf_name, [out, in] float32)`` pairs."""
    from gguf import quants  # deferred: needed only for .gguf files

    permute = hf_cfg["model_type"] == "llama"
    for t in reader.tensors:
        hf_name = None
        for pat, tmpl in _NAME_TABLE:
            m = re.fullmatch(pat, t.name)
            if m:
                hf_name = tmpl.format(*m.groups())
                break
        if hf_name is None:
            if t.name.startswith("rope_freqs"):
                continue
            raise WeightLoadError(f"GGUF tensor {t.name!r} has no Hugging Face equivalent")
        arr = np.asarray(quants.dequantize(t.data, t.tensor_type), dtype=np.float32)
        arr = arr.reshape(tuple(int(d) for d in reversed(t.shape)))
        if permute and hf_name.endswith(("q_proj.weight", "k_proj.weight")):
            n = hf_cfg["num_attention_heads"] if ".q_proj" in hf_name else hf_cfg["num_key_value_heads"]
            arr = _unpermute(arr, n)
        yield hf_name, arr


def read_gguf(path: Path, **config_overrides) -> tuple[ModelConfig, Iterator[tuple[str, np.ndarray]], dict]:
    """(config, tensor iterator, hf config dict) of a GGUF file."""
    reader = _reader(Path(path))
    hf_cfg = gguf_hf_config(reader)
    return ModelConfig.from_hf(hf_cfg, **config_overrides), iter_gguf_tensors(reader, hf_cfg), hf_cfg
