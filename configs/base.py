"""Settings shared by every benchmark config; each `configs/<env>.py` starts from `base_config()`.

Presets (``--config=configs/search.py:PRESET``):

- ``local`` (default): the embedded SmolLM2-135M-Instruct on a 2-core CPU, no network, small
  groups and two RL updates: the whole method end to end in under half an hour and about 5 GB
  (the search preset; a demonstration of the machinery, not a training run).
- ``paper``: the recipe of the paper (docs/METHOD.md §6) at the paper's scale (`PAPER_SCALE`: ZeRO-3
  sharding over each fast-interconnect domain: a TPU slice, a GPU node, bfloat16 compute, remat); needs ``model.path`` (a local HF
  directory such as Qwen2.5-3B-Instruct), an OpenAI-compatible annotator endpoint for stage 1
  (`PAPER_ANNOTATOR`) and, for search, a retriever URL.
- ``tiny``: a tiny random model (embedded tokenizer) for end-to-end tests.

Every key exists here, so a misspelt override (``--config.rl.num_update=3``) is rejected by
the locked ConfigDict, and `seed_jax.pipeline.validate` rejects impossible values before any
work starts. The ``train`` section is built from `seed_jax.train.config.TrainConfig`, whose
dataclass holds the defaults; the method names and their switches are in
`seed_jax.pipeline.methods`.
"""

from __future__ import annotations

from collections.abc import Mapping

import ml_collections

from seed_jax.train.config import run_train_defaults

PRESETS = ("local", "paper", "tiny")


