#!/bin/bash
# The knobs the plans point at for the TPU slices that the paper presets do not fit
# (README "Plans"): ZeRO-3 over the whole slice instead of each host's chips.
set -u
cd "$(dirname "$0")/.."
M=tests/data/plan_models
F="grep -v -E ^E0000|WARNING|Source.Location|libtpu_init|Failed.to.find.host|^$"
python -m seed_jax.plan --config=configs/alfworld.py:paper --config.model.path=$M/qwen2.5-3b --target=tpu:v5e:4x4 \
  --config.mesh.data=1 --config.mesh.fsdp=16 --programs=train_step \
  --json=bench/plans/qwen2.5-3b_alfworld_v5e-4x4.fsdp16.train_step.json > bench/plans/qwen2.5-3b_alfworld_v5e-4x4.fsdp16.train_step.txt 2>/dev/null
echo "3b v5e fsdp16: exit $?"
python -m seed_jax.plan --config=configs/search.py:paper --config.model.path=$M/qwen3-1.7b --target=tpu:v5e:2x4 \
  --config.mesh.data=1 --config.mesh.fsdp=8 --config.train.micro_batch_size=8 --programs=train_step \
  --json=bench/plans/qwen3-1.7b_search_v5e-2x4.fsdp8-micro8.train_step.json > bench/plans/qwen3-1.7b_search_v5e-2x4.fsdp8-micro8.train_step.txt 2>/dev/null
echo "1.7b v5e fsdp8 micro8: exit $?"
