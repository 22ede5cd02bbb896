#!/usr/bin/env bash
# The GRPO tuning runs of the household study (docs/EVIDENCE.md, "Round two"), one seed each, all from the
# stage 0 / stage 1 of one study directory (--shared), with the same seed (same task order).
#
#   bash bench/household_rl_tuning.sh STUDY_DIR OUT_DIR [RUN ...]
#
# STUDY_DIR: a study whose stage 1 has finished (python bench/household_study.py --preset study
# --out STUDY_DIR --arms sft_grpo). RUN: any of round1 A B D E1 E2 (default: all). Each run writes
# OUT_DIR/<run>/results.md. B was stopped early in the README's table (after 8 updates); here it
# runs to the end. Run C of the table (rollouts at 0.5, log-probs untempered) is not possible
# with this code: the train step always scores at rollout.temperature since commit 5484b5a
# (C ran just before it; git checkout 5331965 and pass the same --set keys to the whole study).
set -euo pipefail
study=${1:?study dir}; out=${2:?output dir}; shift 2
runs=("$@"); [ ${#runs[@]} -eq 0 ] && runs=(round1 A B D E1 E2)
common=(--preset study --shared "$study" --arms sft_grpo --seeds 0 --quiet --set study.probe_tasks=0)
big=(--set rl.tasks_per_update=8 --set rollout.group_size=8 --set rl.mini_batch_size=256
     --set rl.num_updates=20 --set rl.eval_every=10 --set rl.checkpoint_every=20)
for run in "${runs[@]}"; do
  case $run in
    round1) sets=(--set rl.tasks_per_update=4 --set rollout.group_size=4 --set rl.mini_batch_size=32
                  --set rl.num_updates=10 --set rl.eval_every=6 --set rl.checkpoint_every=10
                  --set train.lr=1e-4 --set rollout.temperature=1.0) ;;
    A) sets=("${big[@]}" --set train.lr=3e-5 --set rollout.temperature=1.0) ;;
    B) sets=("${big[@]}" --set train.lr=1e-4 --set rollout.temperature=1.0) ;;
    D) sets=("${big[@]}" --set train.lr=1e-4 --set rollout.temperature=0.5) ;;
    E1) sets=(--set rollout.temperature=0.4) ;;  # the study preset (30 updates) at rollout temperature 0.4
    E2) sets=(--set train.lr=2e-4) ;;            # the study preset at lr 2e-4
    *) echo "unknown run $run (round1 A B D E1 E2)" >&2; exit 2 ;;
  esac
  python bench/household_study.py "${common[@]}" --out "$out/$run" "${sets[@]}"
done
