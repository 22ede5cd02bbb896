"""Env worker pool: results equal a direct single-process loop; crashes and hangs end exactly the
episodes of the failed worker with env_error; the pool keeps serving; seeding is deterministic.

The reference is a hand-written loop over `CounterEnv` objects built with the seed formula of
the docstring (re-implemented here with hashlib), not the pool's own code.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from _pool_envs import CounterEnv
from seed_jax.rollout.pool import EnvFactory, InProcessBackend, ProcessPoolBackend, open_env_pool

SEED = 1234
STEP_TIMEOUT = 3.0


def ref_seed(pool_seed: int, slot: int) -> int:
    digest = hashlib.sha256(f"{pool_seed}:{slot}".encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF


def policy(slot: int, t: int, obs: str, target: int) -> str:
    """Move towards the target; odd slots answer without an action block at their first step."""
    if slot % 2 == 1 and t == 0:
        return "I am not sure what to do."
    value = int(obs.split("Counter at ")[1].split(".")[0])
    return "<think>compare</think><action>" + ("inc" if value < target else "dec") + "</action>"


def tasks_for(slots):
    return {s: {"target": 4 + s % 3} for s in slots}


def reference_run(envs: dict, tasks: dict) -> dict:
    """Direct loop: every slot runs to done on its own env object; returns transcripts."""
    out = {}
    for slot, task in tasks.items():
        env = envs[slot]
        obs, info = env.reset(task)
        rec = [("reset", obs, env.build_prompt(), env.task_description, info["seed"])]
        t = 0
        while True:
            obs, reward, done, info = env.step(policy(slot, t, obs, task["target"]))
            rec.append(("step", obs, reward, done, "" if done else env.build_prompt()))
            t += 1
            if done:
                break
        out[slot] = rec
    return out


def pool_run(pool, tasks: dict) -> dict:
    """Same episodes through the pool, all slots stepped together each turn."""
    res = pool.reset(tasks)
    out = {s: [("reset", r.observation, r.prompt, r.task_description, r.info["seed"])]
           for s, r in res.items()}
    assert not any(r.env_error for r in res.values())
    obs = {s: r.observation for s, r in res.items()}
    live, t = set(tasks), 0
    while live:
        step = pool.step({s: policy(s, t, obs[s], tasks[s]["target"]) for s in sorted(live)})
        assert set(step) == live
        for s, r in step.items():
            assert not r.env_error, r.error
            out[s].append(("step", r.observation, r.reward, r.done, r.prompt))
            obs[s] = r.observation
            if r.done:
                live.discard(s)
        t += 1
    return out


def fresh_reference(slots, pool_seed=SEED) -> dict:
    return {s: CounterEnv(ref_seed(pool_seed, s)) for s in slots}


@pytest.fixture(scope="module")
def pool2():
    pool = open_env_pool(EnvFactory(CounterEnv), num_workers=2, step_timeout_s=STEP_TIMEOUT,
                         seed=SEED)
    assert isinstance(pool, ProcessPoolBackend)
    yield pool
    pool.close()


def test_in_process_matches_direct_loop_and_is_deterministic():
    tasks = tasks_for(range(5))
    with open_env_pool(EnvFactory(CounterEnv), num_workers=0, seed=SEED) as pool:
        assert isinstance(pool, InProcessBackend)
        first = pool_run(pool, tasks)
        second = pool_run(pool, tasks)  # second episode on the same env objects
    envs = fresh_reference(range(5))
    assert first == reference_run(envs, tasks)
    assert second == reference_run(envs, tasks)
    assert first != second  # the env RNG advanced
    with open_env_pool(EnvFactory(CounterEnv), seed=SEED) as again:
        assert pool_run(again, tasks) == first
    with open_env_pool(EnvFactory(CounterEnv), seed=SEED + 1) as other:
        assert pool_run(other, tasks) != first
    # every slot got a different seed, as the formula says
    assert [first[s][0][4] for s in range(5)] == [ref_seed(SEED, s) for s in range(5)]


def test_step_without_live_episode_is_an_error():
    with InProcessBackend(EnvFactory(CounterEnv), seed=0) as pool:
        with pytest.raises(ValueError, match="slot 3 has no live episode"):
            pool.step({3: "<action>inc</action>"})
        with pytest.raises(ValueError, match="non-negative"):
            pool.reset({-1: {"target": 1}})


def test_in_process_hanging_step_times_out_and_the_rest_goes_on():
    """A step past the timeout ends only its episode (env_error); the other slots keep their env
    objects (their episodes continue as in the direct loop) and the hung slot gets a fresh env
    from its slot seed at its next reset."""
    slots = [0, 1, 2]
    tasks = {s: {"target": 20} for s in slots}  # out of reach: no episode ends by itself here
    envs = fresh_reference(slots)
    with open_env_pool(EnvFactory(CounterEnv), num_workers=0, step_timeout_s=1.0, seed=SEED) as pool:
        assert isinstance(pool, InProcessBackend)
        pool.reset(tasks)
        for s in slots:
            envs[s].reset(tasks[s])
        t0 = time.monotonic()
        res = pool.step({0: "<action>inc</action>", 1: "<action>hang</action>", 2: "<action>inc</action>"})
        assert 1.0 <= time.monotonic() - t0 < 5.0  # not the hang's 60 s
        assert [res[s].env_error for s in slots] == [False, True, False]
        assert res[1].done and "exceeded 1.0 s" in res[1].error and pool.stats["step_timeouts"] == 1
        for s in (0, 2):
            assert res[s].observation == envs[s].step("<action>inc</action>")[0]
        res = pool.step({0: "<action>dec</action>", 2: "<action>dec</action>"})  # served by a new thread
        assert [res[s].observation for s in (0, 2)] == [envs[s].step("<action>dec</action>")[0] for s in (0, 2)]
        res = pool.reset({1: {"target": 5}})
        assert res[1].observation == CounterEnv(ref_seed(SEED, 1)).reset({"target": 5})[0]
    with open_env_pool(EnvFactory(CounterEnv), num_workers=0, step_timeout_s=None, seed=SEED) as pool:
        assert pool.step_timeout_s is None and pool_run(pool, tasks_for(range(3))) == pool_run(
            open_env_pool(EnvFactory(CounterEnv), num_workers=0, seed=SEED), tasks_for(range(3)))


def test_worker_options_need_workers():
    with pytest.raises(ValueError, match=r"options \['reset_timeout_s'\] need num_workers >= 1"):
        open_env_pool(EnvFactory(CounterEnv), num_workers=0, reset_timeout_s=5.0)


def test_one_worker_matches_direct_loop():
    tasks = tasks_for(range(3))
    with open_env_pool(EnvFactory(CounterEnv), num_workers=1, step_timeout_s=STEP_TIMEOUT,
                       seed=SEED) as pool:
        got = pool_run(pool, tasks)
        pids = {r.info["pid"] for r in pool.reset(tasks).values()}
    assert got == reference_run(fresh_reference(range(3)), tasks)
    assert pids != {os.getpid()} and len(pids) == 1


def test_two_workers_match_direct_loop_round_robin(pool2):
    tasks = tasks_for(range(5))
    envs = fresh_reference(range(5))
    assert pool_run(pool2, tasks) == reference_run(envs, tasks)
    assert pool_run(pool2, tasks) == reference_run(envs, tasks)  # second episodes too
    pids = pool2.worker_pids()
    res = pool2.reset(tasks)
    assert [res[s].info["pid"] for s in range(5)] == [pids[s % 2] for s in range(5)]
    assert os.getpid() not in pids


# Each test below uses its own slot ids, so its environments are fresh whatever ran before.


def _step_and_check(pool, slots, obs, t, tasks, envs):
    """Step `slots` through the pool and the reference envs; results must agree unless the
    pool reports env_error. Returns the pool's results."""
    res = pool.step({s: policy(s, t, obs[s], tasks[s]["target"]) for s in slots})
    assert set(res) == set(slots)
    for s in slots:
        if res[s].env_error:
            continue
        ref = envs[s].step(policy(s, t, envs[s].obs, tasks[s]["target"]))
        assert (res[s].observation, res[s].reward, res[s].done) == ref[:3]
        obs[s] = res[s].observation
    return res


