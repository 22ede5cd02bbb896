"""Decoder configuration for the Llama / Qwen2 / Qwen2.5 / Qwen3 / SmolLM2 family.

`ModelConfig.from_hf(config_dict)` reads a Hugging Face ``config.json``; `to_hf()` writes
one back. Parameter and compute dtypes are separate so that float32 master weights can run
bfloat16 matmuls.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax.numpy as jnp

SUPPORTED_ARCHITECTURES = {
    "LlamaForCausalLM": "llama",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3",
    "MistralForCausalLM": "llama",
}
_DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}
ATTENTION_IMPLS = ("reference", "dot_product", "flash")
# Rematerialisation of each decoder block (`seed_jax.models.decoder.remat_policy` says what each keeps).
REMAT_POLICIES = ("none", "full", "save_dots", "save_dots_except_mlp", "save_qkv_proj", "offload")


class UnsupportedModelError(ValueError):
    """The checkpoint describes a model this decoder does not implement."""


def remat_name(remat: bool | str) -> str:
    """A remat setting as a policy name: ``True -> "full"``, ``False -> "none"``, names checked."""
    if isinstance(remat, bool):
        return "full" if remat else "none"
    if remat not in REMAT_POLICIES:
        raise ValueError(f"remat must be a bool or one of {REMAT_POLICIES}, got {remat!r}")
    return remat


def resolve_dtype(name: str | Any) -> Any:
    """Map 'float32' / 'bfloat16' / 'float16' (or a jnp dtype) to a jnp dtype."""
    if not isinstance(name, str):
        return name
    if name not in _DTYPES:
        raise ValueError(f"dtype must be one of {sorted(_DTYPES)}, got {name!r}")
    return _DTYPES[name]


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Static hyper-parameters of one decoder (hashable: usable as a jit static arg)."""

    model_type: str  # "llama" | "qwen2" | "qwen3"
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rope_theta: float = 10000.0
    rope_scaling: tuple[tuple[str, Any], ...] | None = None  # sorted items of the HF dict
    rms_norm_eps: float = 1e-6
    tie_word_embeddings: bool = False
    qkv_bias: bool = False  # Qwen2 / Qwen2.5
    qk_norm: bool = False  # Qwen3
    max_position_embeddings: int = 32768
    bos_token_id: int | None = None
    eos_token_ids: tuple[int, ...] = ()
    param_dtype: str = "float32"
    dtype: str = "float32"
    remat: bool | str = False  # a `REMAT_POLICIES` name (True = "full", False = "none")
    attention: str = "reference"  # an `ATTENTION_IMPLS` name (`seed_jax.models.decoder.attend`)

    def __post_init__(self):
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"num_heads ({self.num_heads}) must be a multiple of num_kv_heads ({self.num_kv_heads})"
            )
        for name in ("param_dtype", "dtype"):
            resolve_dtype(getattr(self, name))
        remat_name(self.remat)
        if self.attention not in ATTENTION_IMPLS:
            raise ValueError(f"attention must be one of {ATTENTION_IMPLS}, got {self.attention!r}")

    @property
    def rope_scaling_dict(self) -> dict | None:
        return dict(self.rope_scaling) if self.rope_scaling else None

    def replace(self, **kw) -> ModelConfig:
        return dataclasses.replace(self, **kw)

    @classmethod
    def from_hf(cls, cfg: dict, **overrides) -> ModelConfig:
        """Build from a Hugging Face config.json dict; unknown architectures raise."""
        archs = cfg.get("architectures") or []
        model_type = cfg.get("model_type")
        kind = None
        for a in archs:
            kind = SUPPORTED_ARCHITECTURES.get(a, kind)
        if kind is None and model_type in ("llama", "qwen2", "qwen3", "mistral"):
            kind = "llama" if model_type == "mistral" else model_type
        if kind is None:
            raise UnsupportedModelError(
                f"unsupported architecture {archs or model_type!r}; supported: "
                f"{sorted(SUPPORTED_ARCHITECTURES)}"
            )
        missing = [k for k in ("vocab_size", "hidden_size", "intermediate_size",
                               "num_hidden_layers", "num_attention_heads") if k not in cfg]
        if missing:
            raise ValueError(f"config.json is missing required keys: {missing}")
        num_heads = cfg["num_attention_heads"]
        head_dim = cfg.get("head_dim") or cfg["hidden_size"] // num_heads
        eos = cfg.get("eos_token_id")
        eos_ids = tuple(eos) if isinstance(eos, (list, tuple)) else (() if eos is None else (eos,))
        rope_params = cfg.get("rope_parameters") or {}  # transformers >= 5 layout
        rs = cfg.get("rope_scaling") or (
            {k: v for k, v in rope_params.items() if k != "rope_theta"} if rope_params else None)
        if rs is not None:
            rtype = rs.get("rope_type", rs.get("type", "default"))
            if rtype not in ("default", "llama3", "linear"):
                raise UnsupportedModelError(f"unsupported rope_scaling type {rtype!r}")
            if rtype == "default":
                rs = None
        kw = dict(
            model_type=kind,
            vocab_size=cfg["vocab_size"],
            hidden_size=cfg["hidden_size"],
            intermediate_size=cfg["intermediate_size"],
            num_layers=cfg["num_hidden_layers"],
            num_heads=num_heads,
            num_kv_heads=cfg.get("num_key_value_heads") or num_heads,
            head_dim=head_dim,
            rope_theta=float(cfg.get("rope_theta") or rope_params.get("rope_theta") or 10000.0),
            rope_scaling=tuple(sorted(rs.items())) if rs else None,
            rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            qkv_bias=kind == "qwen2" or bool(cfg.get("attention_bias", False)),
            qk_norm=kind == "qwen3",
            max_position_embeddings=int(cfg.get("max_position_embeddings", 32768)),
            bos_token_id=cfg.get("bos_token_id"),
            eos_token_ids=eos_ids,
        )
        kw.update(overrides)
        return cls(**kw)

    def to_hf(self) -> dict:
        """A config.json dict that transformers loads into the matching architecture."""
        arch = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM",
                "qwen3": "Qwen3ForCausalLM"}[self.model_type]
        out = {
            "architectures": [arch],
            "model_type": self.model_type,
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_layers,
            "num_attention_heads": self.num_heads,
            "num_key_value_heads": self.num_kv_heads,
            "head_dim": self.head_dim,
            "rope_theta": self.rope_theta,
            "rms_norm_eps": self.rms_norm_eps,
            "tie_word_embeddings": self.tie_word_embeddings,
            "max_position_embeddings": self.max_position_embeddings,
            "hidden_act": "silu",
            "torch_dtype": self.param_dtype,
        }
        if self.rope_scaling:
            out["rope_scaling"] = dict(self.rope_scaling)
        if self.model_type == "llama":
            out["attention_bias"] = self.qkv_bias
            out["mlp_bias"] = False
        if self.bos_token_id is not None:
            out["bos_token_id"] = self.bos_token_id
        if self.eos_token_ids:
            out["eos_token_id"] = (self.eos_token_ids[0] if len(self.eos_token_ids) == 1
                                   else list(self.eos_token_ids))
        return out
