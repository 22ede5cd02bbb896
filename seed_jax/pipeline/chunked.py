"""Collect and eval rollouts in chunks whose finished episodes survive a preemption.

A stage's task list is rolled out chunk by chunk, each of ``run.rollout_chunk_episodes`` episodes
per host in whole tasks (`chunk_size`; 0: one chunk). After a chunk every host holds its trajectories
(`host_rollouts` gathers them), host 0 appends them to the stage's part file
``parts/<stage>/<name>.jsonl`` (`seed_jax.jsonl.append_lines`, local or ``gs://``), and every
host asks `preemption_requested` together: when any host was told to stop, every host raises
`Preempted` (the launcher prints the line and exits 0). A relaunch reads the part (host 0 reads
it and every host receives its lines through `gather_lines`, so the hosts need not share a disk),
keeps its whole tasks and rolls out only the tasks after them.

Same episodes whatever the chunks: chunk ``[a, b)`` runs with ``task_offset = a``, so episode
``n`` of task ``g`` keeps slot ``g N + n`` and group ``g`` (its sampling stream and env seed,
`host_rollouts`). A chunked run samples the episodes of one unchunked run (tokens, rewards; the
log-probs up to the rounding of another batch composition, as with ``rollout.wave_rows``), and a
preempted run plus its relaunch writes the file of an uninterrupted run with the same chunks.

A part file's first line says what it holds (``{"part", "tasks", "group_size", "seed",
"policy"}``); a part with another first line (left by a launch with another policy or task
list) is started over, and trajectories past its last whole task are dropped. `Run.mark_done`
and `Run.clear_done` remove ``parts/<stage>/``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence

import jax
from etils import epath

from seed_jax.jsonl import append_lines, read_jsonl
from seed_jax.paths import write_text_atomic
from seed_jax.pipeline.multihost import gather_lines, host_rollouts
from seed_jax.pipeline.run import Run
from seed_jax.rollout.policy import Policy
from seed_jax.rollout.trajectory import Trajectory
from seed_jax.train.preemption import Preempted, preemption_requested

log = logging.getLogger("seed_jax")


def chunk_size(episodes: int, group_size: int, n_tasks: int, hosts: int) -> int:
    """Tasks in one chunk: ``max(episodes // group_size, 1) * hosts``, ``episodes`` per host in
    whole tasks of ``group_size`` episodes (``episodes`` 0: all ``n_tasks``); at least 1."""
    if not episodes:
        return max(n_tasks, 1)
    return max(episodes // group_size, 1) * hosts


def chunked_rollouts(run: Run, backend, policy: Policy, tasks: Sequence[dict], settings, *, seed: int, tag: str,
                     stage: str | None = None, name: str = "",
                     task_skills: Sequence[str | None] | None = None) -> list[Trajectory]:
    """Every host's trajectories of ``tasks`` in task order, on every host (every host calls it
    together), as `host_rollouts` with ``gather=True``. ``stage`` (None: one chunk, nothing
    kept, as `host_rollouts`): roll out in chunks kept in ``parts/<stage>/<name>.jsonl``,
    continuing after the tasks a preempted launch finished, and raise `Preempted` after a chunk
    when any host was asked to stop."""
    if stage is None:
        return host_rollouts(backend, policy, tasks, settings, gather=True, seed=seed, tag=tag,
                             task_skills=task_skills)
    group = settings.group_size
    part = run.path("parts", stage, f"{name}.jsonl")
    header = {"part": name, "tasks": len(tasks), "group_size": group, "seed": seed,
              "policy": f"{policy.source}@{policy.version}"}
    out = read_part(part, header, group)
    start = len(out) // group
    if start:
        log.info("%s %s: %d of %d tasks already rolled out (%s); rolling out the rest", stage, name, start,
                 len(tasks), part)
    size = chunk_size(run.config.run.rollout_chunk_episodes, group, len(tasks), jax.process_count())
    for a in range(start, len(tasks), size):
        b = min(a + size, len(tasks))
        got = host_rollouts(backend, policy, tasks[a:b], settings, gather=True, seed=seed, tag=tag, task_offset=a,
                            task_skills=None if task_skills is None else task_skills[a:b])
        if jax.process_index() == 0:
            append_lines(part, [t.to_json() for t in got])
        out += got
        if preemption_requested():  # any host told to stop: every host stops after this chunk
            raise Preempted(stage=stage, progress=f"{b} of {len(tasks)} tasks of {name} (their episodes kept)")
    return out


def read_part(part: epath.Path, header: dict, group_size: int) -> list[Trajectory]:
    """The trajectories of the whole tasks in ``part`` whose first line is ``header``, on every
    host (host 0 reads, every host calls it). Host 0 leaves the file holding exactly ``header``
    and those trajectories (one atomic write)."""
    lines: list[str] = []
    if jax.process_index() == 0:
        lines = _whole_tasks(part, header, group_size)
        write_text_atomic(part, "".join(line + "\n" for line in [json.dumps(header), *lines]))
    return [Trajectory.from_json(line) for line in gather_lines(lines)]


def _whole_tasks(part: epath.Path, header: dict, group_size: int) -> list[str]:
    """The JSON lines of the first whole tasks' trajectories of ``part`` (host 0); [] when it is
    missing, unreadable or was written for something else than ``header``."""
    if not part.exists():
        return []
    try:
        records = read_jsonl(part)  # a line torn by a kill at the end is skipped
        trajs = [Trajectory.from_dict(r) for r in records[1:]]
    except (ValueError, TypeError, KeyError) as e:
        log.warning("%s: unreadable (%s); its tasks are rolled out again", part, e)
        return []
    if not records or records[0] != header:
        if records:
            log.warning("%s: written for %s, not %s; its tasks are rolled out again", part, records[0], header)
        return []
    whole = trajs[:len(trajs) // group_size * group_size]
    if [t.group_id for t in whole] != [k // group_size for k in range(len(whole))]:
        log.warning("%s: its trajectories are not the first tasks' in order; they are rolled out again", part)
        return []
    return [t.to_json() for t in whole]
