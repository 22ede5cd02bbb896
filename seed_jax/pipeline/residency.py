"""What lives on the devices in each phase of a run: one description for the run and for the plan.

A run moves through phases; in each, some long-lived trees are resident on the devices (the
program temporaries of the phase come on top and are gone when it ends):

============  ==========================================================================
phase         resident
============  ==========================================================================
collect       ``weights`` (the loaded policy, sharded by the mesh's parameter rules), ``sampler``
annotate      ``weights``, ``sampler`` (the ``self`` analyzer only; other analyzers: nothing)
sft           ``master`` and ``opt_state`` (the train state; the loaded weights are dropped)
rl_rollout    ``master``, ``opt_state``, ``reference`` (when resident), ``sampler``
rl_analysis   the same (the self-analysis samples from the same copy)
rl_logprobs   ``master``, ``opt_state``, ``reference`` (resident, or read back for this phase)
rl_train      ``master``, ``opt_state``, ``reference`` (when resident)
eval          ``weights``, ``sampler``
============  ==========================================================================

Trees (bytes per device = the tree's shard on that device, from its shapes and shardings):

- ``weights`` / ``master``: the decoder's parameters in ``model.param_dtype``, by `PARAM_RULES`;
- ``opt_state``: the rest of the `TrainState` (AdamW's two moments mirror the parameters);
- ``reference``: the KL reference, the parameters in the compute dtype, sharded the same;
  ``none`` without a KL term, ``resident`` by default, ``reread`` with ``low_memory`` (read
  from the RL start's saved model for each update's log-prob passes, then freed);
- ``sampler``: the sampler's copy (`seed_jax.sampling.sampler_scope`: compute dtype, the
  sampler's layout on one host's devices); on one CPU device with no cast it is views of
  the weights (0 bytes).

The run records what it measures at each phase (`record_phase`: ``residency.jsonl``, live
bytes by device beside the planned bytes); the plan adds each phase's program temporaries to
its resident bytes (`phase_bytes`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from pathlib import Path

import jax
import numpy as np
from jax.sharding import NamedSharding

from seed_jax.jsonl import append_jsonl
from seed_jax.models import ModelConfig, scan_cache
from seed_jax.models.config import resolve_dtype
from seed_jax.models.decoder import init_params, unstack_layers
from seed_jax.pipeline.methods import switches
from seed_jax.pipeline.runtime import sampler_spec, train_config
from seed_jax.sampling import resolve_layout
from seed_jax.train.logprobs import param_shardings
from seed_jax.train.state import abstract_train_state, state_shardings

PHASES = ("collect", "annotate", "sft", "rl_rollout", "rl_analysis", "rl_logprobs", "rl_train", "eval")
TREES = ("weights", "master", "opt_state", "reference", "sampler")
RESIDENCY_FILE = "residency.jsonl"


@dataclasses.dataclass(frozen=True)
class Residency:
    """Where the run keeps its trees (module docstring).

    ``reference``: ``none`` | ``resident`` | ``reread``; ``self_annotate``: the stage-1
    annotator samples the policy; ``lean`` (``low_memory``): compiled programs dropped and the
    train step compiled apart before its first call, checkpoint writes waited for, freed heap
    returned between phases.
    """

    reference: str
    self_annotate: bool
    lean: bool

    @classmethod
    def of(cls, config) -> Residency:
        kl = float(config.train.c_kl) > 0 and switches(config).train
        ref = "none" if not kl else ("reread" if config.low_memory else "resident")
        return cls(reference=ref, self_annotate=config.stage1.analyzer == "self", lean=bool(config.low_memory))

    def trees(self, phase: str) -> tuple[str, ...]:
        """The trees resident in ``phase`` (module docstring)."""
        ref = ("reference",) if self.reference == "resident" else ()
        table = {
            "collect": ("weights", "sampler"),
            "annotate": ("weights", "sampler") if self.self_annotate else (),
            "sft": ("master", "opt_state"),
            "rl_rollout": ("master", "opt_state", *ref, "sampler"),
            "rl_analysis": ("master", "opt_state", *ref, "sampler"),
            "rl_logprobs": ("master", "opt_state", *(("reference",) if self.reference != "none" else ())),
            "rl_train": ("master", "opt_state", *ref),
            "eval": ("weights", "sampler"),
        }
        if phase not in table:
            raise ValueError(f"unknown phase {phase!r}; phases: {PHASES}")
        return table[phase]


def _shard_bytes(shapes, shardings) -> int:
    """Bytes of the largest per-device shard sum of a tree of ShapeDtypeStructs under ``shardings``."""
    per: dict = {}
    for s, sh in zip(jax.tree.leaves(shapes), jax.tree.leaves(shardings, is_leaf=lambda x: x is None)):
        nbytes = math.prod(sh.shard_shape(s.shape) if sh is not None else s.shape) * np.dtype(s.dtype).itemsize
        for d in (sh.device_set if sh is not None else [None]):
            per[d] = per.get(d, 0) + nbytes
    return max(per.values(), default=0)


def tree_bytes(model_cfg: ModelConfig, mesh, train_cfg=None, sampler=None) -> dict[str, int]:
    """Bytes per device of each tree (`TREES`) of ``model_cfg`` on ``mesh`` (the largest
    device's share). ``train_cfg``: the RL `TrainConfig` (its dtypes size the master and the
    moments; None: the model config's); ``sampler``: the `SamplerSpec` (None: the default)."""
    cfg = train_cfg.apply_to(model_cfg) if train_cfg is not None else model_cfg
    pdtype, cdtype = resolve_dtype(cfg.param_dtype), resolve_dtype(cfg.dtype)
    shapes = jax.eval_shape(lambda: init_params(cfg, jax.random.PRNGKey(0)))
    shardings = param_shardings(cfg, mesh)
    weights = _shard_bytes(jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape, pdtype), shapes), shardings)
    out = {"weights": weights, "master": weights,
           "reference": _shard_bytes(jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape, cdtype), shapes), shardings)}
    if train_cfg is not None:
        state = abstract_train_state(model_cfg, train_cfg)
        sh = state_shardings(state, mesh)
        out["opt_state"] = _shard_bytes(state, sh) - _shard_bytes(state.params, sh.params)
    else:
        out["opt_state"] = 0
    layout = resolve_layout(sampler)
    if layout.mesh is None:  # one CPU device, unrolled: views of the weights unless a cast is needed
        tree = jax.eval_shape(lambda p: unstack_layers(jax.tree.map(lambda a: a.astype(cdtype), p), cfg), shapes)
        if cdtype == pdtype:  # only a tied embedding's transposed head is new memory
            tree = {k: v for k, v in tree.items() if k == "lm_head" and cfg.tie_word_embeddings}
        out["sampler"] = _shard_bytes(tree, jax.tree.map(lambda _: None, tree))
    else:
        tree = jax.eval_shape(lambda p: scan_cache.sampler_tree(p, cfg, cdtype), shapes)
        specs = layout.weight_specs(cfg, tree)
        if layout.backend == "unrolled":
            specs = jax.tree.map(lambda _: jax.sharding.PartitionSpec(), tree)
        out["sampler"] = _shard_bytes(tree, jax.tree.map(lambda s: NamedSharding(layout.mesh, s), specs))
    return out