def test_killed_worker_ends_only_its_episodes(pool2):
    slots = [10, 11, 12, 13]  # worker 0 hosts 10 and 12, worker 1 hosts 11 and 13
    tasks = {s: {"target": 7} for s in slots}  # at least 4 steps from any start value
    envs = fresh_reference(slots)
    res = pool2.reset(tasks)
    obs = {s: r.observation for s, r in res.items()}
    assert obs == {s: envs[s].reset(tasks[s])[0] for s in slots}
    _step_and_check(pool2, slots, obs, 1, tasks, envs)
    before = dict(pool2.stats)

    victim = pool2.worker_pids()[0]
    os.kill(victim, signal.SIGKILL)
    res = _step_and_check(pool2, [11, 12, 13], obs, 2, tasks, envs)
    assert res[12].env_error and res[12].done and res[12].reward == 0.0
    assert res[12].info["env_error"] is True and "died" in res[12].error
    assert not res[11].env_error and not res[13].env_error
    # slot 10 was not in that call, but its episode lived on the dead worker too
    res = _step_and_check(pool2, [10, 11, 13], obs, 3, tasks, envs)
    assert res[10].env_error and res[10].done and "lost (worker restarted)" in res[10].error
    assert not res[11].env_error and not res[13].env_error
    assert pool2.stats["worker_crashes"] == before["worker_crashes"] + 1
    assert pool2.stats["worker_restarts"] == before["worker_restarts"] + 1
    assert pool2.worker_pids()[0] != victim

    # the pool keeps serving; slots 10 and 12 got fresh envs with the same slot seeds
    envs[10], envs[12] = CounterEnv(ref_seed(SEED, 10)), CounterEnv(ref_seed(SEED, 12))
    tasks = tasks_for(slots)
    assert pool_run(pool2, tasks) == reference_run(envs, tasks)


