"""`TrainConfig`: the static hyper-parameters of one SEED / GRPO / SFT update.

Defaults follow the paper recipe (docs/METHOD.md §6): AdamW lr 1e-6, weight decay 0.01,
grad-norm clip 1.0, constant schedule, KL coef 0.01 with the k3 ("low_var_kl") estimator,
entropy coef 0.001, lambda_opd 0.01, beta_opd 5, PPO clip 0.2 both sides, dual clip 3.0.

The config is frozen and hashable, so it can be closed over by `jax.jit` (it is static).
``lambda_opd == 0`` is plain GRPO: the teacher pass is not traced at all.

The dataclass is the one source of these defaults: a run config's ``train`` section
(``configs/base.py``) is built from the fields in `RUN_TRAIN_FIELDS` with `run_train_defaults`,
and `seed_jax.pipeline.runtime.train_config` builds the TrainConfig back from that section.
"""

from __future__ import annotations

import dataclasses
import math

from seed_jax.losses import KL_ESTIMATORS
from seed_jax.models.config import ModelConfig, remat_name, resolve_dtype

SCHEDULES = ("constant", "warmup_constant", "cosine")
SCHEDULE_UNITS = ("step", "update")


class ConfigError(ValueError):
    """A TrainConfig field has an invalid value (the message names the field)."""


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Static settings of the train step (see module docstring for the defaults' origin).

    Loss: ``L = L_pg - c_ent * H + c_kl * KL + lambda_opd * L_opd`` (all token means over the
    response tokens of the whole batch). ``micro_batch_size`` (rows per micro-batch, None =
    the whole batch at once) splits the batch for exact gradient accumulation.
    ``teacher_from_old``: take the teacher log-probs from ``batch['teacher_logp']``
    (precomputed with theta_old, the authors' code path) instead of a teacher pass on the
    current parameters. ``remat`` (a policy name of `seed_jax.models.config.REMAT_POLICIES`, or
    a bool: True = "full") / ``compute_dtype`` / ``param_dtype`` override the model config
    (`apply_to`). ``logits_chunk``: response positions per LM-head chunk (None = auto).
    ``temperature``: every log-prob of the step (student, teacher, and the old / reference
    passes built with it) is of softmax(logits / temperature), the policy a sampler at that
    temperature draws from; runs set it to ``rollout.temperature``, so the PPO ratio, the KL and
    the OPD gate are those of the sampling policy (1.0: the paper's rollouts).
    ``warmup_steps`` and ``total_steps`` (the length of the cosine schedule) count schedule
    positions in ``schedule_unit``: optimizer steps (``"step"``) or RL updates (``"update"``,
    see `seed_jax.train.state`).
    """

    lr: float = 1e-6
    weight_decay: float = 0.01
    grad_clip: float | None = 1.0
    warmup_steps: int = 0
    schedule: str = "constant"
    total_steps: int | None = None
    schedule_unit: str = "step"
    min_lr_ratio: float = 0.0
    adam_b1: float = 0.9
    adam_b2: float = 0.999
    adam_eps: float = 1e-8
    c_ent: float = 0.001
    c_kl: float = 0.01
    kl_kind: str = "low_var_kl"
    lambda_opd: float = 0.01
    beta_opd: float = 5.0
    clip_low: float = 0.2
    clip_high: float = 0.2
    dual_clip: float | None = 3.0
    micro_batch_size: int | None = None
    teacher_from_old: bool = False
    remat: bool | str = False
    compute_dtype: str = "float32"
    param_dtype: str = "float32"
    logits_chunk: int | None = None
    temperature: float = 1.0

    def __post_init__(self):
        def bad(field, msg):
            raise ConfigError(f"TrainConfig.{field}: {msg} (got {getattr(self, field)!r})")

        if not (math.isfinite(self.lr) and self.lr >= 0):
            bad("lr", "must be a finite number >= 0")
        if not self.weight_decay >= 0:
            bad("weight_decay", "must be >= 0")
        if self.grad_clip is not None and not self.grad_clip > 0:
            bad("grad_clip", "must be > 0 or None")
        if self.warmup_steps < 0:
            bad("warmup_steps", "must be >= 0")
        if self.schedule not in SCHEDULES:
            bad("schedule", f"must be one of {SCHEDULES}")
        if self.schedule_unit not in SCHEDULE_UNITS:
            bad("schedule_unit", f"must be one of {SCHEDULE_UNITS}")
        if self.schedule == "cosine":
            if self.total_steps is None or self.total_steps <= self.warmup_steps:
                bad("total_steps", "the cosine schedule needs total_steps > warmup_steps")
        if self.schedule == "warmup_constant" and self.warmup_steps == 0:
            bad("warmup_steps", "schedule 'warmup_constant' needs warmup_steps > 0")
        if not 0 <= self.min_lr_ratio <= 1:
            bad("min_lr_ratio", "must be in [0, 1]")
        for f in ("adam_b1", "adam_b2"):
            if not 0 <= getattr(self, f) < 1:
                bad(f, "must be in [0, 1)")
        if not self.adam_eps > 0:
            bad("adam_eps", "must be > 0")
        for f in ("c_ent", "c_kl", "lambda_opd", "beta_opd", "clip_low", "clip_high"):
            v = getattr(self, f)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
                bad(f, "must be a finite number >= 0")
        if self.kl_kind not in KL_ESTIMATORS:
            bad("kl_kind", f"must be one of {sorted(KL_ESTIMATORS)}")
        if self.dual_clip is not None and not self.dual_clip > 1:
            bad("dual_clip", "must be > 1 or None")
        if self.micro_batch_size is not None and self.micro_batch_size < 1:
            bad("micro_batch_size", "must be >= 1 or None")
        if not (isinstance(self.temperature, (int, float)) and math.isfinite(self.temperature)
                and self.temperature > 0):
            bad("temperature", "must be a finite number > 0")
        if self.logits_chunk is not None and self.logits_chunk < 1:
            bad("logits_chunk", "must be >= 1 or None")
        try:
            remat_name(self.remat)
        except ValueError as e:
            bad("remat", str(e))
        for f in ("compute_dtype", "param_dtype"):
            try:
                resolve_dtype(getattr(self, f))
            except ValueError as e:
                bad(f, str(e))

    @property
    def use_teacher(self) -> bool:
        """True when the OPD term is on (lambda_opd > 0)."""
        return self.lambda_opd > 0

    @property
    def teacher_pass(self) -> bool:
        """True when the jitted step runs a teacher forward on the current parameters."""
        return self.use_teacher and not self.teacher_from_old

    def replace(self, **kw) -> TrainConfig:
        return dataclasses.replace(self, **kw)

    def apply_to(self, model_cfg: ModelConfig) -> ModelConfig:
        """The model config with this config's remat / compute dtype / parameter dtype."""
        return model_cfg.replace(remat=self.remat, dtype=self.compute_dtype,
                                 param_dtype=self.param_dtype)

    def num_micro_batches(self, batch_size: int) -> int:
        """How many micro-batches a batch of ``batch_size`` rows is split into."""
        mb = self.micro_batch_size or batch_size
        if batch_size % mb:
            raise ConfigError(
                f"TrainConfig.micro_batch_size: {mb} does not divide the batch size {batch_size}")
        return batch_size // mb


RUN_TRAIN_FIELDS = ("lr", "weight_decay", "grad_clip", "schedule", "c_ent", "c_kl", "kl_kind",
                    "lambda_opd", "beta_opd", "clip_low", "clip_high", "dual_clip", "micro_batch_size",
                    "teacher_from_old")
"""The TrainConfig fields a run config exposes as ``config.train.<field>``.

The others are derived by the pipeline (the RL schedule counts updates: ``schedule_unit =
"update"``, ``warmup_steps`` from the run's ``train.warmup_updates``, ``total_steps`` from the
number of updates; ``remat``,
``compute_dtype``, ``param_dtype`` from ``config.model``; ``temperature`` from
``rollout.temperature``) or left at their defaults (Adam
moments, ``min_lr_ratio``, ``logits_chunk``), which a config may still set.
"""


def run_train_defaults() -> dict:
    """``{field: TrainConfig default}`` for the fields of `RUN_TRAIN_FIELDS`, in that order."""
    defaults = {f.name: f.default for f in dataclasses.fields(TrainConfig)}
    return {name: defaults[name] for name in RUN_TRAIN_FIELDS}