def phase_bytes(residency: Residency, sizes: Mapping[str, int]) -> dict[str, int]:
    """Resident bytes per device of every phase: the sum of its trees' ``sizes`` (`tree_bytes`)."""
    return {phase: sum(sizes[t] for t in residency.trees(phase)) for phase in PHASES}


def live_bytes_by_device() -> dict[str, int]:
    """Bytes of device memory held by live `jax.Array` shards, by device (``str(device)``), on this
    process's devices. Shards that alias one buffer (on CPU the unrolled sampler's per-layer
    views of the stacked weights) count once: the union of their address ranges."""
    spans: dict[str, list] = {str(d): [] for d in jax.local_devices()}
    for a in jax.live_arrays():
        if a.is_deleted():
            continue
        for s in a.addressable_shards:
            try:
                start = s.data.unsafe_buffer_pointer()
            except Exception:  # a backend without buffer pointers: count every shard
                start = None
            spans.setdefault(str(s.device), []).append((start, s.data.nbytes))
    return {d: _union_bytes(v) for d, v in spans.items()}


def device_peaks() -> dict[str, int]:
    """``peak_bytes_in_use`` of this process's devices where the backend reports it (GPU, TPU);
    {} on CPU."""
    out = {}
    for d in jax.local_devices():
        try:
            peak = (d.memory_stats() or {}).get("peak_bytes_in_use")
        except Exception:  # a backend without memory statistics
            peak = None
        if peak is not None:
            out[str(d)] = int(peak)
    return out


