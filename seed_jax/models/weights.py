"""Hugging Face <-> seed_jax weight mapping: one regex table plus one loader and one saver.

Each row maps a Hugging Face tensor name to a parameter path of `decoder.Decoder`; ``{1}``
in the path is filled from the regex's second group. ``layer`` rows carry the layer index in
group 1 and fill one slice of the stacked ``[num_layers, ...]`` parameter. ``transpose``
rows store PyTorch ``[out, in]`` weights as Flax ``[in, out]`` kernels.
"""

from __future__ import annotations

import dataclasses
import json
import re
import struct
from collections.abc import Iterable, Iterator
from pathlib import Path

import jax
import numpy as np
from safetensors import safe_open
from safetensors.numpy import save_file

from seed_jax.models.config import ModelConfig, resolve_dtype
from seed_jax.models.decoder import init_params


class WeightLoadError(ValueError):
    """A checkpoint cannot be loaded into the configured decoder."""


@dataclasses.dataclass(frozen=True)
class WeightRule:
    pattern: str
    path: tuple[str, ...]
    transpose: bool = False
    layer: bool = False


WEIGHT_TABLE: tuple[WeightRule, ...] = (
    WeightRule(r"model\.embed_tokens\.weight", ("embed_tokens", "embedding")),
    WeightRule(r"model\.norm\.weight", ("norm", "scale")),
    WeightRule(r"lm_head\.weight", ("lm_head",), transpose=True),
    WeightRule(r"model\.layers\.(\d+)\.self_attn\.(q|k|v|o)_proj\.weight",
               ("layers", "self_attn", "{1}_proj", "kernel"), transpose=True, layer=True),
    WeightRule(r"model\.layers\.(\d+)\.self_attn\.(q|k|v)_proj\.bias",
               ("layers", "self_attn", "{1}_proj", "bias"), layer=True),
    WeightRule(r"model\.layers\.(\d+)\.self_attn\.(q|k)_norm\.weight",
               ("layers", "self_attn", "{1}_norm", "scale"), layer=True),
    WeightRule(r"model\.layers\.(\d+)\.(input_layernorm|post_attention_layernorm)\.weight",
               ("layers", "{1}", "scale"), layer=True),
    WeightRule(r"model\.layers\.(\d+)\.mlp\.(gate|up|down)_proj\.weight",
               ("layers", "mlp", "{1}_proj", "kernel"), transpose=True, layer=True),
)
IGNORED = re.compile(r".*rotary_emb\.inv_freq$")


def match_rule(name: str) -> tuple[WeightRule, tuple[str, ...], int | None] | None:
    """The rule, concrete parameter path and layer index for one HF tensor name."""
    for rule in WEIGHT_TABLE:
        m = re.fullmatch(rule.pattern, name)
        if m:
            groups = m.groups()
            path = tuple(p.replace("{1}", groups[1]) if len(groups) > 1 else p for p in rule.path)
            return rule, path, (int(groups[0]) if rule.layer else None)
    return None


def param_shapes(cfg: ModelConfig) -> dict:
    """Nested dict of `jax.ShapeDtypeStruct` for the decoder's parameters."""
    return jax.eval_shape(lambda: init_params(cfg, jax.random.PRNGKey(0)))


def _get(tree: dict, path: tuple[str, ...]):
    for p in path:
        tree = tree[p]
    return tree


def _set(tree: dict, path: tuple[str, ...], value) -> None:
    for p in path[:-1]:
        tree = tree.setdefault(p, {})
    tree[path[-1]] = value


def _flat_paths(tree: dict, prefix=()) -> Iterator[tuple[tuple[str, ...], object]]:
    for k, v in tree.items():
        if isinstance(v, dict):
            yield from _flat_paths(v, prefix + (k,))
        else:
            yield prefix + (k,), v


