"""Stall watchdog: a run that makes no progress for ``run.stall_timeout_s`` seconds exits.

On several hosts a host stuck in one phase (a hung environment, a collective whose partner
died) would otherwise hold every other host in the next collective for ever. The places that
make progress report it with `beat`::

    beat("rollout", "u3/ turn 1: env steps")   # phase, what it is doing or waiting on
    beat("ppo", "epoch 0 mini-batch 2/4", update=3)
    beat("barrier", "stage-rl")                # a collective, named before the wait

A `Watchdog` thread (a daemon) wakes every few seconds; when the last beat is older than the
timeout it writes one line to stderr naming the last phase, its detail, the last RL update
reported, the seconds since the beat and the last few beats, then every thread's Python stack
(`faulthandler`), and ends the process with ``os._exit(STALL_EXIT_CODE)``: the main thread may
be stuck in C code (a collective, an env's native step), where no exception reaches it.

`watch_caller(timeout_s)` starts the process's watchdog for as long as the calling function
runs (the launcher's `run_pipeline`): the thread stops by itself once that function's frame
has left its thread's stack (returned or raised), so a library caller (a test, a notebook) is
never ended after its run. `beat` without a started watchdog costs one lock and a clock read.
Standard library only (layer 0: every layer beats).
"""

from __future__ import annotations

import collections
import faulthandler
import os
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType

__all__ = ["STALL_EXIT_CODE", "Watchdog", "beat", "watch_caller", "stop", "current"]

STALL_EXIT_CODE = 3  # distinct from 1 (an exception), 2 (a config error)


def _default_exit(message: str) -> None:
    """Write ``message`` and every thread's stack to stderr, then end the process at once."""
    try:
        sys.stderr.write(message + "\n")
        sys.stderr.flush()
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
    finally:
        os._exit(STALL_EXIT_CODE)


class Watchdog:
    """Calls ``on_stall(message)`` once when no `beat` came for ``timeout_s`` seconds.

    ``poll_s``: how often the thread looks (default ``min(5, timeout_s / 4)``); ``owner``: a
    ``(thread id, frame)`` pair: the watchdog stops by itself once that frame is no longer on that
    thread's stack. ``clock``: the time source (tests).
    """

    def __init__(self, timeout_s: float, on_stall: Callable[[str], None] = _default_exit, *,
                 poll_s: float | None = None, owner: tuple[int, FrameType] | None = None,
                 clock: Callable[[], float] = time.monotonic, history: int = 5) -> None:
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        self.timeout_s = float(timeout_s)
        self.poll_s = float(poll_s) if poll_s is not None else min(5.0, self.timeout_s / 4)
        self.on_stall, self.owner, self.clock = on_stall, owner, clock
        self._lock = threading.Lock()
        self._last = self.clock()
        self._phase, self._detail, self._update = "start", "", None
        self._recent: collections.deque[str] = collections.deque(maxlen=history)
        self._stop = threading.Event()
        self.fired = False
        self._thread = threading.Thread(target=self._loop, name="seed-watchdog", daemon=True)

    def start(self) -> Watchdog:
        self._thread.start()
        return self

    def beat(self, phase: str, detail: str = "", update: int | None = None) -> None:
        """Progress: ``phase`` (rollout, ppo, barrier, ...), ``detail`` (what it does or waits on),
        ``update`` (the RL update, remembered until the next one is reported)."""
        with self._lock:
            self._last = self.clock()
            self._phase, self._detail = phase, detail
            if update is not None:
                self._update = update
            self._recent.append(f"{phase} ({detail})" if detail else phase)

    def stall_message(self) -> str | None:
        """The message when the last beat is older than the timeout, else None."""
        with self._lock:
            idle = self.clock() - self._last
            if idle < self.timeout_s:
                return None
            update = "none yet" if self._update is None else str(self._update)
            return (f"watchdog: no progress for {idle:.0f} s (run.stall_timeout_s = {self.timeout_s:g}) in phase "
                    f"{self._phase!r}, waiting on: {self._detail or '-'}; RL update: {update}; "
                    f"last beats: {' <- '.join(reversed(self._recent)) or '-'}; exiting with code {STALL_EXIT_CODE} "
                    f"on host {os.environ.get('JAX_PROCESS_ID', '?')} (pid {os.getpid()})")

    def stop(self) -> None:
        self._stop.set()

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def _owner_gone(self) -> bool:
        if self.owner is None:
            return False
        tid, frame = self.owner
        f = sys._current_frames().get(tid)
        while f is not None:
            if f is frame:
                return False
            f = f.f_back
        return True

    def _loop(self) -> None:
        try:
            while not self._stop.wait(self.poll_s):
                if self._owner_gone():
                    return
                message = self.stall_message()
                if message is not None:
                    self.fired = True
                    self.on_stall(message)
                    return
        finally:
            self.owner = None  # the caller's frame (and its locals) is not kept alive


_current: Watchdog | None = None
_current_lock = threading.Lock()


def current() -> Watchdog | None:
    """The process's running watchdog, if any."""
    w = _current
    return w if w is not None and w.running else None


def beat(phase: str, detail: str = "", update: int | None = None) -> None:
    """Report progress to the process's watchdog (nothing when none runs); see `Watchdog.beat`."""
    w = _current
    if w is not None:
        w.beat(phase, detail, update)


def watch_caller(timeout_s: float, on_stall: Callable[[str], None] = _default_exit, **kwargs) -> Watchdog | None:
    """Start the process's watchdog (replacing a running one) for as long as the function that
    calls this runs; ``timeout_s <= 0``: none (and a running one stops). Returns it."""
    global _current
    caller = sys._getframe(1)
    with _current_lock:
        if _current is not None:
            _current.stop()
        _current = None
        if timeout_s <= 0:
            return None
        _current = Watchdog(timeout_s, on_stall, owner=(threading.get_ident(), caller), **kwargs).start()
        return _current


def stop() -> None:
    """Stop the process's watchdog (if any)."""
    global _current
    with _current_lock:
        if _current is not None:
            _current.stop()
        _current = None