def _union_bytes(spans) -> int:
    """Bytes covered by ``(start, size)`` address ranges (None starts count whole)."""
    total = sum(n for s, n in spans if s is None)
    end = -1
    for s, n in sorted((s, n) for s, n in spans if s is not None):
        if s + n > end:
            total += s + n - max(s, end)
            end = s + n
    return total


def record_phase(path: Path | None, phase: str, update: int | None, planned: int | None) -> dict:
    """One line of ``residency.jsonl``: the phase, the update (RL), this host's live bytes by device
    (`live_bytes_by_device`), the planned resident bytes per device and, where the backend
    reports it, each device's peak so far (`device_peaks`); written by host 0
    (``path`` None: measured only). Returns the line."""
    line = {"phase": phase, "update": update, "planned": planned, "measured": live_bytes_by_device()}
    peaks = device_peaks()
    if peaks:
        line["device_peak"] = peaks
    if path is not None and jax.process_index() == 0:
        append_jsonl(path, [line])
    return line


class PhaseRecorder:
    """``residency.jsonl`` of one run: at each phase, the measured live bytes by device beside
    the resident bytes the run's config plans for that phase (`Residency`, `tree_bytes`)."""

    def __init__(self, config, path: Path | None):
        self.config = config
        self.path = path
        self.residency = Residency.of(config)
        self._sizes: dict = {}

    def planned(self, phase: str, model_cfg: ModelConfig, mesh) -> int:
        """The resident bytes per device that ``phase`` plans for ``model_cfg`` on ``mesh``."""
        key = (model_cfg, mesh)
        if key not in self._sizes:
            self._sizes[key] = tree_bytes(model_cfg, mesh, train_config(self.config), sampler_spec(self.config))
        return phase_bytes(self.residency, self._sizes[key])[phase]

    def __call__(self, phase: str, model_cfg: ModelConfig, mesh, update: int | None = None) -> dict:
        return record_phase(self.path, phase, update, self.planned(phase, model_cfg, mesh))


# program (or program group: ``rollout`` for rollout_prefill / rollout_decode) -> the phases it runs
# in and the resident trees that are among its own arguments (counted in its total already)
PROGRAM_PHASES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "train_step": (("rl_train",), ("master", "opt_state")),
    "sft_step": (("sft",), ("master", "opt_state")),
    "logprobs": (("rl_logprobs",), ("master",)),
    "teacher_logprobs": (("rl_logprobs",), ("master",)),
    "rollout": (("collect", "rl_rollout", "eval"), ("sampler",)),
    "analysis": (("annotate", "rl_analysis"), ("sampler",)),
}


def program_phases(name: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """`PROGRAM_PHASES` of a program's name or of its group (``rollout_decode`` -> ``rollout``)."""
    if name in PROGRAM_PHASES:
        return PROGRAM_PHASES[name]
    return PROGRAM_PHASES.get(name.rsplit("_", 1)[0], ((), ()))


def phase_peaks(residency: Residency, sizes: Mapping[str, int],
                programs: Mapping[str, float]) -> dict[str, tuple[float, str | None]]:
    """Per phase, the peak bytes per device and the program that sets it:

        peak(phase) = max over its programs p of  total(p) + sum(resident trees of the phase
                                                                 that are not arguments of p)

    (``programs``: name -> the program's total bytes per device, arguments, outputs and
    temporaries; `PROGRAM_PHASES` says where each runs and which trees it takes). A phase with
    no planned program peaks at its resident bytes (`phase_bytes`)."""
    resident = phase_bytes(residency, sizes)
    out: dict[str, tuple[float, str | None]] = {p: (float(resident[p]), None) for p in PHASES}
    for name, total in programs.items():
        phases, args = program_phases(name)
        for phase in phases:
            peak = total + sum(sizes[t] for t in residency.trees(phase) if t not in args)
            if out[phase][1] is None or peak > out[phase][0]:
                out[phase] = (max(peak, float(resident[phase])), name)
    return out