def test_worker_killed_during_a_step(pool2):
    slots = [20, 21, 22, 23]
    pool2.reset(tasks_for(slots))
    before = pool2.stats["worker_crashes"]
    victim = pool2.worker_pids()[1]  # hosts slots 21 and 23
    timer = threading.Timer(0.3, os.kill, (victim, signal.SIGKILL))
    timer.start()
    t0 = time.monotonic()
    res = pool2.step({20: "<action>inc</action>", 21: "<action>sleep</action>",
                      22: "<action>inc</action>", 23: "<action>inc</action>"})
    timer.join()
    assert time.monotonic() - t0 < STEP_TIMEOUT  # noticed through the sentinel, not a timeout
    assert [res[s].env_error for s in slots] == [False, True, False, True]
    assert pool2.stats["worker_crashes"] == before + 1
    envs = fresh_reference(slots)
    envs[21], envs[23] = CounterEnv(ref_seed(SEED, 21)), CounterEnv(ref_seed(SEED, 23))
    for s in (20, 22):  # replay what those two envs saw
        envs[s].reset(tasks_for(slots)[s])
        envs[s].step("<action>inc</action>")
    assert pool_run(pool2, tasks_for(slots)) == reference_run(envs, tasks_for(slots))


def test_hanging_step_times_out(pool2):
    slots = [30, 31, 32, 33]
    pool2.reset(tasks_for(slots))
    before = pool2.stats["step_timeouts"]
    t0 = time.monotonic()
    # worker 1 steps slot 31 (its result arrives) and then hangs on slot 33
    res = pool2.step({30: "<action>inc</action>", 31: "<action>inc</action>",
                      32: "<action>inc</action>", 33: "<action>hang</action>"})
    elapsed = time.monotonic() - t0
    assert STEP_TIMEOUT <= elapsed < STEP_TIMEOUT + 10
    assert [res[s].env_error for s in slots] == [False, True, False, True]
    assert "exceeded" in res[33].error and res[31].info["env_error"] is True
    assert pool2.stats["step_timeouts"] == before + 1
    with pytest.raises(ValueError, match="no live episode"):
        pool2.step({31: "<action>inc</action>"})
    res = pool2.reset(tasks_for(slots))
    assert [res[s].info["seed"] for s in slots] == [ref_seed(SEED, s) for s in slots]
    assert not any(r.env_error for r in res.values())


def test_timeout_is_per_step_not_per_batch(pool2):
    """Four 1 s steps on one worker take 4 s > timeout, but no single step exceeds it."""
    slots = [51, 53, 55, 57]  # all on worker 1
    pool2.reset(tasks_for(slots))
    res = pool2.step(dict.fromkeys(slots, "<action>sleep</action>"))
    assert not any(r.env_error for r in res.values())


def test_env_exception_ends_only_that_episode(pool2):
    slots = [40, 41, 42, 43]
    pool2.reset(tasks_for(slots))
    pids = pool2.worker_pids()
    res = pool2.step({40: "<action>raise</action>", 42: "<action>inc</action>"})
    assert res[40].env_error and res[40].done and "boom" in res[40].error
    assert not res[42].env_error
    assert pool2.worker_pids() == pids  # no restart
    res = pool2.step({41: "<action>inc</action>", 42: "<action>inc</action>"})
    assert not any(r.env_error for r in res.values())
    # slot 40's env was dropped and is rebuilt from its slot seed at the next reset
    res = pool2.reset({40: {"target": 5}})
    assert res[40].observation == CounterEnv(ref_seed(SEED, 40)).reset({"target": 5})[0]


def test_worker_survives_a_sigterm_during_a_step(pool2):
    """A TPU VM's preemption SIGTERM may reach every process: a worker ignores it (the parent
    stops at a boundary and ends its workers on close), so the step under way completes."""
    slots = [60, 61]
    pool2.reset(tasks_for(slots))
    pids, before = pool2.worker_pids(), dict(pool2.stats)
    timer = threading.Timer(0.3, os.kill, (pids[1], signal.SIGTERM))  # during slot 61's 1 s step
    timer.start()
    res = pool2.step({60: "<action>inc</action>", 61: "<action>sleep</action>"})
    timer.join()
    assert not any(r.env_error for r in res.values()), res[61].error
    assert pool2.worker_pids() == pids and pool2.stats == before


def test_a_pool_left_open_does_not_hold_up_exit():
    """multiprocessing's exit hook SIGTERMs daemon children, then joins them; the pool closes its
    workers first, so a process that exits without closing its pool still ends."""
    code = ("import sys; sys.path.insert(0, 'tests')\n"
            "from _pool_envs import CounterEnv\n"
            "from seed_jax.rollout.pool import EnvFactory, open_env_pool\n"
            "if __name__ == '__main__':\n"
            "    pool = open_env_pool(EnvFactory(CounterEnv), num_workers=2, step_timeout_s=5.0)\n"
            "    pool.reset({0: {'target': 4}})\n"
            "    print('open', flush=True)\n")
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([repo, os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", code], cwd=repo, env=env, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0 and "open" in proc.stdout, proc.stderr[-2000:]
