#!/bin/bash
# Plans of the paper runs (docs/PLANS.md "Plans at paper scale"): one plan at a time, each printed to
# bench/plans/<name>.txt with its figures in bench/plans/<name>.json.
#   bash bench/plan_paper.sh [programs]      e.g. bash bench/plan_paper.sh train_step
# tpu: targets need libtpu (pip install -e ".[tpu-aot]"); gpu: targets compile with XLA:CPU.
set -u
cd "$(dirname "$0")/.."
M=tests/data/plan_models
OUT=bench/plans
PROGRAMS=${1:-}
run() {  # name config model target
  local name=$1 config=$2 model=$3 target=$4
  local sel=()
  [ -n "$PROGRAMS" ] && sel=(--programs="$PROGRAMS") && name="$name.$(echo "$PROGRAMS" | tr ',' '+')"
  echo "== $name: --config=$config --config.model.path=$M/$model --target=$target ${sel[*]}"
  python -m seed_jax.plan --config="$config" --config.model.path="$M/$model" --target="$target" "${sel[@]}" \
    --json="$OUT/$name.json" > "$OUT/$name.txt" 2> >(grep -v -E "^E0000|WARNING|Source Location|libtpu_init|Failed to find host|^$" >&2)
  echo "   exit $? ($(tail -1 "$OUT/$name.txt"))"
}
run qwen2.5-3b_alfworld_v5e-4x4 configs/alfworld.py:paper qwen2.5-3b tpu:v5e:4x4
run qwen2.5-3b_alfworld_h100x8 configs/alfworld.py:paper qwen2.5-3b gpu:h100x8
run qwen2.5-7b_alfworld_v5p-2x2x2 configs/alfworld.py:paper qwen2.5-7b tpu:v5p:2x2x2
run qwen2.5-7b_alfworld_h200x8 configs/alfworld.py:paper qwen2.5-7b gpu:h200x8
run qwen3-1.7b_search_v5e-2x4 configs/search.py:paper qwen3-1.7b tpu:v5e:2x4
