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
from collections.abc import Iterable, Iterator, Sequence
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


def _place_of(cfg: ModelConfig, shapes: dict, name: str, shape: tuple[int, ...], source: str):
    """``(param path, layer index or None, transpose)`` of one checkpoint tensor of ``shape`` (its
    [out, in] layout), None for a tensor to skip; `WeightLoadError` naming the tensor on a shape
    mismatch or a tensor with no place."""
    if IGNORED.fullmatch(name):
        return None
    hit = match_rule(name)
    if hit is None:
        if name == "lm_head.weight" and cfg.tie_word_embeddings:
            return None
        raise WeightLoadError(f"{source}: tensor {name!r} has no place in a {cfg.model_type} decoder")
    rule, path, layer = hit
    if path == ("lm_head",) and cfg.tie_word_embeddings:
        return None  # tied checkpoints sometimes also store the head
    try:
        target = _get(shapes, path)
    except KeyError:
        raise WeightLoadError(
            f"{source}: tensor {name!r} maps to {'/'.join(path)}, which this config does not have "
            f"(qkv_bias={cfg.qkv_bias}, qk_norm={cfg.qk_norm})") from None
    shape = tuple(shape)[::-1] if rule.transpose else tuple(shape)
    want = target.shape[1:] if rule.layer else target.shape
    if shape != tuple(want):
        raise WeightLoadError(
            f"{source}: shape mismatch for {name!r}: checkpoint has {shape}"
            f"{' (transposed)' if rule.transpose else ''}, config expects {tuple(want)}")
    if rule.layer and not 0 <= layer < cfg.num_layers:
        raise WeightLoadError(f"{source}: tensor {name!r} names layer {layer}, config has {cfg.num_layers}")
    return path, layer, rule.transpose


def _check_complete(cfg: ModelConfig, shapes: dict, filled: dict, source: str) -> None:
    """`WeightLoadError` listing the parameters (and layers) ``filled`` (path -> layers) lacks."""
    missing = []
    for path, spec in _flat_paths(shapes):
        got = filled.get(path)
        if got is None:
            missing.append("/".join(path))
        elif len(spec.shape) and path[0] == "layers" and len(got) != cfg.num_layers:
            missing.append(f"{'/'.join(path)} layers {sorted(set(range(cfg.num_layers)) - set(got))}")
    if missing:
        raise WeightLoadError(f"{source}: missing parameters: {missing[:8]}{' ...' if len(missing) > 8 else ''}")


def assemble_params(cfg: ModelConfig, tensors: Iterable[tuple[str, np.ndarray]],
                    source: str = "checkpoint", shardings=None) -> dict:
    """Fill the decoder's parameter tree from ``(hf_name, array)`` pairs, one tensor at a time.

    Stacked layer parameters are preallocated once in the parameter dtype and filled slice by
    slice, so the checkpoint is never held twice in memory. Raises `WeightLoadError` naming the
    tensor on a shape mismatch, and listing what is missing when the checkpoint is incomplete.
    ``shardings`` (a tree of `jax.sharding.Sharding` like the parameters'): each leaf is laid
    out by it, every device given only its own slice (`place_params`); None: whole arrays on
    the default device.
    """
    shapes = param_shapes(cfg)
    np_dtype = np.dtype(resolve_dtype(cfg.param_dtype))
    out: dict = {}
    filled: dict[tuple[str, ...], set] = {}
    for name, array in tensors:
        place = _place_of(cfg, shapes, name, np.shape(array), source)
        if place is None:
            continue
        path, layer, transpose = place
        array = np.asarray(array)
        if transpose:
            array = array.T
        if layer is not None:
            try:
                buf = _get(out, path)
            except KeyError:
                buf = np.empty(_get(shapes, path).shape, np_dtype)
                _set(out, path, buf)
            buf[layer] = array.astype(np_dtype)
        else:
            _set(out, path, array.astype(np_dtype))
        filled.setdefault(path, set()).add(layer)
    _check_complete(cfg, shapes, filled, source)
    if shardings is not None:
        return place_params(out, shardings)
    return jax.tree_util.tree_map(jax.numpy.asarray, out)


def place_params(host_tree: dict, shardings) -> dict:
    """Host (numpy) arrays -> `jax.Array` values laid out by ``shardings`` (a matching tree), each
    addressable device given only its slice (``jax.make_array_from_callback``): no device holds
    the whole tree on its way to the mesh."""
    return jax.tree_util.tree_map(
        lambda a, s: jax.make_array_from_callback(a.shape, s, lambda idx, a=a: np.ascontiguousarray(a[idx])),
        host_tree, shardings)


def load_safetensors_sharded(cfg: ModelConfig, files: Sequence[Path], shardings, source: str) -> dict:
    """The parameter tree of safetensors ``files`` laid out by ``shardings``, read lazily: each
    addressable device's slice is read from the files (``safe_open(...).get_slice``) and cast
    to the parameter dtype on the host, so a host reads only the slices its devices hold and
    the float32 master exists only as shards. Checked like `assemble_params`."""
    handles, where = {}, {}
    try:
        for path in files:
            _check_safetensors(path)
            handles[path] = safe_open(str(path), framework="numpy")
            where.update(dict.fromkeys(handles[path].keys(), path))
        shapes = param_shapes(cfg)
        index: dict[tuple[str, ...], dict] = {}
        for name, f in where.items():
            place = _place_of(cfg, shapes, name, tuple(handles[f].get_slice(name).get_shape()), source)
            if place is not None:
                index.setdefault(place[0], {})[place[1]] = (name, place[2])
        _check_complete(cfg, shapes, index, source)
        np_dtype = np.dtype(resolve_dtype(cfg.param_dtype))

        def read(name: str, transpose: bool, idx: tuple) -> np.ndarray:
            piece = handles[where[name]].get_slice(name)[idx[::-1] if transpose else idx]
            return np.asarray(piece.T if transpose else piece).astype(np_dtype)

        def leaf(path, spec, sharding):
            names = index[path]

            def slice_of(idx):
                idx = tuple(idx) + (slice(None),) * (len(spec.shape) - len(idx))
                if None in names:
                    return read(*names[None], idx)
                layers = range(*idx[0].indices(spec.shape[0]))
                return np.stack([read(*names[i], idx[1:]) for i in layers])

            return jax.make_array_from_callback(spec.shape, sharding, slice_of)

        by_path = dict(_flat_paths(shardings))
        out: dict = {}
        for path, spec in _flat_paths(shapes):
            _set(out, path, leaf(path, spec, by_path[path]))
        return out
    finally:
        handles.clear()


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
    """The weight files of a Hugging Face directory: the shards its index lists, else its
    ``*.safetensors``; `WeightLoadError` naming what is missing or unreadable (the loader and
    the launch's preflight, `seed_jax.pipeline.preflight.missing_weights`, say the same)."""
    index = model_dir / "model.safetensors.index.json"
    if index.exists():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
            files = sorted({model_dir / f for f in weight_map.values()})
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise WeightLoadError(f"{index.name} is unreadable ({type(e).__name__}: {e})") from None
        absent = [f.name for f in files if not f.exists()]
        if absent:
            raise WeightLoadError(f"weight shards listed in {index.name} are missing: {', '.join(absent)}")
        return files
    files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        raise WeightLoadError("no weights (*.safetensors; PyTorch .bin files are not read)")
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
