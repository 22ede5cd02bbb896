"""The household study, end to end, through the project's own pipeline.

Layout of the output directory ``OUT``::

    stage0/policy/            stage-0 BC policy (HF dir + stage0.json)       (once)
    stage0/eval/              pipeline eval of the stage-0 policy (seen, unseen)
    base/                     stage 1: collect (BC policy, T=0.4), scripted annotation,
                              SFT of the analyzer role, and the eval of that checkpoint (once)
    start/seed<k>/            the stage-1 checkpoint evaluated with seed k: the same tasks and
                              sampling streams as the final evaluation of every arm's seed k, so
                              an arm's change from the start is paired per seed
    arms/<arm>/seed<k>/       one RL run: stage1/, sft/ and stages/{collect,annotate,sft}.json
                              copied from base/, then `run_pipeline(config, dir, "rl,eval")`
    probe.json                teacher probe of the stage-1 checkpoint and final GRPO / SEED policies
    results.md, results.json, curves.png, gates.png, audit.png, timings.json

An *arm* is a method of `seed_jax.pipeline.validate` (``sft_grpo`` = GRPO from the stage-1
checkpoint with lambda_opd 0, ``seed``, ``seed_static``, ``seed_shuffled``), a named arm of
`NAMED_ARMS` (``oracle`` = method seed with ``analysis.analyzer = scripted``: the teacher reads
the env's expert analysis of each trajectory instead of the policy's own skill) or a
lambda-sweep arm ``<arm>@<lambda>`` (with ``train.lambda_opd = lambda``). Every
arm starts from the same stage-1 checkpoint and has the same rollout budget and number of
updates; arms differ only in the method switch (and the settings of a named arm, lambda for
sweep arms). Seeds change the RL task order and the sampling seeds (``config.seed``).

The RL stage does not store its trajectories; `step_recorder` is an RL callback (the
``rl_callbacks`` of `seed_jax.launch.run_pipeline`) that appends each update's trajectory
commands to ``rl/step_actions.jsonl`` (for the skill audit).
"""

from __future__ import annotations

import copy
import functools
import json
import logging
import shutil
import time
from pathlib import Path

from seed_jax.experiments.household import archive as study_archive
from seed_jax.experiments.household.audit import STEP_ACTIONS_FILE
from seed_jax.experiments.household.bc import run_stage0
from seed_jax.experiments.household.probe import probe_checkpoints, probe_points
from seed_jax.experiments.household.report import arm_dir, finished, write_report
from seed_jax.jsonl import append_jsonl, repair_torn_tail
from seed_jax.launch import run_pipeline
from seed_jax.pipeline.validate import validate

log = logging.getLogger("seed_jax")

SHARED_STAGES = ("collect", "annotate", "sft")


# arms that are a method with other settings: arm -> (method, {dotted config key: value})
NAMED_ARMS: dict[str, tuple[str, dict]] = {
    "oracle": ("seed", {"analysis.analyzer": "scripted"}),  # SEED with the env's expert skills
}


def arm_settings(arm: str) -> tuple[str, dict]:
    """An arm's method and the config keys it sets: 'seed@0.1' -> ('seed', {'train.lambda_opd':
    0.1}); 'oracle' -> ('seed', {'analysis.analyzer': 'scripted'}) (`NAMED_ARMS`);
    'sft_grpo' -> ('sft_grpo', {})."""
    name, at, lam = arm.partition("@")
    method, keys = NAMED_ARMS.get(name, (name, {}))
    return method, {**keys, **({"train.lambda_opd": float(lam)} if at else {})}


def arm_config(config, arm: str, seed: int):
    """The run config of one arm and seed (a copy; ``config`` is not changed), validated."""
    method, keys = arm_settings(arm)
    c = copy.deepcopy(config)
    c.method = method
    c.seed = int(seed)
    for key, value in keys.items():
        section, name = key.split(".")
        c[section][name] = value
    validate(c)
    return c


