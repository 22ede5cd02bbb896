"""Compile every program of a run for a target and measure it: memory, FLOPs, collectives, roofline.

Per program and per device:

    total    = argument + output - alias + temp + generated code     (compiled.memory_analysis())
    fits     = total <= (1 - HEADROOM) * HBM
    flops, hbm bytes, collective bytes            (`seed_jax.plan.hlo`: loop trip counts applied)
    roofline = max(flops / peak, hbm_bytes / hbm_bw) + link_bytes / link_bw     (seconds)
    mfu      = (flops / peak) / roofline

``rollout.wave_rows = -1`` (`WAVE_AUTO`): the plan chooses the wave, the largest power of two of
rows (from one host's share of the update's tasks x group size down to one row per sampler row
shard; a wave is one host's `generate` call, on its own devices) whose prefill
and decode fit (`choose_wave_rows`: all rows first, then a bisection, memory growing with the
rows), and plans the run with it; the launch runs with the plan's choice. The same for
``analysis.batch_size = -1`` (the self-analysis sampler's prefill and decode, over the same row
candidates: a host analyses its share of the update's trajectories) and
``train.micro_batch_size = -1`` (the train step and log-prob passes, over the multiples of
``lcm(data x fsdp, hosts)`` dividing ``rl.mini_batch_size``:
`seed_jax.pipeline.auto_sizes.micro_batch_candidates`), each by `choose_largest`.

``flops`` are the compiled program's matmul FLOPs (dot / convolution), rematerialised forwards
included; XLA's own ``cost_analysis()['flops']`` (which counts loop bodies once) is kept beside it
as ``xla_flops``.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import re
import time
from pathlib import Path

import jax
import jax.numpy as jnp

from seed_jax.buckets import row_bucket
from seed_jax.models.config import ModelConfig
from seed_jax.models.model import resolve_model_path
from seed_jax.pipeline.auto_sizes import AUTO, micro_batch_candidates
from seed_jax.pipeline.residency import PHASES, Residency, phase_peaks, program_phases, tree_bytes
from seed_jax.pipeline.runtime import random_model_config, sampler_spec, train_config
from seed_jax.plan import hlo
from seed_jax.plan.programs import PlanConfigError, Program, host_rollout_rows, run_programs, sampler_buckets
from seed_jax.plan.targets import Target, host_devices_of
from seed_jax.train.mesh import auto_fsdp, batch_divisor, make_mesh

HEADROOM = 0.05
GB = 1e9


def model_config_of(config) -> ModelConfig:
    """The decoder a run config trains, read from ``config.json`` (or a GGUF header) only, with the
    run's dtypes and remat: no weights are read."""
    m = config.model
    overrides = dict(dtype=m.dtype, param_dtype=m.param_dtype, remat=m.remat)
    if "attention" in m:
        overrides["attention"] = m.attention
    if m.random_init:
        from seed_jax.models.tokenizer import load_tokenizer
        return random_model_config(config, load_tokenizer(m.tokenizer))
    try:
        path = resolve_model_path(m.path)
    except FileNotFoundError as e:
        raise PlanConfigError(f"config.model.path: {e}") from None
    if path.is_file() and path.suffix == ".gguf":
        from gguf import GGUFReader

        from seed_jax.models.gguf_file import gguf_hf_config
        return ModelConfig.from_hf(gguf_hf_config(GGUFReader(str(path))), **overrides)
    cfg_file = path / "config.json"
    if not cfg_file.is_file():
        raise PlanConfigError(f"config.model.path: {path} has no config.json")
    try:
        return ModelConfig.from_hf(json.loads(cfg_file.read_text()), **overrides)
    except ValueError as e:
        raise PlanConfigError(f"config.model.path: {cfg_file}: {e}") from None


