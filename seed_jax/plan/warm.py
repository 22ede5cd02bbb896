"""Fill the persistent compilation cache with a run's programs ahead of the run (``python -m seed_jax.plan --warm``).

JAX finds a compiled program in its persistent cache (`jax._src.cache_key`) only when the run's
compile has the same key: the same lowered module (the same jitted function, static arguments,
shapes, dtypes, shardings and donation; debug locations stripped), the same devices, the same
compile options and the same XLA flags (``XLA_FLAGS``, ``LIBTPU_INIT_ARGS``). So the caller first
sets XLA up as the run does (`seed_jax.pipeline.runtime.setup_xla`: the run's flags and its cache
directory, ``<workdir>/xla_cache`` unless ``xla.cache_dir``), on the devices the run will use,
and `warm_run` then lowers the run's own jitted functions with the run's arguments:

- the sampler's prefill and decode chunk (`seed_jax.sampling.lower_programs`: `sampling._prefill`,
  `sampling._decode_chunk`) for every ``(rows, prompt)`` bucket of `sampler_buckets`, laid out as
  the run's sampler lays itself out on one host's devices (``sampler.backend``; ``auto``: the
  unrolled backend on one CPU device), with the static sampling key of each caller: the
  rollouts (collect, RL, eval) sample with ``rollout.*``, the self-analysis greedily
  (``temperature = 0``) with `generate`'s default chunk of `ANALYSIS_CHUNK` steps; and the
  run's number of EOS ids (the model's and the tokenizer's: a shape);
- the train step, the SFT step and the log-prob passes at the plan's shapes (`run_programs`: the
  longest prompt / response buckets the config allows, one mini- / micro-batch).

Sizes left at -1 are resolved as the run resolves them: by the plan on accelerators (`plan_run`,
whose compiles are the run's own pre-flight compiles, so they are warmed too), else by
`resolve_without_plan`.

Not warmed (`NOT_WARMED`): the train step, log-prob passes and SFT step at shorter length
buckets or fewer rows than the plan's (they follow each update's data: a run compiles those on
first use), sampler calls with more rows than `sampler_buckets` holds (a stage-1 or eval call
larger than an RL wave), and the small layout programs (the sampler copy's cast / unstack, the
random initialisation, the state's sharded creation), each compiled in well under a second.
JAX writes cache entries from process 0 only: on several hosts every host runs ``--warm``
together, as they run the launch.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

import jax

from seed_jax.models.tokenizer import load_tokenizer
from seed_jax.pipeline.auto_sizes import resolve_without_plan
from seed_jax.pipeline.runtime import train_config
from seed_jax.plan.analysis import CHOICE_KEYS, model_config_of, plan_run, target_hosts, target_mesh
from seed_jax.plan.programs import Program, run_programs, sampler_buckets, sampler_programs
from seed_jax.plan.targets import Target, host_devices_of
from seed_jax.sampling import SamplingParams
from seed_jax.train.mesh import batch_divisor

ANALYSIS_CHUNK = 32  # `seed_jax.sampling.generate`'s default ``chunk``: the self-analysis passes none
WARMED_STEPS = ("train_step", "sft_step", "logprobs", "teacher_logprobs")
NOT_WARMED = ("train_step / logprobs / teacher_logprobs / sft_step at shorter length buckets or fewer rows than the "
              "plan's (they follow each update's data)",
              "sampler calls of more rows than an RL wave (a larger stage-1 or eval call)",
              "the sampler copy's cast / unstack, the random initialisation and the sharded state creation "
              "(small layout programs)")


@dataclasses.dataclass
class WarmReport:
    """``compiled``: the programs compiled (a sampler's with its bucket); ``seconds``: wall time of
    the compiles; ``plan_compiled``: programs the plan compiled to choose sizes left at -1."""

    compiled: list[str]
    seconds: float
    plan_compiled: int = 0
    not_warmed: tuple[str, ...] = NOT_WARMED


def run_sampling(config, label: str) -> SamplingParams:
    """The `SamplingParams` the run's ``label`` sampler (``rollout`` | ``analysis``) passes to
    `generate` (its static part, `sampling.program_key`, picks the programs): the rollout loop's
    `rollout_settings`; the self-analyzer's greedy call (`seed_jax.rollout.analyzer`)."""
    r = config.rollout
    if label == "rollout":
        return SamplingParams(r.max_response_tokens, r.temperature, r.top_p, r.top_k,
                              min(r.chunk, r.max_response_tokens))
    n = config.analysis.max_new_tokens
    return SamplingParams(n, 0.0, 1.0, 0, min(ANALYSIS_CHUNK, n))


def eos_count(config, model_cfg) -> int:
    """How many EOS ids `generate` stops on (a shape of its programs): the model's and the tokenizer's."""
    m = config.model
    tok = load_tokenizer(m.tokenizer or m.path)
    return max(1, len(set(model_cfg.eos_token_ids) | ({tok.eos_token_id} - {None})))


def resolve_sizes(config, target: Target, progress=None) -> int:
    """Set the sizes left at -1 in ``config`` as the run will (module docstring); returns how many
    programs the plan compiled for that (0 without a plan)."""
    on_accelerator = target.devices[0].platform != "cpu"  # the launch plans (--plan=auto) on TPU / GPU only
    if on_accelerator and any(config[k.split(".")[0]][k.split(".")[1]] == -1 for k in CHOICE_KEYS.values()):
        plan = plan_run(config, target, progress=progress)
        for field, key in CHOICE_KEYS.items():
            choice = getattr(plan, field)
            if choice is not None and choice.rows:
                section, leaf = key.split(".")
                config[section][leaf] = choice.rows
        return len(plan.programs)
    mesh = target_mesh(config, target)
    hosts = target_hosts(target)
    resolve_without_plan(config, batch_divisor(mesh), hosts,
                         len(host_devices_of(target)) // config.sampler.tensor_parallel)
    return 0


def warm_programs(config, target: Target) -> list[Program]:
    """The programs `warm_run` compiles (module docstring), sizes already resolved."""
    model_cfg = model_config_of(config)
    mesh = target_mesh(config, target)
    hosts = target_hosts(target)
    devices = host_devices_of(target)
    out = run_programs(config, model_cfg, mesh, set(WARMED_STEPS), hosts=hosts, sampler_devices=devices)
    cfg = train_config(config).apply_to(model_cfg)
    s = config.sampler
    n_eos = eos_count(config, model_cfg)
    for label, pairs in sampler_buckets(config, mesh, hosts).items():
        sp = run_sampling(config, label)
        for rows, prompt in pairs:
            out += sampler_programs(f"{label}[{rows}x{prompt}]", cfg, rows, prompt, sp, devices, backend=s.backend,
                                    tensor_parallel=s.tensor_parallel,
                                    scratch_bytes=int(s.prefill_scratch_mb) << 20, eos_count=n_eos)
    return out


def warm_run(config, target: Target, progress: Callable[[str], None] | None = None) -> WarmReport:
    """Compile every program of `warm_programs` for ``target`` (into the persistent cache the
    caller set up; each is written whatever its compile time). ``config`` gets the run's sizes."""
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)  # keep every warmed program
    t0 = time.time()
    planned = resolve_sizes(config, target, progress)
    compiled = []
    for p in warm_programs(config, target):
        if progress is not None:
            progress(p.name)
        p.lower().compile()
        compiled.append(p.name)
    return WarmReport(compiled, time.time() - t0, planned)


def format_warm(report: WarmReport, cache_dir: str) -> str:
    """What was compiled into ``cache_dir``, how long it took, and what was not warmed."""
    groups: dict[str, int] = {}
    for name in report.compiled:
        key = name.split("[", 1)[0] + ("_" + name.rsplit("_", 1)[1] if "[" in name else "")
        groups[key] = groups.get(key, 0) + 1
    lines = [f"warmed {len(report.compiled)} programs in {report.seconds:.1f}s into {cache_dir}: "
             + ", ".join(f"{k} x{n}" if n > 1 else k for k, n in groups.items())]
    if report.plan_compiled:
        lines.append(f"(the plan compiled {report.plan_compiled} programs to choose the sizes left at -1; "
                     f"the run's own plan finds them in the cache)")
    lines.append("not warmed (compiled by the run on first use): " + "; ".join(report.not_warmed))
    return "\n".join(lines)
