"""The programs a run compiles, as (jitted function, abstract arguments) pairs on a target mesh.

Nothing is materialised: parameters, optimizer state and batches are ``jax.ShapeDtypeStruct``s
with the shardings the run gives them, so ``fn.lower(*args).compile()`` builds the same
executable the run would, for any model size, in a few GB of host memory.

Shapes are the largest the run's config allows (every length is rounded up to its bucket, as the
batch builders do): prompt ``P = round_up(rollout.max_prompt_tokens)``, teacher prompt
``Pt = round_up(rollout.max_teacher_prompt_tokens)``, response ``R = round_up(max_response_tokens)``;
a train step takes one mini-batch (``rl.mini_batch_size`` rows, micro-batched by
``train.micro_batch_size``); the log-prob passes take one micro-batch; the rollout sampler takes
one host's share of ``rl.tasks_per_update * rollout.group_size`` rows, at most one wave
(``rollout.wave_rows``; a power of two), the self-analysis sampler ``analysis.batch_size`` rows
of ``analysis.max_prompt_tokens``, both on one host's devices (`host_devices`: each host samples
its own share on its own devices); the SFT step takes
``stage1.sft_batch_size`` rows of ``analysis.max_prompt_tokens + stage1.max_answer_tokens``.

The sampler and the log-prob passes go through `sampler_programs` and `logprob_program`, the
one place that knows how those programs are built.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding

from seed_jax import sampling
from seed_jax.buckets import round_to_multiple, round_up, row_bucket
from seed_jax.models.config import ModelConfig
from seed_jax.pipeline.runtime import sft_rows, sft_train_config, train_config
from seed_jax.sampling import SamplingParams
from seed_jax.train.batch import SeedBatch, SftBatch
from seed_jax.train.config import TrainConfig
from seed_jax.train.logprobs import make_logprob_pass, param_shardings
from seed_jax.train.mesh import batch_divisor, batch_sharding
from seed_jax.train.sft import make_sft_step
from seed_jax.train.state import abstract_train_state, state_shardings
from seed_jax.train.step import make_train_step


class PlanConfigError(ValueError):
    """The run config cannot be planned (the message names the key)."""


@dataclasses.dataclass
class Program:
    """One compiled program of a run: ``fn.lower(*args)`` (or an already ``lowered`` program, as a
    builder that lowers its own programs returns them); ``note`` says what it stands for."""

    name: str
    fn: Callable | None
    args: tuple
    note: str = ""
    unknown_trips: int = 1  # trips of a data-dependent loop (a decode chunk: its length)
    lowered: object = None

    def lower(self):
        return self.lowered if self.lowered is not None else self.fn.lower(*self.args)


def sds(shape, dtype, sharding) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(tuple(shape), jnp.dtype(dtype), sharding=sharding)


def with_sharding(tree, shardings):
    """``ShapeDtypeStruct``s of ``tree`` carrying ``shardings`` (a tree or one sharding)."""
    if not isinstance(shardings, NamedSharding):
        return jax.tree.map(lambda a, s: sds(a.shape, a.dtype, s), tree, shardings)
    return jax.tree.map(lambda a: sds(a.shape, a.dtype, shardings), tree)


@dataclasses.dataclass(frozen=True)
class Shapes:
    """The static lengths and row counts of a run's programs (module docstring)."""

    prompt: int
    teacher_prompt: int
    response: int
    mini_batch: int
    micro_batch: int
    rollout_rows: int
    analysis_rows: int
    analysis_prompt: int
    analysis_new: int
    sft_rows: int
    sft_answer: int

    @classmethod
    def of(cls, config, hosts: int = 1) -> Shapes:
        """The shapes of ``config``'s programs on ``hosts`` hosts (the rollout rows are one host's share)."""
        r, micro = config.rollout, config.train.micro_batch_size
        return cls(prompt=round_up(r.max_prompt_tokens), teacher_prompt=round_up(r.max_teacher_prompt_tokens),
                   response=round_up(r.max_response_tokens),
                   mini_batch=round_to_multiple(config.rl.mini_batch_size, micro), micro_batch=micro,
                   rollout_rows=row_bucket(host_rollout_rows(config, hosts)),
                   analysis_rows=row_bucket(config.analysis.batch_size),
                   analysis_prompt=round_up(config.analysis.max_prompt_tokens),
                   analysis_new=config.analysis.max_new_tokens, sft_rows=config.stage1.sft_batch_size,
                   sft_answer=round_up(config.stage1.max_answer_tokens))