def assemble_params(cfg: ModelConfig, tensors: Iterable[tuple[str, np.ndarray]],
                    source: str = "checkpoint") -> dict:
    """Fill the decoder's parameter tree from ``(hf_name, array)`` pairs, one tensor at a time.

    Stacked layer parameters are preallocated once in the parameter dtype and filled slice by
    slice, so the checkpoint is never held twice in memory. Raises `WeightLoadError` naming the
    tensor on a shape mismatch, and listing what is missing when the checkpoint is incomplete.
    """
    shapes = param_shapes(cfg)
    np_dtype = np.dtype(resolve_dtype(cfg.param_dtype))
    out: dict = {}
    filled: dict[tuple[str, ...], set] = {}
    for name, array in tensors:
        if IGNORED.fullmatch(name):
            continue
        hit = match_rule(name)
        if hit is None:
            if name == "lm_head.weight" and cfg.tie_word_embeddings:
                continue
            raise WeightLoadError(f"{source}: tensor {name!r} has no place in a {cfg.model_type} decoder")
        rule, path, layer = hit
        if path == ("lm_head",) and cfg.tie_word_embeddings:
            continue  # tied checkpoints sometimes also store the head
        try:
            target = _get(shapes, path)
        except KeyError:
            raise WeightLoadError(
                f"{source}: tensor {name!r} maps to {'/'.join(path)}, which this config does not have "
                f"(qkv_bias={cfg.qkv_bias}, qk_norm={cfg.qk_norm})") from None
        array = np.asarray(array)
        if rule.transpose:
            array = array.T
        want = target.shape[1:] if rule.layer else target.shape
        if tuple(array.shape) != tuple(want):
            raise WeightLoadError(
                f"{source}: shape mismatch for {name!r}: checkpoint has {tuple(array.shape)}"
                f"{' (transposed)' if rule.transpose else ''}, config expects {tuple(want)}")
        if rule.layer:
            if not 0 <= layer < cfg.num_layers:
                raise WeightLoadError(f"{source}: tensor {name!r} names layer {layer}, config has {cfg.num_layers}")
            try:
                buf = _get(out, path)
            except KeyError:
                buf = np.empty(target.shape, np_dtype)
                _set(out, path, buf)
            buf[layer] = array.astype(np_dtype)
            filled.setdefault(path, set()).add(layer)
        else:
            _set(out, path, array.astype(np_dtype))
            filled[path] = {None}
    missing = []
    for path, spec in _flat_paths(shapes):
        got = filled.get(path)
        if got is None:
            missing.append("/".join(path))
        elif len(spec.shape) and path[0] == "layers" and len(got) != cfg.num_layers:
            missing.append(f"{'/'.join(path)} layers {sorted(set(range(cfg.num_layers)) - got)}")
    if missing:
        raise WeightLoadError(f"{source}: missing parameters: {missing[:8]}{' ...' if len(missing) > 8 else ''}")
    return jax.tree_util.tree_map(jax.numpy.asarray, out)


def export_tensors(params: dict, cfg: ModelConfig) -> Iterator[tuple[str, np.ndarray]]:
    """Inverse of `assemble_params`: ``(hf_name, [out, in] array)`` pairs, per layer."""
    for path, value in _flat_paths(params):
        value = np.asarray(value)
        if path == ("lm_head",):
            yield "lm_head.weight", value.T
            continue
        if path[0] != "layers":
            name = {("embed_tokens", "embedding"): "model.embed_tokens.weight",
                    ("norm", "scale"): "model.norm.weight"}[path]
            yield name, value
            continue
        sub = path[1:]
        if sub[0] == "self_attn":
            leaf = {"kernel": "weight", "bias": "bias", "scale": "weight"}[sub[2]]
            base = f"self_attn.{sub[1]}.{leaf}"
        elif sub[0] == "mlp":
            base = f"mlp.{sub[1]}.weight"
        else:
            base = f"{sub[0]}.weight"
        for i in range(cfg.num_layers):
            w = value[i]
            yield f"model.layers.{i}.{base}", (w.T if sub[-1] == "kernel" else w)


# --------------------------------------------------------------------------- safetensors I/O

def _check_safetensors(path: Path) -> None:
    """Fail clearly on a truncated or non-safetensors file before handing it to the reader."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise WeightLoadError(f"{path}: not a safetensors file (only {size} bytes)")
        (n,) = struct.unpack("<Q", head)
        if n > size - 8:
            raise WeightLoadError(f"{path}: truncated safetensors header ({n} bytes announced, file is {size})")
        try:
            header = json.loads(f.read(n))
        except ValueError as e:
            raise WeightLoadError(f"{path}: corrupt safetensors header: {e}") from None
    end = max((v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"), default=0)
    if 8 + n + end > size:
        raise WeightLoadError(f"{path}: truncated safetensors file: data ends at byte {8 + n + end}, "
                              f"file has {size} bytes")


def iter_safetensors(files: Iterable[Path]) -> Iterator[tuple[str, np.ndarray]]:
    for path in files:
        _check_safetensors(path)
        with safe_open(str(path), framework="flax") as f:
            for name in f.keys():
                yield name, np.asarray(f.get_tensor(name))


def safetensors_files(model_dir: Path) -> list[Path]:
    index = model_dir / "model.safetensors.index.json"
    if index.exists():
        weight_map = json.loads(index.read_text())["weight_map"]
        files = sorted({model_dir / f for f in weight_map.values()})
        absent = [str(f) for f in files if not f.exists()]
        if absent:
            raise WeightLoadError(f"{index}: shards listed in the index are missing: {absent}")
        return files
    files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        raise WeightLoadError(f"{model_dir}: no *.safetensors files (PyTorch .bin files are not read)")
    return files


def save_safetensors(tensors: Iterable[tuple[str, np.ndarray]], out_dir: Path,
                     max_shard_bytes: int = 2 * 1024**3) -> None:
    """Write tensors as one file, or as shards plus ``model.safetensors.index.json``."""
    shards: list[dict] = [{}]
    size = 0
    for name, arr in tensors:
        arr = np.ascontiguousarray(arr)
        if size and size + arr.nbytes > max_shard_bytes:
            shards.append({})
            size = 0
        shards[-1][name] = arr
        size += arr.nbytes
    out_dir.mkdir(parents=True, exist_ok=True)
    if len(shards) == 1:
        save_file(shards[0], str(out_dir / "model.safetensors"), metadata={"format": "pt"})
        return
    weight_map = {}
    for i, shard in enumerate(shards):
        fname = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        save_file(shard, str(out_dir / fname), metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(shard, fname))
    total = sum(a.nbytes for s in shards for a in s.values())
    (out_dir / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=1))