@dataclasses.dataclass
class ProgramPlan:
    """The figures of one program on one device (module docstring); bytes and seconds."""

    name: str
    note: str
    argument: float
    output: float
    alias: float
    temp: float
    code: float
    total: float
    hbm: float
    fits: bool
    flops: float
    xla_flops: float
    hbm_bytes: float
    collective_bytes: dict[str, float]
    link_bytes: float
    roofline_s: float
    mfu: float
    compile_s: float
    unknown_loops: list[str]
    error: str = ""  # why XLA refused to compile it (out of memory), when it did
    uncosted_kernels: list[str] = dataclasses.field(default_factory=list)  # FLOPs not counted (MFU a floor)

    @property
    def collective_total(self) -> float:
        return sum(self.collective_bytes.values())


@dataclasses.dataclass
class SizeChoice:
    """The plan's choice of a size left at -1 (a wave, a micro-batch, an analysis batch): ``rows``,
    the largest whose programs fit (None: not even ``tried``'s smallest); ``tried``: rows ->
    whether its programs fit, for every size compiled."""

    rows: int | None
    tried: dict[int, bool]


@dataclasses.dataclass
class PhasePeak:
    """One phase of the run on one device: ``peak`` bytes = the largest total of its programs
    (``program``; None: no planned program) plus the ``resident`` trees it does not take as
    arguments (`seed_jax.pipeline.residency.phase_peaks`)."""

    peak: float
    program: str | None
    resident: tuple[str, ...]


@dataclasses.dataclass
class Plan:
    target: str
    devices: int
    hosts: int
    mesh: dict[str, int]
    model: dict
    approximate_memory: bool
    programs: list[ProgramPlan]
    waves: SizeChoice | None = None  # the plan's choice of rollout.wave_rows (asked for with -1)
    micro_batch: SizeChoice | None = None  # of train.micro_batch_size (asked for with -1)
    analysis_batch: SizeChoice | None = None  # of analysis.batch_size (asked for with -1)
    buckets: dict[str, list[tuple[int, int]]] = dataclasses.field(default_factory=dict)  # sampler (rows, prompt)
    # the run's phases (`seed_jax.pipeline.residency`) and the resident trees' bytes per device
    phases: dict[str, PhasePeak] = dataclasses.field(default_factory=dict)
    trees: dict[str, int] = dataclasses.field(default_factory=dict)
    hbm: float = 0.0

    def phase_fits(self, phase: str) -> bool:
        return self.phases[phase].peak <= (1 - HEADROOM) * self.hbm

    @property
    def fits(self) -> bool:
        """Every program fits, and so does every phase's peak (its program plus what stays resident)."""
        return all(p.fits for p in self.programs) and all(self.phase_fits(ph) for ph in self.phases)

    def to_json(self) -> dict:
        d = dataclasses.asdict(self)
        d["fits"] = self.fits
        d["headroom"] = HEADROOM
        return d


def shard_bytes(args) -> float:
    """Bytes of one device's shards of abstract arguments (``ShapeDtypeStruct``s with shardings)."""
    total = 0.0
    for a in jax.tree.leaves(args):
        shape = a.sharding.shard_shape(a.shape) if getattr(a, "sharding", None) is not None else a.shape
        total += math.prod(shape) * jnp.dtype(a.dtype).itemsize
    return total


_OOM = re.compile(r"memory required for HLO temporaries \(([\d.]+)([KMGT]?)\)")


def _oom_temp_bytes(message: str) -> float | None:
    """The temporaries of a compile that XLA refused for lack of memory (XLA:TPU checks at compile)."""
    m = _OOM.search(message)
    if not m:
        return None
    return float(m.group(1)) * {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}[m.group(2)]


