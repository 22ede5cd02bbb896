"""Pod rehearsal: two local CPU processes as two hosts of one jax.distributed job (tiny search run);
no fault leaves a host waiting for ever.

- A host SIGKILLed during RL: the other host exits by itself (non-zero) within
  ``run.stall_timeout_s + 60`` s, and a relaunch of both ends with the final weights of a run that
  was never interrupted.
- An environment step that hangs on one host: the step is abandoned after ``env.step_timeout_s``,
  that episode ends with env_error, and the run finishes on both hosts.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from tests._multihost import REPO, free_port, host_env, launch

STALL_S = 90  # run.stall_timeout_s of the killed run
KILL_FLAGS = ("--config.method=seed_no_sft", "--config.rl.num_updates=3", "--stages=rl",
              f"--config.run.stall_timeout_s={STALL_S}")


class Host:
    """One host process of a two-process launch; its output lines are collected by a thread."""

    def __init__(self, cmd: list[str], env: dict) -> None:
        self.proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True)
        self.lines: list[str] = []
        self.reader = threading.Thread(target=lambda: self.lines.extend(self.proc.stdout), daemon=True)
        self.reader.start()

    def text(self) -> str:
        return "".join(self.lines)

    def wait_for(self, needle: str, timeout: float) -> bool:
        t_end = time.monotonic() + timeout
        while time.monotonic() < t_end and self.proc.poll() is None:
            if needle in self.text():
                return True
            time.sleep(0.5)
        return needle in self.text()


def _hosts(argv_for, hosts: int = 2) -> list[Host]:
    port = free_port()
    return [Host(argv_for(pid), host_env(port, pid)) for pid in range(hosts)]


def _launch_cmd(workdir, *flags):
    return [sys.executable, "-m", "seed_jax.launch", "--config=configs/search.py:tiny", f"--workdir={workdir}", *flags]


def _kill_all(hosts):
    for h in hosts:
        if h.proc.poll() is None:
            h.proc.kill()
            h.proc.wait()


@pytest.mark.slow
def test_a_host_killed_during_rl_ends_the_other_and_the_relaunch_is_bit_identical(tmp_path):
    launch(tmp_path / "whole", *KILL_FLAGS)
    hosts = _hosts(lambda pid: _launch_cmd(tmp_path / "killed", *KILL_FLAGS))
    try:
        assert hosts[0].wait_for("RL update 1/3", timeout=900), hosts[0].text()[-3000:]
        os.kill(hosts[1].proc.pid, signal.SIGKILL)
        t_kill = time.monotonic()
        rc = hosts[0].proc.wait(timeout=STALL_S + 60)  # raises TimeoutExpired when host 0 waits on
        took = time.monotonic() - t_kill
    finally:
        _kill_all(hosts)
    hosts[0].reader.join(10)
    print(f"host 0 exited with {rc} {took:.0f} s after host 1 was killed")  # JAX's heartbeat or the watchdog (3)
    assert rc != 0, hosts[0].text()[-3000:]
    assert took < STALL_S + 60
    assert not (tmp_path / "killed" / "rl" / "final_model").exists()
    launch(tmp_path / "killed", *KILL_FLAGS)  # relaunch of both hosts: RL resumes
    whole = (tmp_path / "whole" / "rl" / "final_model" / "model.safetensors").read_bytes()
    assert (tmp_path / "killed" / "rl" / "final_model" / "model.safetensors").read_bytes() == whole


# the launcher with the search benchmark's env factory wrapped so that one env step on host 1 hangs for ever
HANG_DRIVER = """
import dataclasses, sys
sys.path.insert(0, "tests")
from absl import app
from _pool_envs import hang_once_env
from seed_jax import launch
from seed_jax.pipeline import environments
from seed_jax.rollout.pool import EnvFactory

search, marker = environments.BENCHMARKS["search"], sys.argv.pop(1)
environments.BENCHMARKS["search"] = lambda env_cfg: dataclasses.replace(
    b := search(env_cfg), factory=EnvFactory(hang_once_env, inner=b.factory, marker=marker, host="1"))
app.run(launch.main, flags_parser=launch.parse_flags)
"""
HANG_TIMEOUT_S = 600  # the test's own bound: a hang fails it instead of stalling the suite


@pytest.mark.slow
def test_an_env_step_hanging_on_one_host_ends_its_episode_and_the_run_finishes(tmp_path):
    """The tiny preset's in-process environments: host 1's first env step hangs; after
    env.step_timeout_s its episode ends with env_error, and both hosts finish RL and eval."""
    marker = tmp_path / "hung"
    flags = ("--config.method=seed_no_sft", "--config.rl.num_updates=2", "--stages=rl,eval",
             "--config.env.step_timeout_s=10")
    hosts = _hosts(lambda pid: [sys.executable, "-c", HANG_DRIVER, str(marker), "--config=configs/search.py:tiny",
                                f"--workdir={tmp_path / 'run'}", *flags])
    try:
        rcs = [h.proc.wait(timeout=HANG_TIMEOUT_S) for h in hosts]
    finally:
        _kill_all(hosts)
    for h in hosts:
        h.reader.join(10)
    assert marker.exists()  # the hang happened
    assert rcs == [0, 0], [h.text()[-3000:] for h in hosts]
    assert "exceeded 10 s in process" in hosts[1].text()
    assert (tmp_path / "run" / "rl" / "final_model" / "model.safetensors").exists()
    assert (tmp_path / "run" / "stages" / "eval.json").exists()
