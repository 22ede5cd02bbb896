"""A run directory: the config, stage markers, logs, and the shared objects every stage uses.

Layout of ``workdir``::

    config.json                 the resolved config (compared on every relaunch: `check_relaunch`)
    config.history.jsonl        one line per relaunch that changed config.json (`record_config_change`):
                                the config replaced, the keys changed (old -> new), at which update
    stages/<stage>.json         written when a stage finishes (its summary); finished stages are skipped
                                (`stage_plan`), a stage that runs again drops the later stages' markers
    stage1/trajectories.jsonl   base-policy rollouts        (collect)
    stage1/sft.jsonl            accepted skill records       (annotate); stage1/sft_heldout.jsonl
    sft/model/                  HF directory of the SFT policy (sft)
    rl/ckpt/<n>/                orbax checkpoints of the RL train state after update n (1-based, rl)
    rl/final_model/             HF directory of the final policy
    eval/*.json, eval/results.md  evaluation results (eval)
    parts/<stage>/*.jsonl       the finished chunks of an unfinished collect / eval (`seed_jax.pipeline.chunked`),
                                removed when the stage is marked done
    rl/transcripts.jsonl        a sample of each update's trajectories in full (rl.transcripts_per_update)
    metrics.jsonl, tb/, skills.jsonl, step_gates.jsonl
    wandb_run_id, wandb/        the Weights & Biases run of this directory (tracking.wandb)
    summary.md                  the end-of-run summary in plain words (`seed_jax.pipeline.summary`)

``workdir`` may be local or a bucket (``gs://b/run``): every path here is a `seed_jax.paths.run_path`
(``etils.epath``), the scheme kept. Host 0 writes the shared files (config.json, markers, logs);
every host reads them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import time
from collections.abc import Mapping
from pathlib import Path

import jax
from etils import epath

from seed_jax.jsonl import append_jsonl, read_jsonl
from seed_jax.metrics import MetricsWriter, SkillLog, WandbSettings
from seed_jax.paths import run_path, write_text_atomic
from seed_jax.pipeline.environments import make_benchmark
from seed_jax.pipeline.methods import switches
from seed_jax.pipeline.residency import RESIDENCY_FILE, PhaseRecorder
from seed_jax.pipeline.validate import STAGES, ConfigValueError

log = logging.getLogger("seed_jax")
# the scalars beside a run's hparams in TensorBoard's HPARAMS tab (keys of seed_jax.report's contract)
HPARAM_METRICS = ("rollout/success_rate", "rollout/invalid_rate", "rollout/return", "eval/success_rate")


class Run:
    def __init__(self, config, workdir):
        self.config = config
        self.workdir = run_path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.bench = make_benchmark(config.env)
        self.switches = switches(config)
        main = jax.process_index() == 0
        self.metrics = MetricsWriter(self.workdir, enabled=main, wandb=wandb_settings(config))
        self.skill_log = SkillLog(self.workdir, enabled=main)
        self.phases = PhaseRecorder(config, self.workdir / RESIDENCY_FILE)  # residency.jsonl
        cfg_file = self.workdir / "config.json"
        if main and not cfg_file.exists():
            write_text_atomic(cfg_file, json.dumps(config.to_dict(), indent=1, default=str))
        if main:  # TensorBoard: the config as text and hparams (each launch: a resumed run shows its own)
            self.metrics.write_config(config.to_dict(), flat_config(config), HPARAM_METRICS)

    def path(self, *parts) -> epath.Path:
        p = self.workdir.joinpath(*parts)
        p.parent.mkdir(parents=True, exist_ok=True)
        return p

    def done(self, stage: str) -> dict | None:
        return stage_marker(self.workdir, stage)

    def clear_done(self, stage: str) -> None:
        """Drop a stage's marker and the episodes of its unfinished rollouts (its results are
        stale: an earlier stage runs again)."""
        f = self.workdir / "stages" / f"{stage}.json"
        if jax.process_index() == 0 and f.exists():
            log.info("stage %s: marked unfinished (an earlier stage runs again)", stage)
            f.unlink()
        self._drop_parts(stage)

    def mark_done(self, stage: str, summary: dict) -> None:
        if jax.process_index() != 0:
            return
        write_text_atomic(self.path("stages", f"{stage}.json"), json.dumps(summary, indent=1, default=float))
        self._drop_parts(stage)

    def _drop_parts(self, stage: str) -> None:
        """Remove ``parts/<stage>/`` (host 0): the episodes a preempted stage kept for its relaunch."""
        parts = self.workdir / "parts" / stage
        if jax.process_index() == 0 and parts.exists():
            parts.rmtree()

    def policy_dir(self) -> epath.Path | None:
        """The newest trained policy: RL final > SFT > None (the base model)."""
        for p in (self.workdir / "rl" / "final_model", self.workdir / "sft" / "model"):
            if (p / "config.json").exists():
                return p
        return None

    def close(self) -> None:
        self.metrics.close()


def wandb_settings(config) -> WandbSettings | None:
    """The W&B settings of ``config.tracking`` with the run config to log; None when W&B is off."""
    t = config.get("tracking")
    if t is None or not t.wandb:
        return None
    return WandbSettings(project=t.wandb_project, entity=t.wandb_entity, mode=t.wandb_mode,
                         config=json.loads(json.dumps(config.to_dict(), default=str)))


# ------------------------------------------------------------------------------- relaunching

# Keys that change how a run is carried out, not what it computes (up to the summation order of a
# different mesh): a relaunch may change them freely. Raising ``rl.num_updates`` is allowed too
# (RL continues from its last checkpoint); every other difference is refused without ``--force``.
RESULT_NEUTRAL_KEYS = frozenset({
    "stages", "env.num_workers", "env.step_timeout_s", "eval.checkpoint", "rl.checkpoint_every",
    "rl.keep_checkpoints", "rl.eval_every", "rl.audit_gates", "low_memory", "rl.transcripts_per_update", "stage1.openai_api_key_env",
    "stage1.openai_max_concurrency", "model.remat", "stage1.sft_remat", "model.attention", "tracking.wandb", "tracking.wandb_project",
    "tracking.wandb_entity", "tracking.wandb_mode", "mesh.data", "mesh.fsdp", "mesh.tensor", "xla.cache_dir",
    "rollout.wave_rows", "sampler.backend", "sampler.tensor_parallel", "sampler.prefill_scratch_mb",
    "run.stall_timeout_s", "run.rollout_chunk_episodes"})


# overrides left out of the default run directory's hash: the method is in its name, and keys that do
# not change results, or continue a run (a raised rl.num_updates), keep the directory
WORKDIR_NAME_NEUTRAL = RESULT_NEUTRAL_KEYS | {"method", "rl.num_updates"}


def default_workdir(config, preset: str, overrides: Mapping[str, object]) -> Path:
    """``runs/<env>-<preset>-<method>``, plus ``-<6 hex>`` of the overrides that change results."""
    name = f"{config.env.name}-{preset}-{config.method}"
    kept = {k: v.to_dict() if hasattr(v, "to_dict") else v for k, v in overrides.items()
            if k not in WORKDIR_NAME_NEUTRAL}
    if kept:
        blob = json.dumps(kept, sort_keys=True, default=str)
        name += "-" + hashlib.sha256(blob.encode()).hexdigest()[:6]
    return Path("runs") / name


def config_preset(spec: str) -> str:
    """The preset of a ``--config=<file>[:preset]`` spelling (default ``local``)."""
    return spec.split(":", 1)[1] if ":" in spec else "local"


class ConfigChangedError(ConfigValueError):
    """A relaunch on a run directory whose config.json differs in keys that change results."""


def flat_config(config) -> dict[str, object]:
    """``{"rl.num_updates": 2, ...}``: the dotted keys of a ConfigDict or dict, values as JSON reads them."""
    tree = config.to_dict() if hasattr(config, "to_dict") else config
    tree = json.loads(json.dumps(tree, default=str))
    out: dict[str, object] = {}

    def walk(node, prefix):
        for k, v in node.items():
            if isinstance(v, dict) and v:
                walk(v, f"{prefix}{k}.")
            else:
                out[f"{prefix}{k}"] = v

    walk(tree, "")
    return out


def read_config(workdir) -> dict[str, object] | None:
    """The flattened config.json of a run directory (None: none there yet)."""
    f = run_path(workdir) / "config.json"
    return flat_config(json.loads(f.read_text())) if f.exists() else None


def write_config(config, workdir) -> None:
    """config.json of the run directory, written atomically (host 0)."""
    if jax.process_index() != 0:
        return
    f = run_path(workdir) / "config.json"
    f.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(f, json.dumps(config.to_dict(), indent=1, default=str))


@dataclasses.dataclass(frozen=True)
class Relaunch:
    """What a launch finds in its run directory: ``old`` is the flattened config.json (None on a
    first launch), ``changed`` the keys that differ from it (all accepted), ``forced`` whether
    ``--force`` accepted differences that change results."""

    old: dict[str, object] | None
    changed: tuple[str, ...] = ()
    forced: bool = False


def check_relaunch(config, workdir, force: bool = False) -> Relaunch:
    """Compare ``config`` with the run directory's config.json.

    Raises `ConfigChangedError` listing every differing key that changes results (not in
    `RESULT_NEUTRAL_KEYS`, and not a raised ``rl.num_updates``), unless ``force``.
    """
    old = read_config(workdir)
    if old is None:
        return Relaunch(None)
    new = flat_config(config)
    missing = object()
    changed = tuple(sorted(k for k in old.keys() | new.keys() if old.get(k, missing) != new.get(k, missing)))

    def raised(k):
        return k == "rl.num_updates" and isinstance(old.get(k), int) and new[k] > old[k]

    refused = [k for k in changed if k not in RESULT_NEUTRAL_KEYS and not raised(k)]
    if refused and not force:
        show = "; ".join(f"{k}: {_show(old, k)} -> {_show(new, k)}" for k in refused)
        raise ConfigChangedError(
            f"{run_path(workdir) / 'config.json'} holds another config; these keys change results: {show}. "
            "Use a new --workdir, or --force to overwrite config.json and continue with the results already "
            "there")
    return Relaunch(old, changed, bool(refused))


CONFIG_HISTORY = "config.history.jsonl"


def updates_done(workdir) -> int:
    """RL updates a run directory holds: the finished rl stage's ``num_updates``, else the newest RL
    checkpoint (``rl/ckpt/<n>``: checkpoint n holds updates 1..n), else 0."""
    marker = stage_marker(workdir, "rl")
    if marker and "num_updates" in marker:
        return int(marker["num_updates"])
    ckpt = run_path(workdir) / "rl" / "ckpt"
    steps = [int(p.name) for p in ckpt.iterdir() if p.name.isdigit()] if ckpt.exists() else []
    return max(steps) if steps else 0


def config_change_line(relaunch: Relaunch, config, at_update: int) -> str:
    """``config changed: train.lr 0.0001 -> 0.0003; rl.epochs 1 -> 2 at update 3`` (``at_update``:
    the first update run under the new config)."""
    new = flat_config(config)
    parts = [f"{k} {_show(relaunch.old or {}, k, bare=True)} -> {_show(new, k, bare=True)}" for k in relaunch.changed]
    return f"config changed{' (--force)' if relaunch.forced else ''}: {'; '.join(parts)} at update {at_update}"


def record_config_change(relaunch: Relaunch, config, workdir) -> tuple[int, str] | None:
    """Before config.json is overwritten by a relaunch whose config differs: append the replaced
    config, the changed keys and the update from which the new config holds to
    ``config.history.jsonl`` (host 0; history is never rewritten, only appended to) and return
    ``(update, event line)`` (`config_change_line`); None when nothing changed."""
    if relaunch.old is None or not relaunch.changed:
        return None
    new = flat_config(config)
    at = updates_done(workdir) + 1
    line = config_change_line(relaunch, config, at)
    if jax.process_index() == 0:
        missing = "(absent)"
        append_jsonl(run_path(workdir) / CONFIG_HISTORY, [{
            "time": time.time(), "at_update": at, "forced": relaunch.forced, "event": line,
            "changed": {k: [relaunch.old.get(k, missing), new.get(k, missing)] for k in relaunch.changed},
            "replaced_config": relaunch.old}])
    return at, line


def read_config_history(workdir) -> list[dict]:
    """The records of ``config.history.jsonl`` (oldest first; [] when the config never changed)."""
    f = run_path(workdir) / CONFIG_HISTORY
    return read_jsonl(f) if f.exists() else []


def _show(flat: dict, key: str, bare: bool = False) -> str:
    if bare and key in flat:
        return str(flat[key])
    return repr(flat[key]) if key in flat else "(absent)"


@dataclasses.dataclass(frozen=True)
class StagePlan:
    """What a launch does with one stage: ``run`` (not finished), ``skip`` (finished), ``reopen``
    (rl finished with fewer updates than ``rl.num_updates``) or ``redo`` (an earlier stage runs again)."""

    stage: str
    action: str
    why: str


def stage_plan(config, workdir, old: dict[str, object] | None = None) -> list[StagePlan]:
    """The requested stages (``config.stages``) in order, each with what a launch will do with it.

    ``old``: the flattened config.json before this launch, which says how many RL updates a finished
    rl stage made when its marker does not (`finished_updates`). Reads only the run directory.
    """
    wanted = {s.strip() for s in config.stages.split(",") if s.strip()}
    plan, dirty = [], False
    for stage in STAGES:
        if stage not in wanted:
            continue
        prev = stage_marker(workdir, stage)
        done = finished_updates(prev, old) if stage == "rl" else None
        if stage == "eval" and config.eval.checkpoint:
            item = StagePlan(stage, "run", f"eval.checkpoint = {config.eval.checkpoint}")
        elif prev is None:
            item = StagePlan(stage, "run", "not finished")
        elif dirty:
            item = StagePlan(stage, "redo", "an earlier stage runs again")
        elif done is not None and done < config.rl.num_updates:
            item = StagePlan(stage, "reopen", f"rl.num_updates raised {done} -> {config.rl.num_updates}: "
                                              "continues from its last checkpoint")
        else:
            item = StagePlan(stage, "skip", "finished")
        dirty = dirty or item.action in ("run", "redo", "reopen")
        plan.append(item)
    return plan


def stage_marker(workdir, stage: str) -> dict | None:
    f = run_path(workdir) / "stages" / f"{stage}.json"
    return json.loads(f.read_text()) if f.exists() else None


def finished_updates(rl_marker: dict | None, old: dict[str, object] | None) -> int | None:
    """RL updates a finished rl stage made: its marker's ``num_updates``, else the old config's
    (None: rl unfinished, or the method trains no policy)."""
    if rl_marker is None or str(rl_marker.get("skipped", "")).startswith("method"):
        return None
    if "num_updates" in rl_marker:
        return int(rl_marker["num_updates"])
    n = (old or {}).get("rl.num_updates")
    return int(n) if isinstance(n, int) else None
