"""The household evidence study: a miniature SEED experiment that runs on a laptop CPU.

- `demos`: noisy expert demonstrations of the household environment (stage-0 data);
- `tokenizer`: the word tokenizer over the household's closed vocabulary;
- `bc`: stage 0, a tiny word-level decoder trained from scratch by behaviour cloning;
- `experiment`: stage 0 once, stage 1 once, then GRPO / SEED / controls x seeds through
  `seed_jax.launch.run_pipeline`;
- `audit`: expert-consistency of every RL step-sample joined with its OPD gate;
- `report`: the markdown table and PNG learning curves.

Entry point: ``python bench/household_study.py [--preset study|ci|tiny] [--out DIR]``.
"""