def measure(program: Program, target: Target) -> ProgramPlan:
    """Compile one program and read its figures (module docstring).

    A compile that XLA refuses because the program does not fit the device (XLA:TPU does) gives a
    plan that does not fit: arguments from the shardings, temporaries from XLA's message, the
    other figures zero, and the message in ``error``.
    """
    t0 = time.time()
    try:
        compiled = program.lower().compile()
    except Exception as e:
        temp = _oom_temp_bytes(str(e))
        if temp is None:
            raise
        args = shard_bytes(program.args)
        return ProgramPlan(
            name=program.name, note=program.note, argument=args, output=0.0, alias=0.0, temp=temp, code=0.0,
            total=args + temp, hbm=target.chip.hbm, fits=False, flops=0.0, xla_flops=0.0, hbm_bytes=0.0,
            collective_bytes=dict.fromkeys(hlo.COLLECTIVES, 0.0), link_bytes=0.0, roofline_s=0.0, mfu=0.0,
            compile_s=time.time() - t0, unknown_loops=[], error=" ".join(str(e).split())[:300])
    compile_s = time.time() - t0
    mem = compiled.memory_analysis()
    argument, output = float(mem.argument_size_in_bytes), float(mem.output_size_in_bytes)
    alias, temp = float(mem.alias_size_in_bytes), float(mem.temp_size_in_bytes)
    code = float(mem.generated_code_size_in_bytes)
    total = argument + output - alias + temp + code
    cost = compiled.cost_analysis() or {}
    if isinstance(cost, list):  # older JAX: one dict per computation
        cost = cost[0] if cost else {}
    stats = hlo.analyze(compiled.as_text(), target.num_devices, program.unknown_trips)
    xla_flops = float(cost.get("flops", 0.0))
    flops = max(stats.flops, xla_flops)
    chip = target.chip
    compute_s = flops / chip.peak
    roofline = max(compute_s, stats.hbm_bytes / chip.hbm_bw) + stats.link_bytes / chip.link_bw
    return ProgramPlan(
        name=program.name, note=program.note, argument=argument, output=output, alias=alias, temp=temp, code=code,
        total=total, hbm=chip.hbm, fits=total <= (1 - HEADROOM) * chip.hbm, flops=flops, xla_flops=xla_flops,
        hbm_bytes=stats.hbm_bytes, collective_bytes=stats.collective_bytes, link_bytes=stats.link_bytes,
        roofline_s=roofline, mfu=compute_s / roofline if roofline > 0 else 0.0, compile_s=compile_s,
        unknown_loops=stats.unknown_loops, uncosted_kernels=stats.uncosted_kernels)


def target_hosts(target: Target) -> int:
    """The processes (hosts) the target's devices belong to (a TPU topology spans several)."""
    return len({getattr(d, "process_index", 0) for d in target.devices})


def target_mesh(config, target: Target):
    """The run's ``(data, fsdp, tensor)`` mesh over the target's devices (`make_mesh`), as each of
    the target's hosts would build it (``mesh.fsdp = -1``: `mesh.auto_fsdp`)."""
    m = config.mesh
    fsdp = m.fsdp
    if fsdp == -1:
        fsdp = auto_fsdp(list(target.devices), m.tensor, target_hosts(target))
    try:
        return make_mesh(None if m.data == -1 else m.data, fsdp, m.tensor, devices=list(target.devices))
    except ValueError as e:
        raise PlanConfigError(f"config.mesh: {e} ({target.spec})") from None


WAVE_AUTO = -1  # rollout.wave_rows: the plan chooses
CHOICE_KEYS = {"waves": "rollout.wave_rows", "micro_batch": "train.micro_batch_size",
               "analysis_batch": "analysis.batch_size"}  # Plan field -> the config key it chooses
MICRO_PROGRAMS = {"train_step", "logprobs", "teacher_logprobs"}  # the programs a micro-batch sizes


def with_key(config, dotted: str, value):
    """A copy of ``config`` with the dotted key set to ``value``."""
    c = copy.deepcopy(config)
    *parents, leaf = dotted.split(".")
    node = c
    for part in parents:
        node = node[part]
    node[leaf] = value
    return c


def with_wave_rows(config, rows: int):
    """A copy of ``config`` with ``rollout.wave_rows = rows``."""
    return with_key(config, "rollout.wave_rows", rows)


