"""The stall watchdog: a phase without beats for the timeout ends the run, naming what it waited
on; a beating phase does not; the process's watchdog lives only while its caller runs."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest

from seed_jax import watchdog
from seed_jax.watchdog import STALL_EXIT_CODE, Watchdog


class FakeClock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def test_a_stalled_phase_is_reported_with_its_phase_update_and_detail():
    clock = FakeClock()
    w = Watchdog(60, on_stall=lambda m: None, clock=clock)
    w.beat("rollout", "u2/ turn 0: env steps", update=2)
    w.beat("barrier", "stage-rl")
    clock.t += 59.5
    assert w.stall_message() is None
    clock.t += 1
    msg = w.stall_message()
    assert "no progress for 60 s" in msg and "run.stall_timeout_s = 60" in msg
    assert "phase 'barrier'" in msg and "waiting on: stage-rl" in msg and "RL update: 2" in msg
    assert "barrier (stage-rl) <- rollout (u2/ turn 0: env steps)" in msg  # newest first
    assert f"exiting with code {STALL_EXIT_CODE}" in msg


def test_the_thread_calls_the_exit_function_once_when_beats_stop():
    fired = []
    done = threading.Event()
    w = Watchdog(0.3, on_stall=lambda m: (fired.append(m), done.set()), poll_s=0.05).start()
    w.beat("ppo", "epoch 0 mini-batch 1/2", update=7)
    assert done.wait(5)
    time.sleep(0.2)
    assert len(fired) == 1 and "phase 'ppo'" in fired[0] and "RL update: 7" in fired[0] and w.fired
    assert not w.running


def test_a_beating_phase_is_not_ended():
    fired = []
    w = Watchdog(0.4, on_stall=fired.append, poll_s=0.05).start()
    t_end = time.monotonic() + 1.5  # almost four timeouts of work, a beat every 0.1 s
    i = 0
    while time.monotonic() < t_end:
        w.beat("rollout", f"turn {i}")
        i += 1
        time.sleep(0.1)
    w.stop()
    assert fired == [] and not w.fired


def test_the_process_watchdog_stops_once_its_caller_returns_or_raises():
    fired = []

    def run(fail: bool):
        w = watchdog.watch_caller(0.5, on_stall=fired.append, poll_s=0.05)
        assert watchdog.current() is w
        watchdog.beat("stage", "rl")
        if fail:
            raise RuntimeError("a stage failed")
        return w

    w = run(False)
    time.sleep(0.3)
    assert not w.running and watchdog.current() is None  # the caller returned: no watchdog
    with pytest.raises(RuntimeError):
        run(True)
    time.sleep(1.0)  # twice the timeout without a beat
    assert fired == []
    assert watchdog.watch_caller(0) is None and watchdog.current() is None  # 0 = off


def test_without_a_watchdog_beat_does_nothing():
    watchdog.stop()
    watchdog.beat("rollout", "x", update=1)  # no error, no thread
    assert watchdog.current() is None


STALLED = """
import time
from seed_jax import watchdog
watchdog.watch_caller(0.5, poll_s=0.05)
watchdog.beat("barrier", "stage-rl", update=4)
time.sleep(30)
"""


def test_a_stalled_process_exits_with_the_stall_code_and_names_the_wait():
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-c", STALLED], capture_output=True, text=True, timeout=60)
    assert p.returncode == STALL_EXIT_CODE, p.stderr
    assert time.monotonic() - t0 < 20
    assert "phase 'barrier', waiting on: stage-rl; RL update: 4" in p.stderr
    assert 'File "<string>", line 6' in p.stderr  # then every thread's stack: the main one in its sleep
