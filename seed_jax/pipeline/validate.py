"""Reject impossible configurations before any work starts, naming the offending key."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import urllib.error
import urllib.parse
import urllib.request

from seed_jax.losses import ADVANTAGE_ESTIMATORS, PENALTY_MODES
from seed_jax.metrics import WANDB_MODES
from seed_jax.models.config import ATTENTION_IMPLS, REMAT_POLICIES
from seed_jax.paths import is_remote, run_path
from seed_jax.pipeline.analyzers import RL_ONLINE_ANALYZERS, STAGE1_ANALYZERS
from seed_jax.pipeline.annotator import REASONING_SWITCH, AnnotatorError, OpenAIChat
from seed_jax.pipeline.auto_sizes import AUTO, micro_batch_candidates
from seed_jax.pipeline.environments import EXPERT_ANALYSIS, has_expert_analysis
from seed_jax.pipeline.methods import METHODS, needs_skill_bank
from seed_jax.pipeline.ppo import host_split_error
from seed_jax.pipeline.preflight import preflight_problems
from seed_jax.pipeline.runtime import train_config
from seed_jax.rollout.batch import OPD_MASKS
from seed_jax.sampling import BACKENDS
from seed_jax.train.mesh import mesh_shape

STAGES = ("collect", "annotate", "sft", "rl", "eval")


class ConfigValueError(ValueError):
    """A configuration key holds an impossible value (the message names the key)."""


def validate(config, hosts: int = 1) -> None:
    """Raise `ConfigValueError` naming the first impossible key (``hosts``: the processes of the
    run, which split every mini- and micro-batch evenly)."""

    def bad(key, msg):
        raise ConfigValueError(f"config.{key}: {msg} (got {_get(config, key)!r})")

    if config.method not in METHODS:
        bad("method", f"must be one of {METHODS}")
    stages = [s.strip() for s in config.stages.split(",") if s.strip()]
    unknown = [s for s in stages if s not in STAGES]
    if unknown or not stages:
        bad("stages", f"must be a comma-separated subset of {STAGES}")
    positive = ["rollout.group_size", "rollout.max_steps", "rollout.max_prompt_tokens",
                "rollout.max_response_tokens", "rollout.chunk", "stage1.num_tasks", "stage1.group_size",
                "stage1.sft_batch_size", "stage1.openai_max_concurrency", "stage1.sft_micro_batch_size", "stage1.max_answer_tokens",
                "analysis.max_new_tokens", "analysis.max_prompt_tokens",
                "rl.tasks_per_update", "rl.mini_batch_size", "rl.epochs", "rl.checkpoint_every",
                "rl.keep_checkpoints", "model.random_layers", "model.random_hidden"]
    for key in positive:
        if _get(config, key) < 1:
            bad(key, "must be >= 1")
    for key in ("train.micro_batch_size", "analysis.batch_size"):  # -1: the plan chooses (`auto_sizes`)
        if _get(config, key) < 1 and _get(config, key) != AUTO:
            bad(key, "must be >= 1, or -1 (the largest that fits the devices, chosen by the plan)")
    micro = config.train.micro_batch_size
    for key in ("rl.num_updates", "stage1.sft_epochs", "stage1.format_warmup_tasks", "eval.num_tasks", "rl.eval_every",
                "env.num_workers", "train.warmup_updates", "rl.transcripts_per_update", "run.rollout_chunk_episodes"):
        if _get(config, key) < 0:
            bad(key, "must be >= 0")
    for key in ("stage1.temperature", "eval.temperature", "run.stall_timeout_s"):
        if _get(config, key) < 0:
            bad(key, "must be >= 0")
    if not config.env.step_timeout_s > 0:
        bad("env.step_timeout_s", "must be > 0")
    if not config.rollout.temperature > 0:
        bad("rollout.temperature", "must be > 0 (the RL update scores the sampling policy softmax(logits / T); "
                                   "greedy rollouts have no such policy)")
    tracking = config.get("tracking")
    if tracking is not None and tracking.wandb_mode not in WANDB_MODES:
        bad("tracking.wandb_mode", f"must be one of {', '.join(repr(m) for m in WANDB_MODES)}")
    if tracking is not None and tracking.wandb and importlib.util.find_spec("wandb") is None:
        bad("tracking.wandb", "needs the wandb package (pip install wandb)")
    if not 0 < config.rollout.top_p <= 1:
        bad("rollout.top_p", "must be in (0, 1]")
    if not 0 <= config.stage1.heldout_fraction < 1:
        bad("stage1.heldout_fraction", "must be in [0, 1)")
    if config.stage1.sft_micro_batch_size > config.stage1.sft_batch_size:
        bad("stage1.sft_micro_batch_size", "must be <= stage1.sft_batch_size")
    if config.stage1.sft_batch_size % config.stage1.sft_micro_batch_size:
        bad("stage1.sft_batch_size", "must be a multiple of stage1.sft_micro_batch_size")
    if micro != AUTO and micro > config.rl.mini_batch_size:
        bad("train.micro_batch_size", f"must be <= rl.mini_batch_size ({config.rl.mini_batch_size})")
    if micro != AUTO and config.rl.mini_batch_size % micro:
        bad("rl.mini_batch_size", f"must be a multiple of train.micro_batch_size ({micro})")
    split = host_split_error(config.rl.mini_batch_size, micro, hosts) if micro != AUTO else None
    if split:
        bad("train.micro_batch_size", split)
    if config.rl.advantage_mode not in ADVANTAGE_ESTIMATORS:
        bad("rl.advantage_mode", f"must be one of {sorted(ADVANTAGE_ESTIMATORS)}")
    if config.rl.penalty_mode not in PENALTY_MODES:
        bad("rl.penalty_mode", f"must be one of {PENALTY_MODES}")
    if config.opd.mask not in OPD_MASKS:
        bad("opd.mask", f"must be one of {' | '.join(OPD_MASKS)}")
    if config.rollout.max_teacher_prompt_tokens < config.rollout.max_prompt_tokens:
        bad("rollout.max_teacher_prompt_tokens",
            f"must be >= rollout.max_prompt_tokens ({config.rollout.max_prompt_tokens}): H(h, s) holds h and the skill")
    if config.stage1.analyzer not in STAGE1_ANALYZERS:
        bad("stage1.analyzer", "must be self | openai | scripted | heuristic")
    if config.analysis.analyzer not in RL_ONLINE_ANALYZERS:
        bad("analysis.analyzer", "must be self | heuristic | scripted")
    for key in ("stage1.analyzer", "analysis.analyzer"):
        if _get(config, key) == "scripted" and not has_expert_analysis(config.env.name):
            bad(key, f"'scripted' reads the env's expert analysis, which only {' | '.join(sorted(EXPERT_ANALYSIS))} "
                     f"provides, not env {config.env.name!r}")
    if config.stage1.openai_reasoning not in REASONING_SWITCH:
        bad("stage1.openai_reasoning", f"must be one of {' | '.join(REASONING_SWITCH)}")
    if config.model.dtype not in ("float32", "bfloat16") or config.model.param_dtype not in ("float32", "bfloat16"):
        bad("model.dtype", "model.dtype and model.param_dtype must be float32 or bfloat16")
    if config.env.name == "search" and config.env.retriever not in ("bm25", "http"):
        bad("env.retriever", "must be bm25 | http")
    if config.env.name == "search" and config.env.retriever == "http" and not config.env.retriever_url:
        bad("env.retriever_url", "the http retriever needs a URL")
    if config.sampler.backend not in BACKENDS:
        bad("sampler.backend", f"must be one of {BACKENDS}")
    for key in ("sampler.tensor_parallel", "sampler.prefill_scratch_mb"):
        if _get(config, key) < 1:
            bad(key, "must be >= 1")
    if config.rollout.wave_rows < -1:
        bad("rollout.wave_rows", "must be >= -1 (0: every live episode in one sampler call; -1: the plan chooses)")
    if config.model.remat not in REMAT_POLICIES and not isinstance(config.model.remat, bool):
        bad("model.remat", f"must be one of {' | '.join(REMAT_POLICIES)}")
    if config.stage1.sft_remat not in ("", *REMAT_POLICIES):
        bad("stage1.sft_remat", f"must be '' (= model.remat) or one of {' | '.join(REMAT_POLICIES)}")
    if config.model.attention not in ATTENTION_IMPLS:
        bad("model.attention", f"must be one of {' | '.join(ATTENTION_IMPLS)}")
    if config.mesh.tensor < 1:
        bad("mesh.tensor", "must be >= 1")
    if config.mesh.fsdp == 0 or config.mesh.fsdp < -1:
        bad("mesh.fsdp", "must be -1 (a TPU slice or one host's devices) or >= 1")
    if config.mesh.data == 0 or config.mesh.data < -1:
        bad("mesh.data", "must be -1 (all devices) or >= 1")
    # the train-step settings are checked by TrainConfig itself, with its own field names
    try:  # a micro-batch left to the plan is checked against the mesh (`check_mesh`)
        train_config(config, **({"micro_batch_size": config.rl.mini_batch_size} if micro == AUTO else {}))
    except ValueError as e:
        raise ConfigValueError(f"config.train: {e}") from None


def check_mesh(config, devices: int, hosts: int = 1, domain: int | None = None) -> tuple[int, int, int]:
    """Raise `ConfigValueError` naming the key when ``config`` cannot run on ``devices`` devices of
    ``hosts`` hosts, before anything is compiled; returns the mesh's ``(data, fsdp, tensor)``.

    ``domain``: the devices one fast interconnect joins (`seed_jax.train.mesh.interconnect_devices`;
    default one host's), what ``mesh.fsdp = -1`` spans. Checked: the mesh axes multiply to the
    device count (`mesh_shape`); the batch rows split ``d = data x fsdp`` ways, so
    ``train.micro_batch_size`` is a multiple of ``d`` (the log-prob passes and the train step shard
    every micro-batch's rows over the mesh) and, when -1, some multiple of ``lcm(d, hosts)``
    divides ``rl.mini_batch_size`` (`micro_batch_candidates`). The SFT's micro-batches need no
    check: they are filled with masked rows to a multiple of ``d`` (`runtime.sft_train_config`)."""
    m = config.mesh
    try:
        shape = mesh_shape(devices, m.data, m.fsdp, m.tensor, domain or max(1, devices // max(1, hosts)))
    except ValueError as e:
        raise ConfigValueError(f"config.mesh: {e} (got data={m.data}, fsdp={m.fsdp}, tensor={m.tensor})") from None
    div = shape[0] * shape[1]
    micro = config.train.micro_batch_size
    if micro != AUTO and micro % div:
        raise ConfigValueError(f"config.train.micro_batch_size: must be a multiple of the data x fsdp mesh size "
                               f"({div}) on {devices} devices, or -1 (the largest that fits, chosen by the plan) "
                               f"(got {micro})")
    if micro == AUTO and not micro_batch_candidates(config.rl.mini_batch_size, div, hosts):
        raise ConfigValueError(f"config.rl.mini_batch_size: train.micro_batch_size = -1 needs a mini-batch that is a "
                               f"multiple of {math.lcm(div, hosts)} (the data x fsdp mesh size {div} and {hosts} "
                               f"host(s)) on {devices} devices (got {config.rl.mini_batch_size})")
    return shape


def _get(config, dotted: str):
    node = config
    for part in dotted.split("."):
        node = node[part]
    return node


# ------------------------------------------------------------------ inputs, checked before any work

PATH_KEYS = ("model.path", "model.tokenizer", "eval.checkpoint", "env.data_dir", "env.catalog_path",
             "env.goals_path", "env.corpus")


def check_inputs(config, preset: str | None = None) -> None:
    """Raise `ConfigValueError` for a missing input: ``model.path`` under the ``paper`` preset (the
    embedded 135M model is no paper run), or a file or directory the config names that does not exist
    (`PATH_KEYS` and every ``env.datasets`` entry), or what `seed_jax.pipeline.preflight` finds: a model
    directory without weights or tokenizer files, a malformed URL, a benchmark's missing data (Search-R1's
    files, the ALFWorld games, the WebShop files, for every preset). Also the endpoint keys of the ``openai`` stage-1 annotator
    (`check_annotator_keys`). Reads nothing but the file system and the environment."""
    if preset == "paper" and not config.model.path:
        raise ConfigValueError("config.model.path: the paper preset needs a local Hugging Face model directory, "
                               "e.g. --config.model.path=/models/Qwen2.5-3B-Instruct (got None)")
    named = [(key, _get_or(config, key)) for key in PATH_KEYS]
    named += [(f"env.datasets.{split}", path) for split, path in (_get_or(config, "env.datasets") or {}).items()]
    for key, path in named:
        if path and is_remote(str(path)) and key != "eval.checkpoint":  # a policy dir is downloaded (load_policy)
            raise ConfigValueError(f"config.{key}: {path} is a URL; inputs are read from local disk: copy it to "
                                   "every host (launch/host_setup.sh, STAGE_IN) and name the local path")
        if path and not run_path(str(path)).exists():
            raise ConfigValueError(f"config.{key}: no such file or directory: {path}")
    problems = preflight_problems(config, preset)
    if problems:
        raise ConfigValueError(problems[0])
    check_annotator_keys(config)


def check_retriever(url: str, timeout: float = 5.0) -> None:
    """Raise `ConfigValueError` unless an HTTP retriever answers at ``url`` (its ``/retrieve``).

    ``GET <base>/health`` first (what `envs.search.server` offers); a server without it (Search-R1's
    retrieval server) gets one ``POST /retrieve`` of a single query instead. No proxy, as the env's client.
    """
    retrieve = url if url.rstrip("/").endswith("/retrieve") else url.rstrip("/") + "/retrieve"
    base = retrieve.rstrip("/")[: -len("/retrieve")]
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    body = json.dumps({"queries": ["health check"], "topk": 1}).encode()
    try:
        try:
            with opener.open(f"{base}/health", timeout=timeout):
                return
        except urllib.error.HTTPError:  # it answers, but has no /health: ask /retrieve itself
            req = urllib.request.Request(retrieve, data=body, headers={"Content-Type": "application/json"})
            with opener.open(req, timeout=timeout):
                return
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", None) or e
        raise ConfigValueError(
            f"config.env.retriever_url: no working retriever at {retrieve} ({reason}); start one with "
            f"`python -m seed_jax.envs.search.server --port {urllib.parse.urlsplit(retrieve).port or 8000}` "
            "(BM25 over the vendored corpus, --corpus FILE for yours) or use --config.env.retriever=bm25") from None


def check_annotator_keys(config) -> None:
    """Raise `ConfigValueError` naming the keys when ``stage1.analyzer = openai`` (the ``paper``
    presets' annotator, `configs.base.PAPER_ANNOTATOR`) has no endpoint: ``stage1.openai_base_url``
    (or ``$OPENAI_BASE_URL``) and ``stage1.openai_model``."""
    s = config.stage1
    if s.analyzer != "openai" or not needs_skill_bank(config):  # no stage 1 (grpo, vanilla): no annotator
        return
    missing = [k for k, ok in (("stage1.openai_base_url", s.openai_base_url or os.environ.get("OPENAI_BASE_URL")),
                               ("stage1.openai_model", s.openai_model)) if not ok]
    if missing:
        raise ConfigValueError(
            f"config.{' and config.'.join(missing)}: stage1.analyzer = openai (the paper's external annotator) needs "
            "an OpenAI-compatible endpoint: --config.stage1.openai_base_url=URL (or $OPENAI_BASE_URL) and "
            "--config.stage1.openai_model=NAME (key: $OPENAI_API_KEY or stage1.openai_api_key_env), or "
            "--config.stage1.analyzer=self (the base model annotates itself: a deviation from the paper)")


def check_annotator(config, timeout: float = 10.0) -> None:
    """Raise `ConfigValueError` unless the stage-1 OpenAI-compatible endpoint answers one real
    chat request (``stage1.analyzer = openai``; a no-op otherwise): one ``POST
    {base_url}/chat/completions`` of a one-word prompt with the run's model and key, no retries,
    so a dead endpoint, a wrong key or an unknown model stops the run before collection, not
    after it."""
    s = config.stage1
    if s.analyzer != "openai" or not needs_skill_bank(config):
        return
    chat = OpenAIChat(s.openai_base_url, s.openai_model, s.openai_api_key_env, timeout=timeout, max_retries=0,
                      max_tokens=16, reasoning=s.openai_reasoning)
    try:
        chat([{"role": "user", "content": "Reply with the word OK."}])
    except AnnotatorError as e:
        why = " ".join(str(e).split())
        raise ConfigValueError(
            f"config.stage1.openai_base_url: the annotator endpoint failed a test request ({why}); start it or "
            "fix stage1.openai_base_url / stage1.openai_model / the key, or --config.stage1.analyzer=self") from None


def _get_or(config, dotted: str, default=None):
    try:
        return _get(config, dotted)
    except (KeyError, AttributeError):
        return default