def base_config() -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    c.seed = 0
    c.method = "seed"  # one of seed_jax.pipeline.methods.METHODS (docs/METHOD.md §7)
    c.stages = "collect,annotate,sft,rl,eval"
    # a laptop's trade of a little time for memory, same numbers (docs/ARCHITECTURE.md "Memory on a
    # laptop"): the KL reference read from disk for each update's scoring pass instead of kept
    # resident, each RL checkpoint written before the next update, compiled programs dropped between
    # stages and before each train step (read back from the persistent compilation cache)
    c.low_memory = False

    c.model = ml_collections.ConfigDict()
    c.model.path = ml_collections.config_dict.placeholder(str)  # None = embedded SmolLM2-135M-Instruct
    c.model.tokenizer = ml_collections.config_dict.placeholder(str)  # None = same as model.path
    c.model.random_init = False  # True: random weights of the size below (tests, smoke runs)
    c.model.random_layers = 2
    c.model.random_hidden = 64
    c.model.dtype = "float32"
    c.model.param_dtype = "float32"
    c.model.remat = "none"  # none | full | save_dots | save_dots_except_mlp | save_qkv_proj | offload
    c.model.attention = "reference"  # reference (einsum, the CPU path) | dot_product (jax.nn.dot_product_attention; the Pallas flash kernel on TPU) | flash

    c.env = ml_collections.ConfigDict()
    c.env.name = ""
    c.env.num_workers = 0  # 0 = environments in the main process (a step past the timeout is abandoned in its thread)
    c.env.step_timeout_s = 120.0  # an env step (or reset) past this ends its episode with env_error

    c.run = ml_collections.ConfigDict()
    # the stall watchdog (seed_jax/watchdog.py): a host whose run reports no progress (rollout turn,
    # optimizer step, barrier, ...) for this many seconds logs what it waited on and exits with code 3,
    # so that no host of a pod waits for ever on a stuck one; 0 = off
    c.run.stall_timeout_s = 1800.0
    # collect and eval roll out their tasks in chunks of about this many episodes per host (whole
    # tasks, at least one); after each chunk its episodes are saved (parts/<stage>/) and a preemption
    # notice stops the run, whose relaunch rolls out only the tasks left (seed_jax/pipeline/chunked.py);
    # 0 = all tasks in one chunk
    c.run.rollout_chunk_episodes = 256

    c.rollout = ml_collections.ConfigDict()
    c.rollout.group_size = 8
    c.rollout.max_steps = 30
    c.rollout.max_prompt_tokens = 2048
    c.rollout.max_teacher_prompt_tokens = 2560  # H(h, s): h's cap + room for the skill block
    c.rollout.max_response_tokens = 512
    c.rollout.temperature = 1.0
    c.rollout.top_p = 1.0
    c.rollout.top_k = 0
    c.rollout.chunk = 32
    # most episodes per sampler call (0: every live episode in one call; -1: the largest wave whose
    # prefill and decode fit the devices, chosen by the launch's plan on TPU / GPU, 0 on CPU)
    c.rollout.wave_rows = 0
    c.sampler = ml_collections.ConfigDict()
    c.sampler.backend = "auto"  # auto (unrolled on one CPU device, else scan) | unrolled | scan
    c.sampler.tensor_parallel = 1  # scan: the sampler copy split by heads over this many devices
    c.sampler.prefill_scratch_mb = 1024  # scan: per-device scratch of one prefill row chunk

    c.stage1 = ml_collections.ConfigDict()
    c.stage1.num_tasks = 180
    c.stage1.group_size = 8
    c.stage1.temperature = 0.4
    c.stage1.analyzer = "self"  # self | openai | scripted (env-provided) | heuristic (model-free template)
    c.stage1.openai_base_url = ""  # '' = $OPENAI_BASE_URL
    c.stage1.openai_model = ""
    c.stage1.openai_api_key_env = "OPENAI_API_KEY"  # unset -> $OPENAI_API_KEY
    c.stage1.openai_max_concurrency = 16  # annotation requests in flight at once
    c.stage1.openai_reasoning = "auto"  # auto (model-name rule) | yes | no: reasoning models get no temperature
    c.stage1.max_repairs = 2
    c.stage1.sft_epochs = 3
    c.stage1.sft_lr = 5e-6
    c.stage1.sft_batch_size = 8
    c.stage1.sft_micro_batch_size = 8
    c.stage1.sft_remat = ""  # '' = model.remat; the SFT's analyzer prompts are ~10x the RL prompts' length
    c.stage1.heldout_fraction = 0.1
    c.stage1.max_answer_tokens = 512
    c.stage1.format_warmup_tasks = 0  # >0: SFT also on the env's scripted acting turns for this many train tasks

    c.analysis = ml_collections.ConfigDict()
    c.analysis.analyzer = "self"  # self (the policy, docs/METHOD.md §3.1) | heuristic (model-free template: smoke tests)
    c.analysis.max_new_tokens = 4096
    c.analysis.max_prompt_tokens = 4096
    c.analysis.batch_size = 32  # prompts per self-analysis sampler call (-1: the largest that fits, chosen by the plan)

    c.rl = ml_collections.ConfigDict()
    c.rl.num_updates = 150
    c.rl.tasks_per_update = 16
    c.rl.mini_batch_size = 256  # step-samples per optimizer step (PPO mini-batch)
    c.rl.epochs = 1
    c.rl.advantage_mode = "mean_std"
    c.rl.penalty_mode = "after_norm"  # after_norm: A = (R - mean)/(std + eps) - p | in_score (docs/METHOD.md)
    c.rl.checkpoint_every = 5
    c.rl.keep_checkpoints = 3
    c.rl.eval_every = 0  # 0 = only the final eval stage
    c.rl.audit_gates = True  # per-step OPD gates under theta_old -> step_gates.jsonl (one extra teacher forward)
    c.rl.transcripts_per_update = 4  # trajectories per update saved in full to rl/transcripts.jsonl (0 = none)

    c.opd = ml_collections.ConfigDict()
    # the response tokens OPD acts on (docs/METHOD.md §3.8): action (the valid steps' tokens outside
    # thinking, the paper's reading) | response (every response token: thinking and invalid ones too)
    c.opd.mask = "action"

    c.train = ml_collections.ConfigDict(run_train_defaults())  # TrainConfig's fields and defaults
    c.train.warmup_updates = 0  # learning-rate warm-up, in RL updates (the RL schedule counts updates)
    # rows per micro-batch (TrainConfig's None, the whole mini-batch, is no run option); -1: the largest that
    # fits the devices, chosen by the plan (without one: the data x fsdp mesh size; pipeline/auto_sizes.py)
    c.train.micro_batch_size = 16

    c.eval = ml_collections.ConfigDict()
    c.eval.num_tasks = 0  # per split; 0 = the whole split
    c.eval.temperature = 0.4
    c.eval.checkpoint = ml_collections.config_dict.placeholder(str)  # evaluate this model dir instead

    c.tracking = ml_collections.ConfigDict()
    c.tracking.wandb = False  # also log metrics to Weights & Biases (needs the wandb package)
    c.tracking.wandb_project = "seed_jax"
    c.tracking.wandb_entity = ""  # "" = the W&B account's default
    c.tracking.wandb_mode = ""  # "" (wandb decides, e.g. WANDB_MODE) | online | offline | disabled

    c.mesh = ml_collections.ConfigDict()
    c.mesh.data = -1  # -1 = all remaining devices
    c.mesh.fsdp = 1  # -1 = one interconnect domain: a TPU slice or one GPU node's devices (mesh.auto_fsdp)
    c.mesh.tensor = 1

    c.xla = ml_collections.ConfigDict()
    c.xla.cache_dir = ""  # persistent compilation cache: '' = <workdir>/xla_cache, 'off' = none
    return c