def _process_seconds() -> float:
    return time.process_time()


def step_recorder(workdir: str | Path):
    """An RL callback that appends every update's trajectories to
    ``<workdir>/rl/step_actions.jsonl`` as ``{traj_id, task_id, won, actions, valid}``, one
    write per update. A last line torn by a killed run is dropped when the recorder is made,
    so a resumed run appends after whole lines only."""
    path = Path(workdir) / STEP_ACTIONS_FILE
    repair_torn_tail(path)  # warns when it drops a line torn by a killed run

    def record(update) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        append_jsonl(path, [{"traj_id": t.traj_id, "task_id": t.task_id, "won": bool(t.won),
                             "actions": [s.action if s.valid else "" for s in t.steps],
                             "valid": [bool(s.valid) for s in t.steps]} for t in update.trajectories])

    return record


def copy_stage1(base: Path, workdir: Path) -> None:
    """Copy the shared stage-1 outputs (stage1/, sft/, their stage markers) into an arm's dir."""
    workdir.mkdir(parents=True, exist_ok=True)
    for sub in ("stage1", "sft"):
        dst = workdir / sub
        if not dst.exists():
            shutil.copytree(base / sub, dst)
    (workdir / "stages").mkdir(exist_ok=True)
    for stage in SHARED_STAGES:
        src = base / "stages" / f"{stage}.json"
        if not src.exists():
            raise FileNotFoundError(f"{src}: stage 1 has not finished in {base}")
        shutil.copy2(src, workdir / "stages" / f"{stage}.json")


def _timed(timings: dict, key: str, fn):
    t0, c0 = time.time(), _process_seconds()
    out = fn()
    timings[key] = {"wall_s": round(time.time() - t0, 1), "cpu_s": round(_process_seconds() - c0, 1)}
    log.info("study: %s took %s", key, timings[key])
    return out


def arms_of(config) -> list[str]:
    arms = list(config.study.methods)
    arms += [f"seed@{lam:g}" for lam in config.study.lambda_sweep]
    return arms


def link_shared(shared: str | Path, out: Path) -> None:
    """Point ``out/stage0`` and ``out/base`` at the finished stage 0 and stage 1 of the study
    directory ``shared`` (symlinks), so RL arms with other RL settings start from the very same
    checkpoint. Raises FileNotFoundError when ``shared`` has not finished stage 1, and
    FileExistsError when ``out`` already has its own, different stage 0 or stage 1."""
    shared = Path(shared).absolute()
    if not finished(shared / "base"):
        raise FileNotFoundError(f"{shared}: stage 1 has not finished there (no base/stages/eval.json)")
    out.mkdir(parents=True, exist_ok=True)
    for sub in ("stage0", "base"):
        link = out / sub
        if link.is_symlink() and link.resolve() == (shared / sub).resolve():
            continue
        if link.exists() or link.is_symlink():
            raise FileExistsError(f"{link} exists and is not a link to {shared / sub}")
        link.symlink_to(shared / sub, target_is_directory=True)


def study_report(config, out_dir: str | Path, arms: list[str] | None = None, seeds: list[int] | None = None,
                 shared: str | Path | None = None, archive: str | Path | None = None) -> dict:
    """The report of the study's finished pieces (`report.finished`), running nothing: after
    linking ``shared``'s stages 0-1 and restoring ``archive``'s pieces that ``out_dir`` lacks (as
    `run_study` does), writes results.md etc. as `run_study` does at its end; a run killed
    part-way is left out of it."""
    out, arms, seeds = _open_study(config, out_dir, arms, seeds, shared, archive)
    return write_report(config, out, arms, seeds)


