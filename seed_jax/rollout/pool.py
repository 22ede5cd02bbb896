"""Environment worker pool: environments stepped in batches, in worker processes (no JAX).

The rollout loop talks to an `EnvBackend` through three calls on *slots* (small integers, one
per live episode; the loop uses the episode index in the batch):

    results = backend.reset({slot: task, ...})      -> {slot: ResetResult}
    results = backend.step({slot: response, ...})   -> {slot: StepResult}
    backend.close()

Results carry what the loop needs next: the observation, the env's ``info``, and the agent
prompt text built by the env for the next turn (``env.build_prompt()``; '' once done) and its
shorter variants (``env.prompt_variants()``, fewer past steps, for the loop's prompt cap), so the
loop never touches an environment object. Payloads are plain data (str / numbers / lists /
dicts): keep tasks, responses and env infos JSON-able so that a remote backend (Ray actors,
RPC) can implement the same `_run(op, items)` method.

Backends (`open_env_pool(factory, num_workers, ...)` starts the one that fits, as a context
manager):

- `InProcessBackend`: environments in this process, stepped one after another (tests, 0
  workers); an env exception ends only that episode with ``env_error``. With
  ``step_timeout_s`` (`open_env_pool` passes it) each call runs in a helper thread (one at a
  time) and the caller waits at most that long: a call past it is abandoned (a running Python or
  C call cannot be interrupted; its daemon thread is left to finish or hang, and the slot's env
  object is dropped unclosed), its episode ends with ``env_error``, and later calls go to a fresh
  thread. A step that hangs while holding the GIL stalls the whole process all the same: only
  worker processes bound that (and the stall watchdog, `seed_jax.watchdog`, ends such a run).
- `ProcessPoolBackend`: ``num_workers`` processes (``spawn`` context by default: JAX in the
  parent does not survive ``fork``), each hosting the environments of several slots; slot
  ``s`` lives on worker ``s % num_workers`` (round-robin). Messages are Python objects over
  `multiprocessing` Pipes. Per-step timeout: a worker must deliver each slot's result within
  ``step_timeout_s`` (``reset_timeout_s`` for resets, which may build the env) of its previous
  message; a worker that exceeds it is killed (with its process group), one that dies is
  noticed through its process sentinel. Either way it is restarted, and every episode that
  lived on it ends with ``env_error`` (done=True, reward 0, ``info['env_error'] = True``),
  except episodes whose final (done) result had already arrived. Other workers' results in the
  same batch are unaffected; a later step on a lost slot returns ``env_error`` at once.
  Workers ignore SIGINT and SIGTERM (a TPU VM's preemption notice may reach every process):
  the parent stops at a boundary and ends them on ``close()`` (also at interpreter exit).

Seeding: the env of slot ``s`` is built as ``env_factory(derive_seed(seed, s))`` the first time
``s`` is reset (and again after its worker restarts or its env raised), so results depend only
on the pool seed and each slot's call sequence, not on the number of workers.

An env that raises inside reset/step ends that episode with ``env_error``; its env object is
closed and dropped (rebuilt at the slot's next reset); the worker keeps serving.

The parent's ``__main__`` module is imported by spawned workers: guard entry points with
``if __name__ == "__main__":``.
"""

from __future__ import annotations

import abc
import atexit
import dataclasses
import hashlib
import logging
import multiprocessing as mp
import multiprocessing.connection as mpc
import os
import queue
import signal
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from typing import Any

__all__ = [
    "ResetResult",
    "StepResult",
    "EnvBackend",
    "InProcessBackend",
    "ProcessPoolBackend",
    "open_env_pool",
    "EnvFactory",
    "derive_seed",
]

_LIVE, _IDLE, _LOST = "live", "idle", "lost"
log = logging.getLogger(__name__)


@dataclasses.dataclass
class ResetResult:
    observation: str  # what env.reset returned
    info: dict[str, Any]  # env info (copy) + 'env_error': bool (+ 'error': str on failure)
    prompt: str  # env.build_prompt() for the first turn ('' on env_error)
    task_description: str  # env.task_description ('' on env_error)
    env_error: bool = False
    error: str = ""  # traceback / reason when env_error
    prompt_variants: list[str] = dataclasses.field(default_factory=list)  # `prompt_variants` of the env


