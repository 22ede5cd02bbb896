"""Decoder models of the Llama / Qwen2 / Qwen3 family: loading, saving, tokenizers."""

from seed_jax.models.config import ModelConfig, UnsupportedModelError
from seed_jax.models.model import Model, embedded_model_path, load_model, save_model
from seed_jax.models.tokenizer import apply_chat, load_tokenizer, save_tokenizer
from seed_jax.models.weights import WeightLoadError

__all__ = ["Model", "ModelConfig", "UnsupportedModelError", "WeightLoadError", "apply_chat",
           "embedded_model_path", "load_model", "load_tokenizer", "save_model",
           "save_tokenizer"]