# The train-side settings of every ``paper`` preset: parameters sharded ZeRO-3 style over one
# interconnect domain (a TPU slice, a GPU node: `mesh.auto_fsdp`), bfloat16 compute on float32 master weights, each block rematerialised
# except its attention projections (whole blocks in the stage-1 SFT, whose 24,576-token analyzer
# prompts need 20 GB of kept activations per v5e chip otherwise), fused attention (the Pallas flash
# kernel on TPU), the sizes that depend on the slice left to the launch's plan (-1: the largest
# that fits the devices, so one preset runs on any slice it fits): the RL micro-batch (a multiple
# of the data x fsdp mesh size that divides the mini-batch), the self-analysis batch and the
# rollout waves; environments in 16 worker processes per host (a hung or crashed one is killed
# and restarted, its episodes flagged).
PAPER_SCALE = {"model.dtype": "bfloat16", "model.param_dtype": "float32", "model.remat": "save_dots_except_mlp",
               "stage1.sft_remat": "full", "model.attention": "dot_product", "mesh.data": -1, "mesh.fsdp": -1,
               "train.micro_batch_size": -1, "analysis.batch_size": -1, "rollout.wave_rows": -1,
               "env.num_workers": 16}

# The paper's stage-1 annotator: a strong external model (GLM-5.2 at temperature 0) behind an
# OpenAI-compatible endpoint, which the run must be given (stage1.openai_base_url or
# $OPENAI_BASE_URL, stage1.openai_model; refused without, exit 2). ``stage1.analyzer=self`` (the
# base model annotates itself) is accepted when set explicitly: a deviation (docs/METHOD.md §2.2).
PAPER_ANNOTATOR = {"stage1.analyzer": "openai"}


def set_keys(c: ml_collections.ConfigDict, values: Mapping[str, object]) -> None:
    """Set existing dotted keys of ``c`` (``{"rl.num_updates": 2}``); an unknown key is a KeyError."""
    for dotted, value in values.items():
        *parents, leaf = dotted.split(".")
        node = c
        for part in parents:
            node = node[part]
        if leaf not in node:
            raise KeyError(f"config has no key {dotted!r}")
        node[leaf] = value


def with_preset(c: ml_collections.ConfigDict, preset: str, *, local: Mapping[str, int],
                paper: Mapping[str, object] | None = None,
                tiny: Mapping[str, object] | None = None) -> ml_collections.ConfigDict:
    """Apply one of `PRESETS` to a benchmark's config and lock it.

    ``local``: the keyword arguments of `apply_local` (the benchmark's laptop scale); ``paper`` and
    ``tiny``: dotted keys set for that preset (after `PAPER_SCALE` for ``paper``, after
    `apply_tiny` for ``tiny``).
    """
    if preset == "local":
        apply_local(c, **local)
    elif preset == "paper":
        set_keys(c, {**PAPER_SCALE, **PAPER_ANNOTATOR, **(paper or {})})
    elif preset == "tiny":
        apply_tiny(c)
        set_keys(c, tiny or {})
    else:
        raise ValueError(f"unknown preset {preset!r}: {' | '.join(PRESETS)}")
    c.lock()
    return c