def wave_candidates(config, target: Target) -> list[int]:
    """Powers of two of rows, largest first: from one host's share of the update's rollouts
    (``rl.tasks_per_update x rollout.group_size`` over the target's hosts, rounded up) down to
    one row per sampler row shard (a host's devices over ``sampler.tensor_parallel``). The
    candidates of a wave and of a self-analysis batch (one skill per trajectory)."""
    hosts = target_hosts(target)
    top = row_bucket(host_rollout_rows(with_wave_rows(config, 0), hosts))
    least = min(top, row_bucket(max(1, target.num_devices // hosts // max(1, config.sampler.tensor_parallel))))
    out = [top]
    while out[-1] > least:
        out.append(out[-1] // 2)
    return out


def choose_largest(cands: list[int], plans_of, fits_of=lambda p: p.fits
                   ) -> tuple[SizeChoice, dict[int, list[ProgramPlan]]]:
    """The largest of ``cands`` (largest first) whose programs ``plans_of(size)`` all fit
    (``fits_of``; default: the program alone): the largest first, then by bisection (memory
    grows with the size, so a size that fits has every smaller one fit); also the plans
    compiled on the way."""
    plans: dict[int, list[ProgramPlan]] = {}

    def fits(size: int) -> bool:
        if size not in plans:
            plans[size] = plans_of(size)
        return all(fits_of(p) for p in plans[size])

    if fits(cands[0]):  # the largest at once (often the case)
        return SizeChoice(cands[0], {cands[0]: True}), plans
    lo, hi = 1, len(cands)  # the answer's index lies in [lo, hi]; len(cands): none fits
    while lo < hi:
        mid = (lo + hi) // 2
        if fits(cands[mid]):
            hi = mid
        else:
            lo = mid + 1
    chosen = cands[lo] if lo < len(cands) else None
    return SizeChoice(chosen, {r: all(fits_of(p) for p in plans[r]) for r in sorted(plans, reverse=True)}), plans


def _measured(config, key: str, target: Target, model_cfg: ModelConfig, mesh, names: set[str], progress,
              sampler_devices, what: str):
    """``plans_of(size)`` for `choose_largest`: the programs in ``names`` of ``config`` with ``key = size``."""
    def plans_of(size: int) -> list[ProgramPlan]:
        out = []
        for p in run_programs(with_key(config, key, size), model_cfg, mesh, names, hosts=target_hosts(target),
                              sampler_devices=sampler_devices):
            if progress is not None:
                progress(f"{p.name} ({size} {what})")
            out.append(measure(p, target))
        return out
    return plans_of


def choose_wave_rows(config, target: Target, model_cfg: ModelConfig, mesh, progress=None, sampler_devices=None
                     ) -> tuple[SizeChoice, dict[int, list[ProgramPlan]]]:
    """The largest of `wave_candidates` whose rollout prefill and decode fit ``target`` (`choose_largest`);
    ``sampler_devices``: one host's devices (default `host_devices_of` the target)."""
    sampler_devices = sampler_devices or host_devices_of(target)
    return choose_largest(wave_candidates(config, target), _measured(
        config, "rollout.wave_rows", target, model_cfg, mesh, {"rollout"}, progress, sampler_devices,
        "rows per wave"))


def _wanted(names: set[str] | None, group: str) -> bool:
    return names is None or any(n == group or n.startswith(group + "_") for n in names)


def plan_run(config, target: Target, names: set[str] | None = None, progress=None,
             stop_at_misfit: bool = False) -> Plan:
    """Compile and measure every program of ``config`` (or those in ``names``) for ``target``.

    ``progress(name)``, when given, is called before each compile (they can take minutes);
    ``stop_at_misfit``: stop after the first program that does not fit (the train step first).
    With ``rollout.wave_rows``, ``train.micro_batch_size`` or ``analysis.batch_size`` at -1 the
    programs they size are those of the plan's choice (`choose_largest`; the smallest candidate
    when none fits, or when none of the programs it sizes is asked for).
    """
    model_cfg = model_config_of(config)
    mesh = target_mesh(config, target)
    hosts = target_hosts(target)
    sampler_devices = host_devices_of(target)  # one host's devices (on a TPU slice: a one-host topology)
    auto = {}  # field -> (candidates, the programs they size, what a size counts, the size when none is planned)
    if config.rollout.wave_rows == WAVE_AUTO:
        auto["waves"] = (wave_candidates(config, target), {"rollout"}, "rows per wave", 0)
    if config.train.micro_batch_size == AUTO:
        cands = micro_batch_candidates(config.rl.mini_batch_size, batch_divisor(mesh), hosts)
        if not cands:
            raise PlanConfigError(f"config.rl.mini_batch_size: train.micro_batch_size = -1 needs a multiple of "
                                  f"{math.lcm(batch_divisor(mesh), hosts)} on {target.spec} "
                                  f"(got {config.rl.mini_batch_size})")
        auto["micro_batch"] = (cands, MICRO_PROGRAMS, "rows per micro-batch", cands[-1])
    if config.analysis.batch_size == AUTO:
        cands = wave_candidates(config, target)
        auto["analysis_batch"] = (cands, {"analysis"} if config.analysis.analyzer == "self" else set(),
                                  "rows per analysis call", cands[-1])
    residency = Residency.of(config)
    trees = tree_bytes(model_cfg, mesh, train_config(config, micro_batch_size=1),
                       dataclasses.replace(sampler_spec(config), devices=tuple(sampler_devices)))
    limit = (1 - HEADROOM) * target.chip.hbm

    def fits_in_its_phases(p: ProgramPlan) -> bool:
        """The program fits, and so does it beside the trees its fullest phase keeps resident."""
        phases, args = program_phases(p.name)
        beside = max((sum(trees[t] for t in residency.trees(ph) if t not in args) for ph in phases), default=0)
        return p.fits and p.total + beside <= limit

    for field, (_, _, _, fallback) in auto.items():  # each choice compiles only its programs: the others' size
        config = with_key(config, CHOICE_KEYS[field], fallback)  # is only a placeholder meanwhile
    choices: dict[str, SizeChoice] = {}
    done: dict[str, ProgramPlan] = {}
    sizes = {}
    for field, (cands, group, what, fallback) in auto.items():
        wanted = {n for n in group if _wanted(names, n)}
        sizes[field] = fallback
        if wanted:
            choices[field], plans = choose_largest(cands, _measured(
                config, CHOICE_KEYS[field], target, model_cfg, mesh, wanted, progress, sampler_devices, what),
                fits_in_its_phases)
            sizes[field] = choices[field].rows or min(choices[field].tried)
            done.update({p.name: p for p in plans[sizes[field]]})
    for field, size in sizes.items():
        config = with_key(config, CHOICE_KEYS[field], size)
    programs = []
    for p in run_programs(config, model_cfg, mesh, names, hosts=hosts, sampler_devices=sampler_devices):
        if p.name in done:
            programs.append(done[p.name])
        else:
            if progress is not None:
                progress(p.name)
            programs.append(measure(p, target))
        if stop_at_misfit and not programs[-1].fits:
            break
    model = {"layers": model_cfg.num_layers, "hidden": model_cfg.hidden_size, "vocab": model_cfg.vocab_size,
             "dtype": model_cfg.dtype, "param_dtype": model_cfg.param_dtype, "remat": model_cfg.remat,
             "attention": getattr(model_cfg, "attention", "reference")}
    peaks = phase_peaks(residency, trees, {p.name: p.total for p in programs})
    phases = {ph: PhasePeak(peak, prog, residency.trees(ph)) for ph, (peak, prog) in peaks.items()
              if prog is not None or names is None}
    return Plan(target.spec, target.num_devices, hosts, dict(mesh.shape), model, target.approximate_memory, programs,
                buckets=sampler_buckets(config, mesh, hosts), phases=phases, trees=trees, hbm=target.chip.hbm,
                **choices)


# The config keys that size each program (the misfit line names them).
KNOBS = {
    "train_step": "train.micro_batch_size, model.remat, rollout.max_prompt_tokens / max_teacher_prompt_tokens / "
                  "max_response_tokens",
    "sft_step": "stage1.sft_micro_batch_size, model.remat, analysis.max_prompt_tokens, stage1.max_answer_tokens",
    "logprobs": "train.micro_batch_size, rollout.max_prompt_tokens / max_response_tokens",
    "teacher_logprobs": "train.micro_batch_size, rollout.max_teacher_prompt_tokens",
    "rollout": "rollout.wave_rows, sampler.tensor_parallel, sampler.prefill_scratch_mb, rollout.max_prompt_tokens",
    "analysis": "analysis.batch_size, sampler.tensor_parallel, sampler.prefill_scratch_mb, analysis.max_prompt_tokens "
                "/ max_new_tokens",
}


def misfit_message(plan: Plan) -> str | None:
    """One line naming the first program, else the first phase, that does not fit, its bytes and
    the knobs; None when all fit."""
    for p in plan.programs:
        if not p.fits:
            knobs = KNOBS.get(p.name) or KNOBS.get(p.name.rsplit("_", 1)[0], "")
            return (f"{p.name} does not fit {plan.target}: {_gb(p.total)} GB per device of {_gb(p.hbm)} GB "
                    f"({HEADROOM:.0%} headroom kept); turn {knobs}, mesh.fsdp or model.dtype / model.param_dtype")
    for phase in PHASES:
        if phase in plan.phases and not plan.phase_fits(phase):
            ph = plan.phases[phase]
            knobs = KNOBS.get(ph.program) or KNOBS.get((ph.program or "").rsplit("_", 1)[0], "")
            resident = ", ".join(f"{t} {_gb(plan.trees[t])}" for t in ph.resident)
            return (f"phase {phase} does not fit {plan.target}: {_gb(ph.peak)} GB per device of {_gb(plan.hbm)} GB "
                    f"({HEADROOM:.0%} headroom kept): {ph.program or 'no program'} with the resident {resident}; "
                    f"turn {knobs + ', ' if knobs else ''}mesh.fsdp, low_memory (the KL reference read back per "
                    f"update) or model.param_dtype")
    return None


def _gb(x: float) -> str:
    return f"{x / GB:.2f}"


def format_plan(plan: Plan) -> str:
    """The plan as a text table and the verdict line ``fits: yes|no`` (last)."""
    mesh = " x ".join(f"{k}={v}" for k, v in plan.mesh.items())
    hbm = plan.programs[0].hbm if plan.programs else 0.0
    lines = [f"target {plan.target}: {plan.devices} devices on {plan.hosts} host(s), mesh {mesh}, "
             f"{_gb(hbm)} GB per device",
             f"model: {plan.model}"]
    if plan.approximate_memory:
        lines.append("memory figures come from XLA:CPU standing in for the target: approximate")
    head = (f"{'program':18s} {'args':>8s} {'temp':>8s} {'out':>8s} {'total':>8s} {'use':>5s} {'fits':>4s} "
            f"{'TFLOP':>9s} {'HBM GB':>9s} {'AG GB':>8s} {'RS GB':>8s} {'AR GB':>8s} {'A2A GB':>7s} {'CP GB':>7s} "
            f"{'roofline':>9s} {'MFU':>5s} {'compile':>7s}")
    lines.append("per device:")
    lines.append(head)
    for p in plan.programs:
        c = p.collective_bytes
        lines.append(
            f"{p.name:18s} {_gb(p.argument):>8s} {_gb(p.temp):>8s} {_gb(p.output - p.alias):>8s} {_gb(p.total):>8s} "
            f"{p.total / p.hbm:>5.0%} {'yes' if p.fits else 'NO':>4s} {p.flops / 1e12:>9.1f} {_gb(p.hbm_bytes):>9s} "
            f"{_gb(c['all-gather']):>8s} {_gb(c['reduce-scatter']):>8s} {_gb(c['all-reduce']):>8s} "
            f"{_gb(c['all-to-all']):>7s} {_gb(c['collective-permute']):>7s} {p.roofline_s:>8.2f}s {p.mfu:>5.0%} "
            f"{p.compile_s:>6.0f}s")
    for p in plan.programs:
        lines.append(f"  {p.name}: {p.note}" + (f" ({len(p.unknown_loops)} data-dependent loop(s))"
                                                if p.unknown_loops else "")
                     + (f"; {len(p.uncosted_kernels)} kernel(s) declare no cost, their FLOPs are not counted"
                        f" (the MFU is a floor): {', '.join(sorted({k.rsplit('.', 1)[0] for k in p.uncosted_kernels}))}"
                        if p.uncosted_kernels else "")
                     + (f"; XLA refused to compile it: {p.error}" if p.error else ""))
    if plan.phases:
        lines.append("per device and phase: the phase's largest program plus the trees that stay resident "
                     "(seed_jax/pipeline/residency.py); resident GB: "
                     + ", ".join(f"{t} {_gb(b)}" for t, b in plan.trees.items()))
        lines.append(f"{'phase':12s} {'peak GB':>8s} {'use':>5s} {'fits':>4s}  {'program':18s} resident")
        for phase in PHASES:
            if phase in plan.phases:
                ph = plan.phases[phase]
                lines.append(f"{phase:12s} {_gb(ph.peak):>8s} {ph.peak / plan.hbm if plan.hbm else 0:>5.0%} "
                             f"{'yes' if plan.phase_fits(phase) else 'NO':>4s}  {ph.program or '-':18s} "
                             f"{', '.join(ph.resident) or '-'}")
    for name, pairs in plan.buckets.items():
        rows, lens = sorted({r for r, _ in pairs}), sorted({n for _, n in pairs})
        lines.append(f"{name} sampler buckets the run may compile: rows {rows} x prompt lengths {lens[0]}..{lens[-1]} "
                     f"({len(lens)}) = {len(pairs)} (prefill, decode) pairs (the plan compiles the largest)")
    count, seconds = compile_estimate(plan)
    if count:
        lines.append(f"the run compiles about {count} programs, about {seconds / 60:.1f} min of compiling (each "
                     f"sampler bucket timed as the planned largest; the persistent cache spares a re-run)")
    for field, key in CHOICE_KEYS.items():
        choice = getattr(plan, field)
        if choice is not None:
            tried = ", ".join(f"{r} {'fits' if ok else 'does not'}" for r, ok in choice.tried.items())
            what = {"waves": "wave", "micro_batch": "micro-batch", "analysis_batch": "analysis batch"}[field]
            lines.append(f"{key} = -1: the plan's {what} is {choice.rows or 'none'} "
                         f"rows (tried: {tried})" + ("" if choice.rows else "; the smallest one is shown"))
    if not plan.fits:
        lines.append(misfit_message(plan))
    lines.append(f"fits: {'yes' if plan.fits else 'no'}")
    return "\n".join(lines)


def compile_estimate(plan: Plan) -> tuple[int, float]:
    """``(programs, seconds)`` the run compiles: each planned program once, except a sampler's
    prefill and decode (``<label>_prefill`` / ``<label>_decode``), once per bucket of
    ``plan.buckets[label]``; seconds = sum of count x the plan's own measured compile time of that
    program (a bucket's time taken as the largest bucket's: an upper estimate)."""
    count, seconds = 0, 0.0
    for p in plan.programs:
        label = p.name.rsplit("_", 1)[0]
        n = len(plan.buckets.get(label, [])) if p.name.endswith(("_prefill", "_decode")) else 1
        n = max(n, 1)
        count += n
        seconds += n * p.compile_s
    return count, seconds


def write_json(plan: Plan, path: str | Path) -> None:
    Path(path).write_text(json.dumps(plan.to_json(), indent=2) + "\n")
