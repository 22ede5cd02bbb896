#!/usr/bin/env bash
# Prepare one host of a pod / multi-node run; run from the repository root, on every host.
# Idempotent: a restarted job runs it again and only what is missing is done.
#
#   ACCEL=tpu|cuda12|cpu   which pinned jax wheel to install (jax[tpu] / jax[cuda12] of the jax version
#                          pyproject.toml pins for them)
#   STAGE_IN="DEST=SRC ..."  copies made once per host before the run, e.g. the model and the env data:
#                          STAGE_IN="/models/Qwen2.5-3B-Instruct=gs://b/models/Qwen2.5-3B-Instruct /data/alfworld=gs://b/data/alfworld"
#                          (SRC a gs:// URL, copied with `gcloud storage cp -r`, or a local / NFS path; skipped
#                          when DEST exists). The model is read from local disk: pass --config.model.path=DEST.
#   SKIP_INSTALL=1         the environment is already installed (e.g. a container image)
set -euo pipefail
cd "$(dirname "$0")/.."
ACCEL=${ACCEL:?set ACCEL to tpu, cuda12 or cpu}
if [ "${SKIP_INSTALL:-0}" != 1 ]; then
  case "$ACCEL" in
    tpu) EXTRAS="envs,gcs,tpu" ;;
    cuda12) EXTRAS="envs,gcs,cuda12" ;;
    cpu) EXTRAS="envs,gcs" ;;
    *) echo "ACCEL=$ACCEL: expected tpu, cuda12 or cpu" >&2; exit 2 ;;
  esac
  # the project with the bucket file systems (gcsfs, google-cloud-storage) and the pinned jax wheel
  python -m pip install --disable-pip-version-check -q -e ".[$EXTRAS]"
fi
for pair in ${STAGE_IN:-}; do
  dest=${pair%%=*} src=${pair#*=}
  if [ -e "$dest" ]; then continue; fi
  mkdir -p "$(dirname "$dest")"
  case "$src" in
    gs://*) gcloud storage cp -r "$src" "$dest.part" ;;
    *) cp -r "$src" "$dest.part" ;;
  esac
  mv "$dest.part" "$dest"  # a copy cut short by a restart is redone, never used half
done
python -c "import jax, seed_jax; print('host ready: jax', jax.__version__)"  # no device touched here