def apply_local(c: ml_collections.ConfigDict, *, stage1_tasks: int, max_steps: int, prompt_tokens: int,
                analysis_prompt_tokens: int, eval_tasks: int, response_tokens: int = 48,
                format_warmup_tasks: int = 0) -> None:
    """The laptop-CPU scale shared by every benchmark's ``local`` preset (embedded SmolLM2-135M):
    a demonstration of the whole method on a 2-core CPU in under half an hour and about 5 GB of
    memory (the search preset's 1024-token prompts), not a training run (two RL updates of two tasks).

    Stage 1 has no external annotator offline and SmolLM2-135M cannot yet write the JSON skill
    itself, so the model-free template analyzer plays the annotator's role: stage-1 SFT then
    teaches the policy the skill format, and in stage 2 the policy writes its own skills (docs/METHOD.md §8.16).
    ``format_warmup_tasks``: scripted acting turns in the SFT (docs/METHOD.md §2.4). Every
    training step rematerialises the decoder layers (``model.remat``): the residuals of 30
    unrematerialised layers take several GB at these lengths; an SFT batch is one micro-batch
    (no parameter-sized gradient accumulator beside the gradients); ``low_memory`` and 16-row
    sampler waves keep the run's peak resident memory at 3.7 GB with 512-token prompts and 4.8 GB
    with the search preset's 1024 (README, default run).
    """
    _small_run(c, stage1_tasks=stage1_tasks, sft_epochs=2, answer_tokens=96, analysis_tokens=96,
               analysis_prompt_tokens=analysis_prompt_tokens, group_size=4, max_steps=max_steps,
               prompt_tokens=prompt_tokens, response_tokens=response_tokens, mini_batch_size=32,
               eval_tasks=eval_tasks)
    c.stage1.sft_lr = 5e-5
    c.stage1.format_warmup_tasks = format_warmup_tasks
    c.analysis.batch_size = 16
    c.model.remat = "full"
    c.stage1.sft_micro_batch_size = c.stage1.sft_batch_size  # one micro-batch: no gradient-accumulation buffer
    c.rl.audit_gates = False  # a diagnostic (one more teacher forward per update) the demonstration can spare
    c.low_memory = True  # ~1 GB less at the train step's peak for ~5 s per update
    c.train.micro_batch_size = 2  # RL micro-batches of 2 rows: smaller activations, no slower on CPU
    c.rollout.wave_rows = 16  # at most 16 episodes per generate call: the 20-question eval in 16 + 4 rows, not 32


def apply_tiny(c: ml_collections.ConfigDict) -> None:
    """A random 2-layer model and minimal counts: the whole pipeline in about a minute."""
    _small_run(c, stage1_tasks=2, sft_epochs=1, answer_tokens=32, analysis_tokens=24, analysis_prompt_tokens=1024,
               group_size=2, max_steps=2, prompt_tokens=768, response_tokens=16, mini_batch_size=8, eval_tasks=2)
    c.model.random_init = True
    c.analysis.analyzer = "heuristic"
    c.train.lr = 1e-4


def _small_run(c: ml_collections.ConfigDict, *, stage1_tasks: int, sft_epochs: int, answer_tokens: int,
               analysis_tokens: int, analysis_prompt_tokens: int, group_size: int, max_steps: int,
               prompt_tokens: int, response_tokens: int, mini_batch_size: int, eval_tasks: int) -> None:
    """What the ``local`` and ``tiny`` presets share: stage 1 annotated by the model-free template
    analyzer with small SFT batches, two RL updates of two tasks each with a checkpoint after
    every update, micro-batches of 4 rows; the counts and token budgets given."""
    c.stage1.analyzer = "heuristic"
    c.stage1.num_tasks = stage1_tasks
    c.stage1.group_size = 2
    c.stage1.sft_epochs = sft_epochs
    c.stage1.sft_batch_size = 4
    c.stage1.sft_micro_batch_size = 2
    c.stage1.max_answer_tokens = answer_tokens
    c.analysis.max_new_tokens = analysis_tokens
    c.analysis.max_prompt_tokens = analysis_prompt_tokens
    c.rollout.group_size = group_size
    c.rollout.max_steps = max_steps
    c.rollout.max_prompt_tokens = prompt_tokens
    c.rollout.max_teacher_prompt_tokens = prompt_tokens + 256
    c.rollout.max_response_tokens = response_tokens
    c.rl.num_updates = 2
    c.rl.tasks_per_update = 2
    c.rl.mini_batch_size = mini_batch_size
    c.rl.checkpoint_every = 1
    c.train.micro_batch_size = 4
    c.eval.num_tasks = eval_tasks
