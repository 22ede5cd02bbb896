"""Ahead-of-time plan of a run: every program compiled for a target, before any rollout.

``python -m seed_jax.plan --config=configs/alfworld.py:paper --config.model.path=DIR --target=tpu:v5e:4x4``
compiles the train step, the SFT step, the log-prob passes and the sampler's prefill and decode
for the target's devices from abstract arguments (``DIR`` needs only a ``config.json``) and prints,
per program and per device, memory against HBM, FLOPs, collective bytes and a roofline estimate
(`seed_jax.plan.analysis`), then ``fits: yes|no``.

Modules: `targets` (target spellings, hardware figures), `programs` (the run's programs as
jitted functions and abstract arguments), `hlo` (FLOPs, bytes and collectives read from the
compiled HLO, loop trip counts applied), `analysis` (compile, measure, format).
"""