def _open_study(config, out_dir, arms, seeds, shared, archive) -> tuple[Path, list[str], list[int]]:
    """The study directory with ``shared``'s stages 0-1 linked and ``archive``'s pieces restored,
    and the arms and seeds (the config's where None)."""
    out = Path(out_dir).absolute()
    out.mkdir(parents=True, exist_ok=True)
    if shared is not None:
        link_shared(shared, out)
    if archive is not None:
        restored = study_archive.unpack(archive, out)
        if restored:
            log.info("study: restored from %s: %s", archive, ", ".join(restored))
    arms = arms_of(config) if arms is None else arms
    return out, arms, list(seeds if seeds is not None else config.study.seeds)


def run_study(config, out_dir: str | Path, arms: list[str] | None = None, seeds: list[int] | None = None,
              shared: str | Path | None = None, archive: str | Path | None = None) -> dict:
    """Run (or resume) the whole study; returns the results dict also written to results.json.
    ``shared``: take stage 0 and stage 1 from that study directory (`link_shared`); the RL
    settings of ``config`` may differ from its, the stage-0 / stage-1 ones must not.
    ``archive``: first restore the finished pieces stored there (`archive.unpack`), then store
    each piece as it finishes (`archive.pack`)."""
    out, arms, seeds = _open_study(config, out_dir, arms, seeds, shared, archive)
    timings_path = out / "timings.json"
    timings = json.loads(timings_path.read_text()) if timings_path.exists() else {}
    t_start = time.time()

    def piece_finished():
        """Save the timings and, with an archive, store the finished pieces there."""
        timings_path.write_text(json.dumps(timings, indent=1))
        if archive is not None:
            study_archive.pack(out, archive, probe_seed=seeds[0])

    policy0 = out / "stage0" / "policy"
    if not (policy0 / "stage0.json").exists():
        _timed(timings, "stage0", lambda: run_stage0(config, policy0))
        piece_finished()
    config = copy.deepcopy(config)
    config.model.path = str(policy0)

    s0_eval = out / "stage0" / "eval_run"
    if not finished(s0_eval):
        c = copy.deepcopy(config)
        c.method = "sft_grpo"
        c.eval.checkpoint = str(policy0)
        _timed(timings, "stage0_eval", lambda: run_pipeline(c, s0_eval, "eval"))
        piece_finished()

    base = out / "base"
    if not finished(base):
        c = copy.deepcopy(config)
        c.method = "seed"
        _timed(timings, "stage1", lambda: run_pipeline(c, base, "collect,annotate,sft,eval"))
        piece_finished()

    # seed-outer: each seed's start and arms finish before the next seed begins, so a study
    # stopped part-way holds complete pairs (every arm of a seed) for the paired comparison
    for seed in seeds:
        wd = out / "start" / f"seed{seed}"
        if not finished(wd):
            c = copy.deepcopy(config)
            c.method, c.seed = "sft_grpo", int(seed)
            c.eval.checkpoint = str(base / "sft" / "model")
            _timed(timings, f"start/seed{seed}", functools.partial(run_pipeline, c, wd, "eval"))
            piece_finished()
        for arm in arms:
            wd = arm_dir(out, arm, seed)
            if finished(wd):
                continue
            c = arm_config(config, arm, seed)
            copy_stage1(base, wd)
            _timed(timings, f"{arm}/seed{seed}", functools.partial(run_pipeline, c, wd, "rl,eval", [step_recorder(wd)]))
            piece_finished()
    probe_path = out / "probe.json"
    probed = set(json.loads(probe_path.read_text())) if probe_path.exists() else set()
    if int(config.study.get("probe_tasks", 0)) > 0 and set(probe_points(out, arms, seeds)) - probed:
        probe = _timed(timings, study_archive.PROBE_TIMING, lambda: probe_checkpoints(config, out, arms, seeds))
        probe_path.write_text(json.dumps(probe, indent=1))
        piece_finished()
    timings["study_wall_s_this_call"] = round(time.time() - t_start, 1)
    piece_finished()
    return write_report(config, out, arms, seeds)
