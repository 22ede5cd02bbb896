"""Run configs: the resolved presets, the one source of the train defaults, overrides, methods.

The fixtures ``tests/data/config_presets.json`` (``get_config(preset).to_dict()`` of every
preset) and ``tests/data/config_train_configs.json`` (the TrainConfig of every preset under every
method, and the stage-1 SFT TrainConfig) were recorded from the checkout before the train
defaults moved into `TrainConfig` alone; they hold the presets to their values. A preset that
changes on purpose is re-recorded with ``PYTHONPATH=. python tests/test_config.py`` and the
change read in the fixture's diff.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
from pathlib import Path

import pytest
from absl import flags
from ml_collections import config_flags

from seed_jax.configs.base import PRESETS, base_config, set_keys, with_preset
from seed_jax.pipeline.auto_sizes import resolve_without_plan
from seed_jax.pipeline.methods import METHOD_SWITCHES, METHODS, needs_skill_bank, switches
from seed_jax.pipeline.runtime import sft_train_config, train_config
from seed_jax.pipeline.validate import ConfigValueError, validate
from seed_jax.train.config import RUN_TRAIN_FIELDS, ConfigError, TrainConfig

REPO = Path(__file__).resolve().parents[1]
DATA = Path(__file__).resolve().parent / "data"
CONFIG_PRESETS = {"search": PRESETS, "alfworld": PRESETS, "webshop": PRESETS, "household": ("study", "ci", "tiny", "gpu")}
CASES = [f"{env}:{preset}" for env, presets in CONFIG_PRESETS.items() for preset in presets]


def _config(case: str):
    env, preset = case.split(":")
    return importlib.import_module(f"seed_jax.configs.{env}").get_config(preset)


def _with_method(case: str, method: str):
    """``case``'s config with ``method``, its -1 sizes resolved as a one-device run without a plan
    resolves them (`resolve_without_plan`: the paper presets leave the micro-batch to the plan)."""
    c = _config(case)
    c.unlock()
    c.method = method
    c.lock()
    resolve_without_plan(c, divisor=1, hosts=1, host_row_shards=1)
    return c


def encode(value):
    """JSON with the types kept: tuples as ``{"__tuple__": [...]}`` (lists stay lists)."""
    if isinstance(value, dict):
        return {k: encode(v) for k, v in sorted(value.items())}
    if isinstance(value, tuple):
        return {"__tuple__": [encode(v) for v in value]}
    if isinstance(value, list):
        return [encode(v) for v in value]
    assert value is None or isinstance(value, (bool, int, float, str)), (type(value), value)
    return value


def resolved_presets() -> dict:
    return {case: encode(_config(case).to_dict()) for case in CASES}


def resolved_train_configs() -> dict:
    out = {}
    for case in CASES:
        out[case] = {"sft": encode(dataclasses.asdict(sft_train_config(_config(case))))}
        for m in METHODS:
            out[case][m] = encode(dataclasses.asdict(train_config(_with_method(case, m))))
    return out


# ------------------------------------------------------------------ presets keep their values


@pytest.fixture(scope="module")
def recorded():
    return (json.loads((DATA / "config_presets.json").read_text()),
            json.loads((DATA / "config_train_configs.json").read_text()))


def test_the_recordings_cover_every_preset(recorded):
    presets, train = recorded
    assert sorted(presets) == sorted(CASES) == sorted(train)
    assert all(sorted(train[c]) == sorted(("sft",) + METHODS) for c in CASES)


@pytest.mark.parametrize("case", CASES)
def test_every_preset_resolves_as_recorded(case, recorded):
    got, want = encode(_config(case).to_dict()), recorded[0][case]
    diff = _diff(got, want)
    assert not diff, f"{case} differs from its recording:\n" + "\n".join(diff)


@pytest.mark.parametrize("case", CASES)
def test_every_preset_and_method_builds_the_recorded_train_configs(case, recorded):
    want = recorded[1][case]
    assert encode(dataclasses.asdict(sft_train_config(_config(case)))) == want["sft"]
    for m in METHODS:
        got = encode(dataclasses.asdict(train_config(_with_method(case, m))))
        assert got == want[m], (m, _diff(got, want[m]))


def _diff(got, want, path="") -> list[str]:
    if isinstance(got, dict) and isinstance(want, dict):
        out = []
        for k in sorted(set(got) | set(want)):
            if k not in got or k not in want:
                out.append(f"  {path}{k}: {'missing' if k not in got else 'new'}")
            else:
                out += _diff(got[k], want[k], f"{path}{k}.")
        return out
    return [] if got == want and type(got) is type(want) else [f"  {path.rstrip('.')}: {got!r} != {want!r}"]


# ------------------------------------------------------------------ one source for the train defaults


def test_the_train_section_holds_the_trainconfig_defaults():
    defaults = TrainConfig()
    train = base_config().train.to_dict()
    assert train.pop("warmup_updates") == 0  # the run's warm-up, in RL updates (becomes warmup_steps)
    assert sorted(train) == sorted(RUN_TRAIN_FIELDS)
    expected = {f: getattr(defaults, f) for f in RUN_TRAIN_FIELDS}
    expected["micro_batch_size"] = 16  # the one run default that differs (a run always micro-batches)
    assert train == expected
    assert defaults.micro_batch_size is None


# one value per exposed field, each different from its default and from the other presets' values
NON_DEFAULT = dict(lr=3e-4, weight_decay=0.02, grad_clip=0.5, schedule="warmup_constant",
                   c_ent=0.002, c_kl=0.03, kl_kind="k2", lambda_opd=0.05, beta_opd=2.0, clip_low=0.1,
                   clip_high=0.3, dual_clip=2.5, micro_batch_size=8, teacher_from_old=True)


def test_every_train_key_of_a_run_reaches_the_train_config():
    assert set(NON_DEFAULT) == set(RUN_TRAIN_FIELDS)
    c = _config("search:tiny")
    set_keys(c, {f"train.{k}": v for k, v in NON_DEFAULT.items()} | {"train.warmup_updates": 1})
    tc = train_config(c)
    assert {k: getattr(tc, k) for k in NON_DEFAULT} == NON_DEFAULT
    assert (tc.warmup_steps, tc.schedule_unit) == (1, "update")
    assert {k: getattr(tc, k) for k in NON_DEFAULT} != {k: getattr(TrainConfig(), k) for k in NON_DEFAULT}


def test_command_line_overrides_of_train_keys_reach_the_train_config():
    argv = ["prog", "--config=configs/search.py:tiny", "--config.train.lr=3e-4",
            "--config.train.micro_batch_size=8", "--config.train.dual_clip=2.5",
            "--config.train.teacher_from_old=True", "--config.train.kl_kind=k2"]
    fv = flags.FlagValues()
    holder = config_flags.DEFINE_config_file("config", None, "run config", flag_values=fv, sys_argv=argv)
    fv(argv)
    tc = train_config(holder.value)
    assert (tc.lr, tc.micro_batch_size, tc.dual_clip, tc.teacher_from_old, tc.kl_kind) == (3e-4, 8, 2.5, True, "k2")
    with pytest.raises(TypeError):  # the keys keep their types
        holder.value.train.micro_batch_size = "eight"


def test_the_derived_fields_come_from_the_run():
    c = _config("search:tiny")
    set_keys(c, {"model.remat": "full", "model.dtype": "bfloat16", "model.param_dtype": "bfloat16",
                 "rl.num_updates": 7, "train.warmup_updates": 3, "train.schedule": "cosine", "method": "grpo",
                 "rollout.temperature": 0.7})
    tc = train_config(c)
    assert (tc.remat, tc.compute_dtype, tc.param_dtype, tc.total_steps) == ("full", "bfloat16", "bfloat16", 7)
    assert tc.temperature == 0.7  # log-probs of the policy the rollouts were sampled from
    assert sft_train_config(c).temperature == 1.0
    with c.unlocked():
        c.train.temperature = 2.0  # derived: a preset cannot set it apart from the rollouts
    with pytest.raises(ConfigError, match="temperature"):
        train_config(c)
    with c.unlocked():
        del c.train["temperature"]
    assert tc.lambda_opd == 0.0 and c.train.lambda_opd > 0  # grpo: no OPD term
    c.rl.num_updates = 2
    assert train_config(c).total_steps == 4  # at least warmup_updates + 1
    sft = sft_train_config(c)
    assert (sft.remat, sft.compute_dtype, sft.lr) == ("full", "bfloat16", c.stage1.sft_lr)


def test_a_trainconfig_field_a_preset_adds_is_passed_on():
    c = base_config()
    c.train.adam_b2 = 0.95  # not exposed by default; a config may still set it
    assert train_config(c).adam_b2 == 0.95


@pytest.mark.parametrize("key", ["total_steps", "remat", "no_such_field"])
def test_a_train_key_that_a_run_cannot_set_is_rejected_naming_it(key):
    c = _config("search:tiny")
    c.unlock()
    c.train[key] = 5
    with pytest.raises(ConfigValueError, match=rf"config\.train.*{key}"):
        validate(c)


# ------------------------------------------------------------------ methods


def test_methods_and_their_switches():
    assert METHODS == tuple(METHOD_SWITCHES) == ("seed", "grpo", "seed_no_sft", "sft_grpo", "seed_static",
                                                 "skill_prompt", "skill_grpo", "vanilla", "seed_shuffled")
    # which methods need the stage-1 skill bank: SFT, a static bank, or skills in the prompt
    bank = {m for m in METHODS if needs_skill_bank(_with_method("search:tiny", m))}
    assert bank == {"seed", "sft_grpo", "seed_static", "skill_prompt", "skill_grpo", "seed_shuffled"}
    opd = {m for m in METHODS if switches(_with_method("search:tiny", m)).opd}
    assert opd == {"seed", "seed_no_sft", "seed_static", "seed_shuffled"}


# ------------------------------------------------------------------ preset helpers


def test_set_keys_refuses_an_unknown_key():
    c = base_config()
    set_keys(c, {"rl.num_updates": 3})
    assert c.rl.num_updates == 3
    with pytest.raises(KeyError, match="rl.num_update"):
        set_keys(c, {"rl.num_update": 3})


def test_an_unknown_preset_is_rejected():
    with pytest.raises(ValueError, match="unknown preset 'huge'"):
        with_preset(base_config(), "huge", local={})
    for env in ("search", "alfworld", "webshop"):
        with pytest.raises(ValueError, match="unknown preset"):
            importlib.import_module(f"seed_jax.configs.{env}").get_config("huge")


def test_presets_are_locked():
    c = _config("webshop:paper")
    with pytest.raises(AttributeError):
        c.rl.num_update = 3


if __name__ == "__main__":  # re-record the fixtures (a deliberate change to a preset)
    (DATA / "config_presets.json").write_text(json.dumps(resolved_presets(), indent=1, sort_keys=True) + "\n")
    (DATA / "config_train_configs.json").write_text(
        json.dumps(resolved_train_configs(), indent=1, sort_keys=True) + "\n")


@pytest.mark.parametrize("key,value", [("model.remat", "most"), ("model.attention", "splash"), ("mesh.fsdp", 0),
                                       ("mesh.fsdp", -2), ("rollout.temperature", 0.0),
                                       ("rollout.temperature", -1.0), ("eval.temperature", -0.1),
                                       ("run.stall_timeout_s", -1.0), ("env.step_timeout_s", 0.0)])
def test_a_bad_scale_key_is_rejected_naming_it(key, value):
    c = _config("search:tiny")
    set_keys(c, {key: value})
    with pytest.raises(ConfigValueError, match=rf"config\.{key}"):
        validate(c)


def test_paper_presets_shard_zero3_in_bf16_with_remat():
    for env in ("alfworld", "webshop", "search"):
        c = _with_method(f"{env}:paper", "seed")
        m = c.model
        assert (m.dtype, m.param_dtype, m.remat, m.attention, c.mesh.fsdp, c.mesh.data) == \
            ("bfloat16", "float32", "save_dots_except_mlp", "dot_product", -1, -1), env
        tc = train_config(c)
        assert (tc.compute_dtype, tc.remat) == ("bfloat16", "save_dots_except_mlp")
        # no unbounded wait on a pod: environments in worker processes with step timeouts, a stall watchdog
        assert c.env.num_workers > 0 and c.env.step_timeout_s > 0 and c.run.stall_timeout_s > 0, env
