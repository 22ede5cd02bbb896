"""A run directory: the config, stage markers, logs, and the shared objects every stage uses.

Layout of ``workdir``::

    config.json                 the resolved config of the first launch
    stages/<stage>.json         written when a stage finishes (its summary); finished stages are skipped
    stage1/trajectories.jsonl   base-policy rollouts        (collect)
    stage1/sft.jsonl            accepted skill records       (annotate); stage1/sft_heldout.jsonl
    sft/model/                  HF directory of the SFT policy (sft)
    rl/ckpt/<update>/           orbax checkpoints of the RL train state (rl)
    rl/final_model/             HF directory of the final policy
    eval/*.json, eval/results.md  evaluation results (eval)
    metrics.jsonl, tb/, skills.jsonl
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import jax

from seed_jax.metrics import MetricsWriter, SkillLog
from seed_jax.pipeline.environments import make_benchmark
from seed_jax.pipeline.methods import switches

log = logging.getLogger("seed_jax")


class Run:
    def __init__(self, config, workdir):
        self.config = config
        self.workdir = Path(workdir).absolute()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.bench = make_benchmark(config.env)
        self.switches = switches(config)
        main = jax.process_index() == 0
        self.metrics = MetricsWriter(self.workdir, enabled=main)
        self.skill_log = SkillLog(self.workdir, enabled=main)
        cfg_file = self.workdir / "config.json"
        if main and not cfg_file.exists():
            cfg_file.write_text(json.dumps(config.to_dict(), indent=1, default=str))

    def path(self, *parts) -> Path:
        p = self.workdir.joinpath(*parts)
        p.parent.mkdir(parents=True, exist_ok=True)
        return p

    def done(self, stage: str) -> dict | None:
        f = self.workdir / "stages" / f"{stage}.json"
        return json.loads(f.read_text()) if f.exists() else None

    def mark_done(self, stage: str, summary: dict) -> None:
        if jax.process_index() != 0:
            return
        f = self.path("stages", f"{stage}.json")
        tmp = f.with_suffix(".tmp")
        tmp.write_text(json.dumps(summary, indent=1, default=float))
        tmp.replace(f)

    def policy_dir(self) -> Path | None:
        """The newest trained policy: RL final > SFT > None (the base model)."""
        for p in (self.workdir / "rl" / "final_model", self.workdir / "sft" / "model"):
            if (p / "config.json").exists():
                return p
        return None

    def close(self) -> None:
        self.metrics.close()
