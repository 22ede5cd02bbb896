#!/usr/bin/env bash
# Run seed_jax on N GPU hosts (one process per host, all local GPUs in that process).
#
# On each host i in 0..N-1, from the repository (the same commit on every host):
#   COORD=host0:12345 NUM_HOSTS=N HOST_ID=i CONFIG=configs/webshop.py:paper WORKDIR=gs://my-bucket/runs/ws \
#   MODEL=/models/Qwen2.5-7B-Instruct STAGE_IN="/models/Qwen2.5-7B-Instruct=gs://my-bucket/models/Qwen2.5-7B-Instruct" \
#   bash launch/gpu_multinode.sh
# Under SLURM, `srun --ntasks-per-node=1 bash launch/gpu_multinode.sh` fills COORD / NUM_HOSTS / HOST_ID
# from SLURM_*; with `sbatch --requeue` a requeued job runs the same command and resumes.
#
# Steps (launch/README.md, "On a pod"): launch/host_setup.sh installs the project with the pinned
# jax[cuda12] and the bucket file systems and copies STAGE_IN (model, env data) to local disk once
# (SKIP_INSTALL=1 in a prepared container); then the launcher runs. WORKDIR is a gs:// bucket path
# or a directory every host mounts (NFS); the compilation cache is <WORKDIR>/xla_cache unless
# --config.xla.cache_dir says otherwise. A search run needs a retriever every host reaches:
# pass --config.env.retriever_url=http://<host>:8000/retrieve in EXTRA (python -m seed_jax.envs.search.server).
# Rerunning on the same WORKDIR resumes: finished stages are skipped, RL continues from its newest checkpoint.
set -euo pipefail
cd "$(dirname "$0")/.."
COORD=${COORD:-${SLURM_LAUNCH_NODE_IPADDR:-}:${COORD_PORT:-12345}}
NUM_HOSTS=${NUM_HOSTS:-${SLURM_NTASKS:-1}}
HOST_ID=${HOST_ID:-${SLURM_PROCID:-0}}
: "${CONFIG:?set CONFIG}" "${WORKDIR:?set WORKDIR}"
ACCEL=cuda12 bash launch/host_setup.sh
export JAX_COORDINATOR_ADDRESS=$COORD JAX_NUM_PROCESSES=$NUM_HOSTS JAX_PROCESS_ID=$HOST_ID
export XLA_PYTHON_CLIENT_MEM_FRACTION=${XLA_PYTHON_CLIENT_MEM_FRACTION:-0.9}
exec python -m seed_jax.launch --config="$CONFIG" --workdir="$WORKDIR" \
  ${MODEL:+--config.model.path=$MODEL} ${EXTRA:-}
