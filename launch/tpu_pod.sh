#!/usr/bin/env bash
# Run seed_jax on every worker of a Cloud TPU pod slice (multi-controller JAX: one process per host).
#
#   TPU_NAME=my-pod ZONE=us-central2-b CONFIG=configs/alfworld.py:paper WORKDIR=gs://my-bucket/runs/alf3b \
#   MODEL=/models/Qwen2.5-3B-Instruct STAGE_IN="/models/Qwen2.5-3B-Instruct=gs://my-bucket/models/Qwen2.5-3B-Instruct" \
#   bash launch/tpu_pod.sh
#
# Steps (launch/README.md, "On a pod"):
#   1. the repository at HEAD is copied to REPO_DIR on every worker (a `git archive`; COPY_REPO=0 skips it);
#   2. every worker runs launch/host_setup.sh: pip installs the project with the pinned jax[tpu] and the
#      bucket file systems, and copies STAGE_IN (model, env data) to its local disk once;
#   3. with RETRIEVER_CORPUS set (search), worker 0 starts the BM25 retriever (python -m seed_jax.envs.search.server)
#      on port RETRIEVER_PORT and every host is pointed at it (else pass --config.env.retriever_url in EXTRA);
#   4. every worker runs python -m seed_jax.launch with the same flags. WORKDIR should be a gs:// bucket
#      path: every host reads it, host 0 writes the shared files, the checkpoints are written by all hosts
#      together, and the compilation cache is <WORKDIR>/xla_cache (shared, kept across restarts).
# Rerunning this script (by hand or by a scheduler after a preemption) resumes the run: finished stages are
# skipped and RL continues from the newest checkpoint in WORKDIR. RETRIES=n reruns step 4 up to n times
# when it exits non-zero.
set -euo pipefail
: "${TPU_NAME:?set TPU_NAME}" "${ZONE:?set ZONE}" "${CONFIG:?set CONFIG}" "${WORKDIR:?set WORKDIR}"
cd "$(dirname "$0")/.."
REPO_DIR=${REPO_DIR:-seed_jax}  # relative to the worker's home directory
NUM_WORKERS=${NUM_WORKERS:-$(gcloud compute tpus tpu-vm describe "$TPU_NAME" --zone "$ZONE" \
  --format='value(networkEndpoints.len())')}
EXTRA=${EXTRA:-}
MODEL_FLAG=${MODEL:+--config.model.path=$MODEL}
RETRIEVER_PORT=${RETRIEVER_PORT:-8000}
on_all() { gcloud compute tpus tpu-vm ssh "$TPU_NAME" --zone "$ZONE" --worker=all --command "$1"; }

if [ "${COPY_REPO:-1}" = 1 ]; then
  git archive --format=tar.gz -o /tmp/seed_jax_src.tgz HEAD
  gcloud compute tpus tpu-vm scp /tmp/seed_jax_src.tgz "$TPU_NAME":seed_jax_src.tgz --zone "$ZONE" --worker=all
  on_all "mkdir -p $REPO_DIR && tar -xzf seed_jax_src.tgz -C $REPO_DIR"
fi
on_all "cd $REPO_DIR && ACCEL=tpu STAGE_IN='${STAGE_IN:-}' SKIP_INSTALL=${SKIP_INSTALL:-0} bash launch/host_setup.sh"

if [ -n "${RETRIEVER_CORPUS:-}" ]; then
  gcloud compute tpus tpu-vm ssh "$TPU_NAME" --zone "$ZONE" --worker=0 --command "cd $REPO_DIR && \
    (curl -s -o /dev/null http://localhost:$RETRIEVER_PORT/health || nohup python -m seed_jax.envs.search.server \
      --corpus $RETRIEVER_CORPUS --port $RETRIEVER_PORT > retriever.log 2>&1 &)"
  HOST0=$(gcloud compute tpus tpu-vm describe "$TPU_NAME" --zone "$ZONE" --format='value(networkEndpoints[0].ipAddress)')
  EXTRA="--config.env.retriever_url=http://$HOST0:$RETRIEVER_PORT/retrieve $EXTRA"
fi

# On TPU VMs jax.distributed.initialize() finds the coordinator by itself: the launcher calls it when
# JAX_NUM_PROCESSES > 1 or JAX_COORDINATOR_ADDRESS is set; JAX_NUM_PROCESSES is the worker count.
attempt=0
until on_all "cd $REPO_DIR && JAX_NUM_PROCESSES=$NUM_WORKERS python -m seed_jax.launch --config=$CONFIG \
    --workdir=$WORKDIR $MODEL_FLAG $EXTRA"; do
  attempt=$((attempt + 1))
  if [ "$attempt" -gt "${RETRIES:-0}" ]; then exit 1; fi
  echo "launch failed; relaunching on $WORKDIR (it resumes), attempt $attempt of ${RETRIES:-0}" >&2
done
