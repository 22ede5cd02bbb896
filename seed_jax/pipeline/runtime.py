"""Turn a run config into live objects: XLA setup, model + tokenizer, TrainConfig, env pool."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import jax

from seed_jax.buckets import round_to_multiple
from seed_jax.models import Model, ModelConfig, load_model, load_tokenizer, save_model, save_tokenizer
from seed_jax.models.decoder import init_params
from seed_jax.paths import local_copy, run_path, staged_dir
from seed_jax.pipeline.methods import switches
from seed_jax.rollout.loop import RolloutSettings
from seed_jax.rollout.policy import Policy
from seed_jax.rollout.pool import open_env_pool
from seed_jax.sampling import SamplerSpec, SamplingParams, local_replica
from seed_jax.train import xla_setup
from seed_jax.train.config import ConfigError, TrainConfig
from seed_jax.train.logprobs import param_shardings

# set by train_config below (the run's train.warmup_updates gives warmup_steps)
_DERIVED = frozenset({"warmup_steps", "total_steps", "schedule_unit", "remat", "compute_dtype", "param_dtype",
                      "temperature"})


def setup_xla(config, workdir) -> dict:
    """XLA flags for the installed accelerators and the persistent compilation cache
    (``xla.cache_dir``: '' = ``<workdir>/xla_cache``, 'off' = none); before any JAX work."""
    d = config.xla.cache_dir if "xla" in config else ""
    return xla_setup.configure(None if d == "off" else run_path(d or run_path(workdir) / "xla_cache"))


def train_config(config, **overrides) -> TrainConfig:
    """The RL TrainConfig of a run config: every key of ``config.train`` (see `RUN_TRAIN_FIELDS`)
    plus the derived fields: the schedule counts RL updates (``schedule_unit = "update"``,
    ``warmup_steps = train.warmup_updates``, ``total_steps = rl.num_updates``, at least one more
    than the warm-up), ``lambda_opd = 0`` for methods without OPD, remat / dtypes from
    ``config.model``, and the log-prob ``temperature`` = ``rollout.temperature`` (the policy the
    rollouts were sampled from)."""
    kw = config.train.to_dict()
    warmup = kw.pop("warmup_updates", 0)
    unknown = sorted((set(kw) - {f.name for f in dataclasses.fields(TrainConfig)}) | (set(kw) & _DERIVED))
    if unknown:
        raise ConfigError(f"config.train.{unknown[0]}: not a TrainConfig field a run sets "
                          f"(derived: {sorted(_DERIVED)})")
    kw.update(schedule_unit="update", warmup_steps=warmup, total_steps=max(config.rl.num_updates, warmup + 1),
              temperature=float(config.rollout.temperature), **_model_fields(config))
    if not switches(config).opd:
        kw["lambda_opd"] = 0.0
    kw.update(overrides)
    return TrainConfig(**kw)


def sft_train_config(config, row_shards: int = 1) -> TrainConfig:
    """The stage-1 SFT TrainConfig: plain cross-entropy (no entropy, KL or OPD term) at
    ``stage1.sft_lr``, with the run's weight decay and gradient clip. Micro-batches of
    ``stage1.sft_micro_batch_size`` rows rounded up to a multiple of ``row_shards`` (the mesh's
    `batch_divisor`): the paper's 8-row SFT batch on a 16-chip slice runs as 16 rows, 8 of them
    masked (`sft_rows`), the same update. Remat: ``stage1.sft_remat`` ('' = ``model.remat``)."""
    s = config.stage1
    fields = _model_fields(config)
    if s.get("sft_remat"):
        fields["remat"] = s.sft_remat
    return TrainConfig(lr=s.sft_lr, weight_decay=config.train.weight_decay, grad_clip=config.train.grad_clip,
                       c_ent=0.0, c_kl=0.0, lambda_opd=0.0,
                       micro_batch_size=round_to_multiple(s.sft_micro_batch_size, row_shards), **fields)


def sft_rows(config, tc: TrainConfig) -> int:
    """Rows of one stage-1 SFT step: ``stage1.sft_batch_size`` examples, filled with masked rows to a
    multiple of ``tc``'s micro-batch (`sft_train_config`). Masked rows add nothing to the token sums
    of the loss, so the update is that of the examples alone."""
    return round_to_multiple(config.stage1.sft_batch_size, tc.micro_batch_size)


def _model_fields(config) -> dict:
    """The TrainConfig fields that ``config.model`` sets (applied to the model by `TrainConfig.apply_to`)."""
    m = config.model
    return dict(remat=m.remat, compute_dtype=m.dtype, param_dtype=m.param_dtype)


def load_policy(config, path: str | Path | None = None, mesh=None) -> Policy:
    """The `Policy` of ``path`` (a stage's saved model) or of the config's base model.

    With a ``mesh`` the parameters are loaded straight into the mesh's parameter layout
    (`seed_jax.train.logprobs.param_shardings`): each host reads only the slices its devices
    hold and no device holds more than its share (`seed_jax.models.load_model`); a random
    model is initialised sharded. Without one: whole arrays on the default device.
    """
    m = config.model

    def shardings(cfg: ModelConfig):
        return param_shardings(cfg, mesh) if mesh is not None else None

    if path is not None:
        path = local_copy(path)  # a gs:// run directory's model, downloaded once
    if path is None and m.random_init:
        tok = load_tokenizer(m.tokenizer)
        cfg = random_model_config(config, tok)
        init = jax.jit(lambda k: init_params(cfg, k), out_shardings=shardings(cfg))
        return Policy.of(Model(cfg, init(jax.random.PRNGKey(config.seed)), "random"), tok)
    src = m.path if path is None else path
    model = load_model(src, dtype=m.dtype, param_dtype=m.param_dtype, remat=m.remat,
                       shardings=shardings if mesh is not None else None)
    return Policy.of(_with_attention(model, m), load_tokenizer(path if path is not None else (m.tokenizer or m.path)))


def load_policy_tokenizer(config):
    """The tokenizer `load_policy` gives the config's base model (no weights loaded)."""
    m = config.model
    return load_tokenizer(m.tokenizer if m.random_init else (m.tokenizer or m.path))


def _with_attention(model: Model, m) -> Model:
    """The model with the run's attention implementation (``model.attention``)."""
    return dataclasses.replace(model, config=model.config.replace(attention=m.attention))


def random_model_config(config, tokenizer) -> ModelConfig:
    """The decoder of ``model.random_init``: ``model.random_layers`` layers of width ``model.random_hidden``
    (4 heads, 2 kv heads, tied embeddings) over the tokenizer's vocabulary."""
    m = config.model
    h = m.random_hidden
    eos = tuple(sorted({tokenizer.eos_token_id} - {None}))
    return ModelConfig(model_type="llama", vocab_size=len(tokenizer), hidden_size=h, intermediate_size=2 * h,
                       num_layers=m.random_layers, num_heads=4, num_kv_heads=2, head_dim=h // 4,
                       tie_word_embeddings=True, eos_token_ids=eos, bos_token_id=tokenizer.bos_token_id,
                       dtype=m.dtype, param_dtype=m.param_dtype, remat=m.remat, attention=m.attention)


def save_policy(policy: Policy, out_dir, dtype: str | None = None):
    """A complete HF directory of ``policy`` (weights in ``dtype``, default the model's own;
    config.json, generation_config.json, tokenizer; `save_model`, `save_tokenizer`) written
    atomically (staged, then renamed into place or uploaded whole to a gs:// workdir).
    Parameters sharded over several hosts are gathered first (every host calls this together;
    host 0 alone writes)."""
    params = jax.device_get(local_replica(policy.params))
    out_dir = run_path(out_dir)
    if jax.process_index() != 0:
        return out_dir
    with staged_dir(out_dir) as tmp:
        save_model(policy.with_params(params).model, tmp, dtype)
        save_tokenizer(policy.tokenizer, tmp)
    return out_dir


def rollout_settings(config, bench, **overrides) -> RolloutSettings:
    """The rollout loop's settings of ``config``; ``rollout.wave_rows = -1`` not replaced by the
    plan's choice (the launch plans on accelerators only) samples every live episode in one call."""
    r = config.rollout
    sampling = SamplingParams(max_new_tokens=r.max_response_tokens,
                              temperature=overrides.pop("temperature", r.temperature),
                              top_p=r.top_p, top_k=r.top_k, chunk=r.chunk)
    sampler = sampler_spec(config)
    kw = dict(group_size=r.group_size, max_steps=min(r.max_steps, bench.spec.max_steps),
              max_prompt_tokens=r.max_prompt_tokens, sampling=sampling, sampler=sampler, wave_rows=max(r.wave_rows, 0),
              invalid_penalty=bench.spec.invalid_penalty, success_threshold=bench.spec.success_threshold,
              stop_strings=bench.stop_strings)
    kw.update(overrides)
    return RolloutSettings(**kw)


def sampler_spec(config) -> SamplerSpec:
    """The run's `SamplerSpec` (``config.sampler``): backend, tensor parallelism, prefill scratch."""
    return SamplerSpec(backend=config.sampler.backend, tensor_parallel=config.sampler.tensor_parallel,
                       prefill_scratch_bytes=config.sampler.prefill_scratch_mb << 20)


def compilation_cache_on() -> bool:
    """Whether compiled programs go to (and come back from) a persistent cache (`setup_xla`)."""
    return bool(jax.config.jax_compilation_cache_dir)


def drop_compiled() -> bool:
    """Drop JAX's in-memory compiled programs and tracing caches (``jax.clear_caches``), freeing
    their memory (a few hundred MB for the embedded model's sampler and step programs), when a
    persistent compilation cache is on to read them back from; True when dropped."""
    if not compilation_cache_on():
        return False
    jax.clear_caches()
    return True


def make_pool(config, bench):
    return open_env_pool(bench.factory, num_workers=config.env.num_workers,
                         step_timeout_s=config.env.step_timeout_s, seed=config.seed)


__all__ = ["setup_xla", "compilation_cache_on", "drop_compiled", "train_config", "sft_train_config", "sft_rows", "load_policy", "random_model_config", "save_policy",
           "rollout_settings", "sampler_spec", "make_pool"]
