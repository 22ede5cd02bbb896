"""Helpers for tests that run several local CPU processes as the hosts of one jax.distributed job."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def host_env(port: int, pid: int, hosts: int = 2) -> dict:
    """Process ``pid`` of a ``hosts``-process jax.distributed job on this machine's CPU."""
    return {**os.environ, "JAX_COORDINATOR_ADDRESS": f"127.0.0.1:{port}", "JAX_NUM_PROCESSES": str(hosts),
            "JAX_PROCESS_ID": str(pid), "JAX_PLATFORMS": "cpu", "PYTHONUNBUFFERED": "1",
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}


def start_run(workdir, *flags: str, hosts: int = 2) -> list[subprocess.Popen]:
    """Start the tiny search run (``flags`` after the preset) as ``hosts`` local processes of one
    jax.distributed job (one process: a plain launch). Each process's stdout and stderr go to an
    unnamed file (``proc.log``; a pipe nobody reads while it runs could fill and stall it)."""
    port = free_port()
    procs = []
    for pid in range(hosts):
        env = host_env(port, pid)
        if hosts == 1:
            env = {k: v for k, v in env.items() if k not in ("JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES",
                                                              "JAX_PROCESS_ID")}
        cmd = [sys.executable, "-m", "seed_jax.launch", "--config=configs/search.py:tiny", f"--workdir={workdir}",
               *flags]
        log = tempfile.TemporaryFile("w+")
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, text=True)
        proc.log = log
        procs.append(proc)
    return procs


def finish(procs: list[subprocess.Popen], timeout: float = 900) -> list[str]:
    """Every process's output once all have exited (any left after ``timeout`` s in all is killed)."""
    deadline = time.time() + timeout
    try:
        for p in procs:
            p.wait(timeout=max(1.0, deadline - time.time()))
    except subprocess.TimeoutExpired:
        pass
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    outs = []
    for p in procs:
        p.log.seek(0)
        outs.append(p.log.read())
        p.log.close()
    return outs


def launch(workdir, *flags: str, hosts: int = 2, timeout: float = 900) -> list[str]:
    """`start_run`, then `finish`; every process must exit 0. Returns their outputs."""
    procs = start_run(workdir, *flags, hosts=hosts)
    outs = finish(procs, timeout)
    for p, out in zip(procs, outs):
        assert p.returncode == 0, out[-3000:]
    return outs