def host_rollout_rows(config, hosts: int = 1) -> int:
    """Rows of one host's largest sampler call in the rollouts: its share of an update's
    ``rl.tasks_per_update x rollout.group_size`` episodes (the first hosts take one task more),
    at most ``rollout.wave_rows`` (when > 0)."""
    tasks = -(-config.rl.tasks_per_update // hosts)
    rows = tasks * config.rollout.group_size
    return min(rows, config.rollout.wave_rows) if config.rollout.wave_rows > 0 else rows


def host_devices(mesh) -> tuple:
    """The devices of the mesh's first host (all of them on one host): where that host's sampler
    lays its rows."""
    devices = list(mesh.devices.flat)
    first = getattr(devices[0], "process_index", 0)
    return tuple(d for d in devices if getattr(d, "process_index", 0) == first)


def _check_rows(key: str, rows: int, mesh) -> None:
    div = batch_divisor(mesh)
    if rows % div:
        raise PlanConfigError(f"config.{key} ({rows}) must be a multiple of the data x fsdp mesh size ({div})")


def seed_batch(tc: TrainConfig, rows: int, s: Shapes, mesh) -> SeedBatch:
    """The abstract `SeedBatch` of one mini-batch (the fields ``tc`` needs)."""
    sh = batch_sharding(mesh)
    B, R = rows, s.response
    ids = lambda n: sds((B, n + R), jnp.int32, sh)  # noqa: E731
    per_tok = sds((B, R), jnp.float32, sh)
    teacher = tc.use_teacher and not tc.teacher_from_old
    return SeedBatch(student_ids=ids(s.prompt), student_mask=ids(s.prompt), response_mask=per_tok,
                     advantages=per_tok, has_skill=sds((B,), jnp.float32, sh), old_logp=per_tok,
                     ref_logp=per_tok if tc.c_kl > 0 else None,
                     teacher_ids=ids(s.teacher_prompt) if teacher else None,
                     teacher_mask=ids(s.teacher_prompt) if teacher else None,
                     teacher_logp=per_tok if tc.use_teacher and tc.teacher_from_old else None,
                     opd_mask=per_tok if tc.use_teacher else None)


def abstract_state(model_cfg: ModelConfig, tc: TrainConfig, mesh):
    """The abstract `TrainState` with the shardings the steps give it (`state_shardings`)."""
    state = abstract_train_state(model_cfg, tc)
    return with_sharding(state, state_shardings(state, mesh))


def train_program(model_cfg: ModelConfig, tc: TrainConfig, s: Shapes, mesh) -> Program:
    """The SEED train step on one mini-batch."""
    _check_rows("train.micro_batch_size", s.micro_batch, mesh)
    state = abstract_state(model_cfg, tc, mesh)
    note = f"{s.mini_batch} rows x {s.prompt}+{s.response} tokens, micro-batches of {s.micro_batch}"
    return Program("train_step", make_train_step(model_cfg, tc, mesh), (state, seed_batch(tc, s.mini_batch, s, mesh)),
                   note)


def sft_program(model_cfg: ModelConfig, config, s: Shapes, mesh) -> Program:
    """The stage-1 SFT step on one batch, its rows filled to the mesh's row shards as the run does
    (`sft_train_config`, `sft_rows`)."""
    tc = sft_train_config(config, batch_divisor(mesh))
    sh = batch_sharding(mesh)
    B, L = sft_rows(config, tc), s.analysis_prompt + s.sft_answer
    batch = SftBatch(sds((B, L), jnp.int32, sh), sds((B, L), jnp.int32, sh), sds((B, s.sft_answer), jnp.float32, sh))
    note = (f"{B} rows ({s.sft_rows} examples) x {s.analysis_prompt}+{s.sft_answer} tokens, "
            f"micro-batches of {tc.micro_batch_size}")
    return Program("sft_step", make_sft_step(model_cfg, tc, mesh), (abstract_state(model_cfg, tc, mesh), batch), note)


def logprob_program(name: str, model_cfg: ModelConfig, tc: TrainConfig, rows: int, prompt_len: int, resp_len: int,
                    mesh, hosts: int = 1) -> Program:
    """One jitted log-prob pass (old / ref / teacher-from-old) of ``rows`` rows, as the RL stage
    runs it (`seed_jax.train.logprobs.make_logprob_pass`) under the mesh, on every host together:
    parameters by the rules, rows split."""
    cfg = tc.apply_to(model_cfg)
    params = abstract_train_state(model_cfg, tc).params
    _check_rows("train.micro_batch_size", rows, mesh)
    # no logits chunk, as the run's passes (`compute_logprobs`) make it: the same program
    fn = make_logprob_pass(cfg, prompt_len, resp_len, None, mesh, tc.temperature)
    p = with_sharding(params, param_shardings(cfg, mesh))
    ids = sds((rows, prompt_len + resp_len), jnp.int32, batch_sharding(mesh))
    note = f"{rows} rows x {prompt_len}+{resp_len} tokens" + (f" ({hosts} hosts together)" if hosts > 1 else "")
    return Program(name, fn, (p, ids, ids), note)


def sampler_programs(label: str, model_cfg: ModelConfig, rows: int, prompt_len: int, sp: SamplingParams,
                     devices, backend: str = "scan", tensor_parallel: int = 1, scratch_bytes: int = 1 << 30,
                     eos_count: int = 1) -> list[Program]:
    """Prefill and one decode chunk of the sampler (`seed_jax.sampling.lower_programs`) for ``rows``
    prompts of ``prompt_len`` tokens, laid out as the run's sampler lays itself out over
    ``devices`` (one host's: `host_devices`; `sampling.resolve_layout`: ``scan`` puts rows over
    the devices, the sampler copy replicated or split by heads over ``tensor_parallel`` devices,
    the cache created sharded; ``eos_count``: the EOS ids it stops on)."""
    spec = sampling.SamplerSpec(backend=backend, tensor_parallel=tensor_parallel,
                                prefill_scratch_bytes=scratch_bytes, devices=tuple(devices))
    layout = sampling.resolve_layout(spec)
    rows = round_to_multiple(rows, layout.row_shards)  # as `generate` fills its rows (fewer rows than shards too)
    lowered = sampling.lower_programs(model_cfg, layout, rows, prompt_len, sp, eos_count)
    note = f"{rows} rows x {prompt_len} prompt + {sp.max_new_tokens} new tokens ({backend} sampler)"
    return [Program(f"{label}_prefill", None, (), note, lowered=lowered["prefill"]),
            Program(f"{label}_decode", None, (), f"{note}; one chunk of {sp.chunk} steps",
                    unknown_trips=sp.chunk, lowered=lowered["decode"])]


def run_programs(config, model_cfg: ModelConfig, mesh, names: set[str] | None = None, hosts: int = 1,
                 sampler_devices=None) -> list[Program]:
    """Every program of a run config (module docstring), or those whose name is in ``names``;
    ``hosts``: the processes the mesh's devices belong to; ``sampler_devices``: one host's
    devices for the sampler programs (default `host_devices` of the mesh)."""
    tc = train_config(config)
    s = Shapes.of(config, hosts)
    def want(n: str) -> bool:  # a program, its group (rollout: prefill and decode), or a group with a member named
        return names is None or n in names or n.rsplit("_", 1)[0] in names or any(m.startswith(n + "_") for m in names)

    out = []
    if want("train_step"):
        out.append(train_program(model_cfg, tc, s, mesh))
    if want("sft_step"):
        out.append(sft_program(model_cfg, config, s, mesh))
    if want("logprobs"):
        out.append(logprob_program("logprobs", model_cfg, tc, s.micro_batch, s.prompt, s.response, mesh, hosts))
    if want("teacher_logprobs"):
        out.append(logprob_program("teacher_logprobs", model_cfg, tc, s.micro_batch, s.teacher_prompt, s.response,
                                   mesh, hosts))
    cfg = tc.apply_to(model_cfg)
    devices = sampler_devices or host_devices(mesh)
    r = config.rollout
    backend = "scan" if config.sampler.backend == "auto" else config.sampler.backend
    sampler = dict(backend=backend, tensor_parallel=config.sampler.tensor_parallel,
                   scratch_bytes=int(config.sampler.prefill_scratch_mb) << 20)
    if want("rollout"):
        sp = SamplingParams(r.max_response_tokens, r.temperature, r.top_p, r.top_k, min(r.chunk, r.max_response_tokens))
        out += [p for p in sampler_programs("rollout", cfg, s.rollout_rows, s.prompt, sp, devices,
                                            **sampler)
                if want(p.name)]
    if want("analysis") and config.analysis.analyzer == "self":
        sp = SamplingParams(s.analysis_new, r.temperature, r.top_p, r.top_k, min(r.chunk, s.analysis_new))
        out += [p for p in sampler_programs("analysis", cfg, s.analysis_rows, s.analysis_prompt, sp, devices,
                                    **sampler)
                if want(p.name)]
    return out


def sampler_buckets(config, mesh, hosts: int = 1) -> dict[str, list[tuple[int, int]]]:
    """Every ``(rows, prompt_len)`` bucket the run's sampler may compile (`sampling.shape_buckets`,
    two programs each: prefill and decode chunk): ``rollout`` for calls of at most one wave
    (`host_rollout_rows`) of prompts up to ``rollout.max_prompt_tokens``, ``analysis``
    (self-analysis only) for ``analysis.batch_size`` prompts up to ``analysis.max_prompt_tokens``;
    rows laid out over one host's devices (`host_devices`) as the sampler lays them."""
    backend = "scan" if config.sampler.backend == "auto" else config.sampler.backend
    layout = sampling.resolve_layout(sampling.SamplerSpec(backend=backend, tensor_parallel=config.sampler.tensor_parallel,
                                                          devices=host_devices(mesh)))
    out = {"rollout": sampling.shape_buckets(host_rollout_rows(config, hosts), config.rollout.max_prompt_tokens, layout)}
    if config.analysis.analyzer == "self":
        out["analysis"] = sampling.shape_buckets(config.analysis.batch_size, config.analysis.max_prompt_tokens, layout)
    return out


PROGRAM_NAMES = ("train_step", "sft_step", "logprobs", "teacher_logprobs", "rollout_prefill", "rollout_decode",
                 "analysis_prefill", "analysis_decode")

__all__ = ["Program", "Shapes", "PlanConfigError", "run_programs", "PROGRAM_NAMES"]