@dataclasses.dataclass
class StepResult:
    observation: str
    reward: float
    done: bool
    info: dict[str, Any]  # env info (copy) + 'env_error': bool (+ 'error': str on failure)
    prompt: str = ""  # env.build_prompt() for the next turn; '' when done
    env_error: bool = False
    error: str = ""
    prompt_variants: list[str] = dataclasses.field(default_factory=list)  # `prompt_variants` of the env ([] when done)


def derive_seed(pool_seed: int, slot: int) -> int:
    """Per-slot seed: first 4 bytes (little endian) of sha256(f"{pool_seed}:{slot}"), & 0x7FFFFFFF."""
    digest = hashlib.sha256(f"{int(pool_seed)}:{int(slot)}".encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF


class EnvFactory:
    """Picklable env factory: ``EnvFactory(fn, *args, seed_kwarg="seed", **kw)(s)`` calls
    ``fn(*args, **kw, seed=s)``; with ``seed_kwarg=None`` the seed is not passed.

    ``fn`` must be importable (a module-level class or function) for spawned workers.
    """

    def __init__(self, fn: Callable[..., Any], /, *args: Any, seed_kwarg: str | None = "seed",
                 **kwargs: Any) -> None:
        self.fn, self.args, self.kwargs, self.seed_kwarg = fn, args, kwargs, seed_kwarg

    def __call__(self, seed: int) -> Any:
        extra = {self.seed_kwarg: seed} if self.seed_kwarg else {}
        return self.fn(*self.args, **self.kwargs, **extra)


# ----------------------------------------------------------------------------------------------
# slot-level execution shared by workers and the in-process backend


def _error_payload(op: str, message: str) -> dict[str, Any]:
    info = {"env_error": True, "error": message}
    if op == "reset":
        return {"observation": "", "info": info, "prompt": "", "task_description": "",
                "env_error": True, "error": message}
    return {"observation": "", "reward": 0.0, "done": True, "info": info, "prompt": "",
            "env_error": True, "error": message}


def _variants(env) -> list[str]:
    """``env.prompt_variants()`` (`envs.base.Environment`); [] for an env without the method."""
    variants = getattr(env, "prompt_variants", None)
    return list(variants()) if variants is not None else []


class _SlotHost:
    """The environments of some slots; runs one reset / step and returns a payload dict."""

    def __init__(self, env_factory: Callable[[int], Any], pool_seed: int) -> None:
        self.env_factory, self.pool_seed = env_factory, pool_seed
        self.envs: dict[int, Any] = {}

    def run(self, op: str, slot: int, arg: Any) -> dict[str, Any]:
        try:
            if op == "reset":
                return self._reset(slot, arg)
            if op == "step":
                return self._step(slot, arg)
            return _error_payload("step", f"unknown op {op!r}")
        except Exception:
            self.drop(slot)
            return _error_payload(op, f"slot {slot}: env raised in {op}:\n{traceback.format_exc()}")

    def _reset(self, slot: int, task: Any) -> dict[str, Any]:
        env = self.envs.get(slot)
        if env is None:
            env = self.envs[slot] = self.env_factory(derive_seed(self.pool_seed, slot))
        observation, info = env.reset(task)
        return {"observation": observation, "info": {**dict(info), "env_error": False},
                "prompt": env.build_prompt(), "prompt_variants": _variants(env),
                "task_description": env.task_description, "env_error": False, "error": ""}

    def _step(self, slot: int, response: str) -> dict[str, Any]:
        env = self.envs.get(slot)
        if env is None:
            return _error_payload("step", f"slot {slot}: no environment (lost or never reset)")
        observation, reward, done, info = env.step(response)
        return {"observation": observation, "reward": float(reward), "done": bool(done),
                "info": {**dict(info), "env_error": False},
                "prompt": "" if done else env.build_prompt(), "prompt_variants": [] if done else _variants(env),
                "env_error": False, "error": ""}

    def drop(self, slot: int) -> None:
        env = self.envs.pop(slot, None)
        if env is not None:
            try:
                env.close()
            except Exception:
                pass

    def close(self) -> None:
        for slot in list(self.envs):
            self.drop(slot)


# ----------------------------------------------------------------------------------------------
# backends


class EnvBackend(abc.ABC):
    """Slot bookkeeping shared by all backends; subclasses implement `_run` and `close`.

    ``_run(op, items)`` executes ``op`` ('reset' or 'step') for every ``slot -> arg`` in
    ``items`` and returns ``{slot: payload}`` (payload = the fields of Reset/StepResult as a
    dict). It may call ``self._mark_lost(slots)`` for slots whose environments vanished.
    """

    def __init__(self) -> None:
        self._state: dict[int, str] = {}
        self.stats: dict[str, int] = {"env_errors": 0, "worker_crashes": 0, "step_timeouts": 0,
                                      "worker_restarts": 0}

    def reset(self, slot_tasks: Mapping[int, Any]) -> dict[int, ResetResult]:
        """Start one episode per slot; a slot with a live episode is simply restarted."""
        items = {self._check_slot(s): t for s, t in sorted(slot_tasks.items())}
        payloads = self._run("reset", items) if items else {}
        out = {}
        for slot in items:
            res = ResetResult(**payloads[slot])
            self._state[slot] = _IDLE if res.env_error else _LIVE
            self.stats["env_errors"] += int(res.env_error)
            out[slot] = res
        return out

    def step(self, slot_actions: Mapping[int, str]) -> dict[int, StepResult]:
        """Apply one raw response per slot; every slot must hold a live (or lost) episode."""
        items, out = {}, {}
        for slot, response in sorted(slot_actions.items()):
            state = self._state.get(self._check_slot(slot))
            if state == _LOST:
                out[slot] = _error_payload("step", f"slot {slot}: episode lost (worker restarted)")
            elif state == _LIVE:
                items[slot] = response
            else:
                raise ValueError(f"step: slot {slot} has no live episode (reset it first)")
        if items:
            out.update(self._run("step", items))
        results = {}
        for slot in sorted(out):
            res = StepResult(**out[slot])
            if res.done or res.env_error:
                self._state[slot] = _IDLE
            self.stats["env_errors"] += int(res.env_error)
            results[slot] = res
        return results

    def live_slots(self) -> list[int]:
        return sorted(s for s, st in self._state.items() if st == _LIVE)

    def _mark_lost(self, slots) -> None:
        for slot in slots:
            if self._state.get(slot) == _LIVE:
                self._state[slot] = _LOST

    @staticmethod
    def _check_slot(slot: Any) -> int:
        if isinstance(slot, bool) or not isinstance(slot, int) or slot < 0:
            raise ValueError(f"slot ids must be non-negative ints, got {slot!r}")
        return slot

    @abc.abstractmethod
    def _run(self, op: str, items: dict[int, Any]) -> dict[int, dict[str, Any]]:
        """Execute `op` for each slot in `items`; returns one payload dict per slot."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release every environment and worker."""

    def __enter__(self) -> EnvBackend:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class InProcessBackend(EnvBackend):
    """All environments in this process; same results as the process pool. ``step_timeout_s``
    (None: none) / ``reset_timeout_s`` (default: the step's): see the module docstring."""

    def __init__(self, env_factory: Callable[[int], Any], seed: int = 0, *, step_timeout_s: float | None = None,
                 reset_timeout_s: float | None = None) -> None:
        super().__init__()
        if (step_timeout_s is not None and step_timeout_s <= 0) or (reset_timeout_s is not None and reset_timeout_s <= 0):
            raise ValueError("timeouts must be positive")
        self._host = _SlotHost(env_factory, seed)
        self.num_workers = 0
        self.step_timeout_s = step_timeout_s
        self.reset_timeout_s = step_timeout_s if reset_timeout_s is None else reset_timeout_s
        self._calls: queue.Queue | None = None  # the helper thread's inbox (None: not started / abandoned)

    def _run(self, op: str, items: dict[int, Any]) -> dict[int, dict[str, Any]]:
        timeout = self.reset_timeout_s if op == "reset" else self.step_timeout_s
        if timeout is None:
            return {slot: self._host.run(op, slot, arg) for slot, arg in items.items()}
        return {slot: self._run_bounded(op, slot, arg, timeout) for slot, arg in items.items()}

    def _run_bounded(self, op: str, slot: int, arg: Any, timeout: float) -> dict[str, Any]:
        """``self._host.run(op, slot, arg)`` in the helper thread; past ``timeout`` the thread and
        the slot's env are abandoned and the episode ends with ``env_error``."""
        if self._calls is None:
            self._calls = queue.Queue()
            threading.Thread(target=_serve_calls, args=(self._calls,), name="seed-env-inprocess", daemon=True).start()
        answer: queue.Queue = queue.Queue(maxsize=1)
        self._calls.put((self._host, op, slot, arg, answer))
        try:
            return answer.get(timeout=timeout)
        except queue.Empty:
            pass
        self._calls.put(None)  # that thread ends if its call ever returns; later calls get a new one
        self._calls = None
        # the abandoned call keeps the old host object: whatever it does when it returns touches
        # only the old envs dict; the other slots' envs move on to a new host
        stuck, self._host = self._host, _SlotHost(self._host.env_factory, self._host.pool_seed)
        self._host.envs = {s: e for s, e in stuck.envs.items() if s != slot}
        self.stats["step_timeouts"] += 1
        log.warning("env %s of slot %d exceeded %g s in process; its episode ends with env_error", op, slot, timeout)
        return _error_payload(op, f"slot {slot}: env {op} exceeded {timeout} s (in process); the episode is lost")

    def close(self) -> None:
        if self._calls is not None:
            self._calls.put(None)
            self._calls = None
        self._host.close()


def _serve_calls(calls: queue.Queue) -> None:
    """The in-process backend's helper thread: ``(host, op, slot, arg, answer)`` -> ``answer``;
    None ends it."""
    while (call := calls.get()) is not None:
        host, op, slot, arg, answer = call
        answer.put(host.run(op, slot, arg))


def _worker_main(conn, env_factory: Callable[[int], Any], pool_seed: int) -> None:
    """Worker loop: ('reset'|'step', [(slot, arg), ...]) -> one ('result', slot, payload) per
    slot, then ('done', n); ('close', None) ends the loop. Runs in its own process group so
    that a kill also reaches processes the env started."""
    try:
        os.setpgrp()
    except (AttributeError, OSError):
        pass
    # the parent decides when workers stop (it kills them on close): a Ctrl-C, or a TPU VM's
    # preemption SIGTERM sent to every process, reaches the parent, which stops at a boundary
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    host = _SlotHost(env_factory, pool_seed)
    try:
        pgid = os.getpgid(0)
    except (AttributeError, OSError):
        pgid = None
    conn.send(("ready", os.getpid(), pgid))
    try:
        while True:
            try:
                op, items = conn.recv()
            except (EOFError, OSError):
                break  # parent gone
            if op == "close":
                break
            for slot, arg in items:
                payload = host.run(op, slot, arg)
                try:
                    conn.send(("result", slot, payload))
                except (TypeError, AttributeError, ValueError) as e:  # unpicklable info
                    host.drop(slot)
                    conn.send(("result", slot, _error_payload(op, f"result not sendable: {e}")))
            conn.send(("done", len(items)))
    finally:
        host.close()


@dataclasses.dataclass
class _Worker:
    process: Any
    conn: Any
    ready: bool = False
    pid: int | None = None
    pgid: int | None = None  # the worker's process group (its pid when it leads one)


class ProcessPoolBackend(EnvBackend):
    """Environments in `num_workers` worker processes; see the module docstring."""

    def __init__(
        self,
        env_factory: Callable[[int], Any],
        num_workers: int,
        *,
        step_timeout_s: float = 60.0,
        reset_timeout_s: float | None = None,
        start_timeout_s: float = 120.0,
        seed: int = 0,
        start_method: str = "spawn",
    ) -> None:
        super().__init__()
        if num_workers < 1:
            raise ValueError(f"ProcessPoolBackend needs num_workers >= 1, got {num_workers}")
        if step_timeout_s <= 0 or (reset_timeout_s is not None and reset_timeout_s <= 0):
            raise ValueError("timeouts must be positive")
        if start_method == "fork":
            raise ValueError("start_method 'fork' is unsafe with JAX; use 'spawn' or 'forkserver'")
        self.num_workers = num_workers
        self.step_timeout_s = float(step_timeout_s)
        self.reset_timeout_s = float(step_timeout_s if reset_timeout_s is None else reset_timeout_s)
        self.start_timeout_s = float(start_timeout_s)
        self._factory, self._seed = env_factory, seed
        self._ctx = mp.get_context(start_method)
        self._workers: list[_Worker | None] = [None] * num_workers
        self._closed = False
        # workers ignore SIGTERM, so multiprocessing's exit hook (SIGTERM, then join, for daemon
        # children) would wait for ever on a pool left open: close it first (atexit runs the hooks
        # registered last first, and multiprocessing registered its own at import)
        atexit.register(self.close)
        try:
            for w in range(num_workers):
                self._start(w)
            self._ensure_ready(range(num_workers))
        except BaseException:
            self.close()
            raise

    # -- public helpers ------------------------------------------------------------------------

    def worker_of(self, slot: int) -> int:
        """Round-robin placement: slot `s` lives on worker ``s % num_workers``."""
        return slot % self.num_workers

    def worker_pids(self) -> list[int]:
        """Process ids of the current workers (ready ones)."""
        self._ensure_ready(range(self.num_workers))
        return [w.pid for w in self._workers]  # type: ignore[union-attr]

    # -- worker lifecycle ------------------------------------------------------------------------

    def _start(self, w: int) -> None:
        parent_conn, child_conn = self._ctx.Pipe(duplex=True)
        proc = self._ctx.Process(target=_worker_main, args=(child_conn, self._factory, self._seed),
                                 name=f"seed-env-worker-{w}", daemon=True)
        proc.start()
        child_conn.close()  # so that the parent sees EOF when the worker dies
        self._workers[w] = _Worker(proc, parent_conn)

    def _ensure_ready(self, ws) -> None:
        waiting = {w for w in ws if not self._workers[w].ready}  # type: ignore[union-attr]
        deadline = time.monotonic() + self.start_timeout_s
        while waiting:
            conns = {self._workers[w].conn: w for w in waiting}  # type: ignore[union-attr]
            sentinels = {self._workers[w].process.sentinel: w for w in waiting}  # type: ignore
            ready = mpc.wait(list(conns) + list(sentinels),
                             timeout=max(0.0, deadline - time.monotonic()))
            for obj in ready:
                w = conns.get(obj, sentinels.get(obj))
                if w not in waiting:
                    continue
                worker = self._workers[w]
                try:
                    if worker.conn.poll():
                        tag, pid, pgid = worker.conn.recv()
                        if tag == "ready":
                            worker.ready, worker.pid, worker.pgid = True, pid, pgid
                            waiting.discard(w)
                            continue
                except (EOFError, OSError):
                    pass
                worker.process.join(1.0)
                raise RuntimeError(f"env worker {w} died while starting "
                                   f"(exit code {worker.process.exitcode}); see its stderr")
            if waiting and time.monotonic() >= deadline:
                raise RuntimeError(f"env workers {sorted(waiting)} did not start within "
                                   f"{self.start_timeout_s} s")

    def _kill(self, w: int) -> None:
        """SIGKILL worker `w` and, when it leads its own process group, the processes its envs
        started (still members of that group even after the worker itself died)."""
        worker = self._workers[w]
        proc = worker.process
        if worker.pgid is not None and worker.pgid == worker.pid:
            try:
                os.killpg(worker.pgid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError, OSError):
                pass
        if proc.is_alive():
            proc.kill()
        proc.join(5.0)
        worker.conn.close()

    def _restart(self, w: int) -> None:
        self._kill(w)
        self._start(w)
        self.stats["worker_restarts"] += 1

    # -- batched execution -----------------------------------------------------------------------

    def _run(self, op: str, items: dict[int, Any]) -> dict[int, dict[str, Any]]:
        if self._closed:
            raise RuntimeError("ProcessPoolBackend is closed")
        timeout = self.reset_timeout_s if op == "reset" else self.step_timeout_s
        by_worker: dict[int, list[tuple[int, Any]]] = {}
        for slot, arg in items.items():
            by_worker.setdefault(self.worker_of(slot), []).append((slot, arg))
        self._ensure_ready(by_worker)
        results: dict[int, dict[str, Any]] = {}
        failed: dict[int, str] = {}
        last: dict[int, float] = {}
        for w, its in by_worker.items():
            try:
                self._workers[w].conn.send((op, its))  # type: ignore[union-attr]
                last[w] = time.monotonic()
            except (OSError, ValueError):
                failed[w] = "crash"
        active = set(last)
        while active:
            now = time.monotonic()
            deadline = min(last[w] for w in active) + timeout
            waitables = {}
            for w in active:
                worker = self._workers[w]
                waitables[worker.conn] = w  # type: ignore[union-attr]
                waitables[worker.process.sentinel] = w  # type: ignore[union-attr]
            ready = mpc.wait(list(waitables), timeout=max(0.0, deadline - now))
            for w in sorted({waitables[obj] for obj in ready}):
                status, progressed = self._drain(w, results)
                if status == "running":
                    if progressed:
                        last[w] = time.monotonic()
                else:
                    active.discard(w)
                    if status == "crash":
                        failed[w] = "crash"
            now = time.monotonic()
            for w in list(active):
                if now - last[w] > timeout:
                    active.discard(w)
                    failed[w] = "timeout"
        for w, why in sorted(failed.items()):
            self.stats["worker_crashes" if why == "crash" else "step_timeouts"] += 1
            self._restart(w)
            message = (f"env worker {w} {'died' if why == 'crash' else f'exceeded {timeout} s'} "
                       f"during {op}; its episodes are lost")
            for slot, _ in by_worker[w]:
                done_ok = (op == "step" and slot in results and results[slot]["done"])
                if not done_ok:
                    results[slot] = _error_payload(op, message)
            self._mark_lost(s for s in self._state if self.worker_of(s) == w)
        return results

    def _drain(self, w: int, results: dict[int, dict[str, Any]]) -> tuple[str, bool]:
        """Read the available messages of worker `w`.

        Returns (status, progressed): status 'finished' (its 'done' arrived), 'crash' (pipe
        closed or process gone) or 'running'; progressed = at least one result arrived.
        """
        worker = self._workers[w]
        progressed = False
        try:
            while worker.conn.poll():  # type: ignore[union-attr]
                msg = worker.conn.recv()  # type: ignore[union-attr]
                if msg[0] == "result":
                    results[msg[1]] = msg[2]
                    progressed = True
                elif msg[0] == "done":
                    return "finished", progressed
        except (EOFError, OSError):
            return "crash", progressed
        if not worker.process.is_alive():  # type: ignore[union-attr]
            return "crash", progressed
        return "running", progressed

    def close(self) -> None:
        """Ask workers to stop, then kill the ones that do not within a few seconds."""
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self.close)
        for worker in self._workers:
            if worker is None:
                continue
            try:
                worker.conn.send(("close", None))
            except (OSError, ValueError):
                pass
        deadline = time.monotonic() + 5.0
        for w, worker in enumerate(self._workers):
            if worker is None:
                continue
            worker.process.join(max(0.0, deadline - time.monotonic()))
            if worker.process.is_alive():
                self._kill(w)
            else:
                worker.conn.close()


def open_env_pool(
    env_factory: Callable[[int], Any],
    num_workers: int = 0,
    step_timeout_s: float | None = 60.0,
    seed: int = 0,
    **kwargs: Any,
) -> EnvBackend:
    """Start a backend: `InProcessBackend` when ``num_workers == 0`` (``step_timeout_s`` None:
    without timeouts), else a `ProcessPoolBackend` (kwargs: reset_timeout_s, start_timeout_s,
    start_method) whose workers are running on return. Close it with ``close()`` or use it as a
    context manager: ``with open_env_pool(factory, 4) as pool: ...``."""
    if num_workers == 0:
        if kwargs:
            raise ValueError(f"options {sorted(kwargs)} need num_workers >= 1")
        return InProcessBackend(env_factory, seed=seed, step_timeout_s=step_timeout_s)
    if step_timeout_s is None:
        raise ValueError("worker processes need a step_timeout_s")
    return ProcessPoolBackend(env_factory, num_workers, step_timeout_s=step_timeout_s, seed=seed,
                              **kwargs)
