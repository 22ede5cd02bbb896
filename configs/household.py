"""Household evidence study: ``python bench/household_study.py --preset study``.

Also usable with the launcher once ``model.path`` points at a stage-0 policy directory:
``python -m seed_jax.launch --config=configs/household.py:study --config.model.path=DIR``.

Presets:

- ``study``: the experiment (stage 0 BC, stage 1 with the scripted analyzer, RL arms of
  `experiments.household.experiment`); about an hour on 2 CPU cores;
- ``ci``: the same study at toy scale, about two minutes;
- ``tiny``: the smallest settings that still run every stage (tests of the plumbing).

Paper hyper-parameters kept (spec section 6): KL coef 0.01 (k3), entropy coef 0.001, PPO clip
0.2 both sides, dual clip 3, lambda_opd 0.01, beta_opd 5, 1 PPO epoch, rollout temperature 1.0,
evaluation temperature 0.4, stage-1 collection temperature 0.4, greedy analyzer, 10 % held out
at stage 1, constant schedule, weight decay 0.01, grad clip 1.0. Changed for a from-scratch
0.6M-parameter model and a 2-core CPU: learning rates (RL 1e-4 instead of 1e-6, stage-1 SFT 5e-5
instead of 5e-6, 2 epochs instead of 3), group size 4 (paper 8), tasks per update, mini-batch size, number of updates,
stage-1 task count, token budgets.
"""

from __future__ import annotations

import ml_collections

from configs.base import base_config

PRESETS = ("study", "ci", "tiny")


def _stage0(preset: str) -> ml_collections.ConfigDict:
    s = ml_collections.ConfigDict()
    s.hidden = 128
    s.layers = 2
    s.heads = 4
    s.kv_heads = 2
    s.num_tasks = 400
    s.task_seed = 1000
    s.episodes_per_task = 1
    s.noise = 0.1
    s.invalid = 0.02
    s.nothing = 0.03
    s.skill_share = 0.3
    s.include_plan = False
    s.restate_task = True
    s.copy_steps = 300
    s.lm_weight = 0.25
    s.steps = 1200
    s.batch_size = 16
    s.lr = 2e-3
    s.warmup_steps = 20
    s.analyzer_steps = 300
    s.analyzer_batch = 8
    s.analyzer_noises = (0.1, 0.3, 0.5)
    s.analyzer_lr = 5e-4
    s.eval_tasks = 32
    s.seed = 0
    return s


def _study(preset: str) -> ml_collections.ConfigDict:
    s = ml_collections.ConfigDict()
    s.methods = ("sft_grpo", "seed", "seed_static", "seed_shuffled")
    s.seeds = (0, 1, 2)
    s.lambda_sweep = ()  # extra SEED arms at these lambda_opd values (reported separately)
    s.probe_tasks = 32  # teacher probe (experiments.household.probe) on this many training tasks; 0 = off
    return s


def get_config(preset: str = "study"):
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}: {' | '.join(PRESETS)}")
    c = base_config()
    c.env.name = "household"
    c.env.num_receptacles = 5
    c.env.num_distractors = 1
    c.env.closed_share = 0.3
    c.env.history_window = 2
    c.env.max_steps = 15
    c.env.num_train_tasks = 256
    c.env.train_seed = 0
    c.env.num_eval_tasks = 48
    c.env.eval_seed = 1
    c.env.eval_splits = ("seen", "unseen")
    c.env.skill_plan = False  # scripted skills without the 'Shortest plan: ...' sentence (shorter)
    c.env.analyzer_max_chars = 3072  # = 3 x analysis.max_prompt_tokens (set below)

    c.stage0 = _stage0(preset)
    c.study = _study(preset)

    c.model.path = ""  # the stage-0 policy directory (the study script sets it)

    c.rollout.group_size = 4
    c.rollout.max_steps = 15
    c.rollout.max_prompt_tokens = 512
    c.rollout.max_response_tokens = 32
    c.rollout.temperature = 1.0
    c.rollout.chunk = 32

    c.stage1.num_tasks = 64
    c.stage1.group_size = 4
    c.stage1.temperature = 0.4
    c.stage1.analyzer = "scripted"
    c.stage1.sft_epochs = 2
    c.stage1.sft_lr = 5e-5
    c.stage1.sft_batch_size = 8
    c.stage1.sft_micro_batch_size = 8
    c.stage1.max_answer_tokens = 192

    c.analysis.analyzer = "self"  # stage 2: the policy writes its own skills (spec)
    c.analysis.max_new_tokens = 192
    c.analysis.max_prompt_tokens = 1024
    c.analysis.batch_size = 32

    c.rl.num_updates = 10
    c.rl.tasks_per_update = 4
    c.rl.mini_batch_size = 32
    c.rl.epochs = 1
    c.rl.checkpoint_every = 10
    c.rl.keep_checkpoints = 1
    c.rl.eval_every = 6  # the 60 % point of 10 updates

    c.train.lr = 1e-4
    c.train.micro_batch_size = 32
    c.train.lambda_opd = 0.01
    c.train.beta_opd = 5.0

    c.eval.num_tasks = 0  # the whole split (num_eval_tasks)
    c.eval.temperature = 0.4

    if preset == "ci":
        c.env.num_train_tasks = 32
        c.env.num_eval_tasks = 8
        c.env.max_steps = 8
        c.rollout.max_steps = 8
        c.stage0.num_tasks = 96
        c.stage0.copy_steps = 20
        c.stage0.steps = 30
        c.stage0.analyzer_steps = 6
        c.stage0.eval_tasks = 8
        c.stage1.num_tasks = 8
        c.stage1.group_size = 2
        c.stage1.sft_epochs = 1
        c.stage1.max_answer_tokens = 64
        c.analysis.max_new_tokens = 64
        c.analysis.max_prompt_tokens = 512
        c.env.analyzer_max_chars = 1536
        c.rl.num_updates = 3
        c.rl.tasks_per_update = 2
        c.rollout.group_size = 2
        c.rl.mini_batch_size = 32
        c.rl.checkpoint_every = 3
        c.rl.eval_every = 2
        c.train.micro_batch_size = 16
        c.study.methods = ("sft_grpo", "seed")
        c.study.seeds = (0,)
        c.study.probe_tasks = 4
    elif preset == "tiny":
        c.env.num_train_tasks = 8
        c.env.num_eval_tasks = 2
        c.env.max_steps = 3
        c.rollout.max_steps = 3
        c.stage0.num_tasks = 32
        c.stage0.copy_steps = 2
        c.stage0.steps = 4
        c.stage0.analyzer_steps = 2
        c.stage0.analyzer_batch = 2
        c.stage0.batch_size = 8
        c.stage0.eval_tasks = 2
        c.stage1.num_tasks = 2
        c.stage1.group_size = 2
        c.stage1.sft_epochs = 1
        c.stage1.sft_batch_size = 4
        c.stage1.sft_micro_batch_size = 4
        c.stage1.max_answer_tokens = 32
        c.analysis.max_new_tokens = 32
        c.analysis.max_prompt_tokens = 512
        c.env.analyzer_max_chars = 1536
        c.rl.num_updates = 2
        c.rl.tasks_per_update = 2
        c.rollout.group_size = 2
        c.rl.mini_batch_size = 16
        c.rl.checkpoint_every = 1
        c.rl.eval_every = 1
        c.train.micro_batch_size = 16
        c.study.methods = ("sft_grpo", "seed")
        c.study.seeds = (0,)
        c.study.probe_tasks = 2
    c.lock()
    return c
