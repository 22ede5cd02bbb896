"""Preemption: a SIGTERM (a TPU VM's notice, ~30 s before it stops) turns into one agreed stop.

A run calls `preemption_requested` at its step boundaries (the RL loop after each update's
checkpoint, collect and eval after each chunk of tasks (`seed_jax.pipeline.chunked`), the
launcher between stages); it returns True on every host at the same boundary
once any host was told to stop. The RL loop then saves, waits for the write and raises
`Preempted`; the launcher prints ``preempted at update k; relaunch to resume`` and exits 0, and a
relaunch resumes from that checkpoint.

Where the notice comes from:

- several processes (`jax.distributed` with its preemption service, on by default): JAX's
  notifier catches SIGTERM and posts the notice to the coordination service, which tells every
  host and starts JAX's sync-point protocol (the step after the fastest host's last
  ``reached_preemption_sync_point`` call: the step orbax's `CheckpointManager.save` also asks
  about). A boundary counts as requested on a host when JAX says the sync point is reached or
  the notice is posted (the notice alone covers a notice that arrives before the first call of
  a resumed run: JAX's counter starts at 0, so its sync point would be step 1, already behind);
- one process (or the service off): `install_sigterm_flag`'s handler sets a flag.

On several hosts the hosts' answers are then combined by an all-gather (any host asked: every
host stops), so every host takes the same decision at the same boundary whatever the notice's
timing on each.
"""

from __future__ import annotations

import logging
import signal

import jax
import numpy as np
from jax._src import distributed  # the coordination client and JAX's preemption sync manager
from jax.experimental import multihost_utils

log = logging.getLogger(__name__)

# the key under which JAX's preemption sync manager posts a notice (xla/tsl preemption_sync_manager.cc)
NOTICE_KEY = "RECEIVED_PREEMPTION_NOTICE"

_sigterm = {"received": False}


class Preempted(Exception):
    """The run stopped on a preemption notice after saving its state at ``update`` (None: between
    stages, at ``stage``'s end; or inside ``stage`` after ``progress``, e.g. ``"4 of 8 tasks"`` of
    a collect whose finished episodes are kept)."""

    def __init__(self, update: int | None = None, stage: str | None = None, progress: str | None = None):
        self.update, self.stage, self.progress = update, stage, progress
        if update is not None:
            where = f"at update {update}"
        elif progress is not None:
            where = f"in stage {stage} after {progress}"
        else:
            where = f"at the end of stage {stage}"
        super().__init__(f"preempted {where}; relaunch to resume")


def _on_sigterm(signum, frame) -> None:
    _sigterm["received"] = True
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM stops the process at once
    log.warning("SIGTERM: stopping at the next step boundary (a second SIGTERM kills the process)")


def install_sigterm_flag() -> None:
    """Catch SIGTERM into a flag instead of dying (call in the main thread, before
    ``jax.distributed.initialize``: JAX's preemption notifier, when it starts, replaces this
    handler with its own, which posts the notice instead)."""
    _sigterm["received"] = False
    signal.signal(signal.SIGTERM, _on_sigterm)


def _jax_preemption_service() -> bool:
    return distributed.global_state.client is not None and \
        distributed.global_state.preemption_sync_manager is not None


def _notice_posted() -> bool:
    try:
        return distributed.global_state.client.key_value_try_get(NOTICE_KEY) is not None
    except Exception:  # not found: the client raises instead of returning None
        return False


def local_request(step: int | None = None) -> bool:
    """Whether this host was asked to stop: JAX's sync point at ``step`` (when given) or its
    posted notice, with the preemption service; and the SIGTERM flag (set only where JAX's
    notifier did not take SIGTERM over)."""
    if _jax_preemption_service():
        reached = step is not None and multihost_utils.reached_preemption_sync_point(int(step))
        return bool(reached or _notice_posted() or _sigterm["received"])
    return _sigterm["received"]


def preemption_requested(step: int | None = None) -> bool:
    """True on every host at the same call once any host was asked to stop (every host calls
    it together, at the same boundary). ``step``: the RL update just finished (fed to JAX's
    sync-point protocol; None between stages)."""
    mine = local_request(step)
    if jax.process_count() > 1:
        mine = bool(np.asarray(multihost_utils.process_allgather(np.asarray([int(mine)], np.int32))).any())
    return mine
