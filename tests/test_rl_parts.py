"""The parts of the RL stage against hand-computed references: the row layout, buckets, the
PPO mini-batch walk, the analyzer registry and the gate audit."""

from __future__ import annotations

import math

import numpy as np
import pytest

from seed_jax.buckets import BUCKETS, round_to_multiple, round_up, row_bucket
from seed_jax.losses import TokenSum
from seed_jax.pipeline.analyzers import AnalysisContext, get_analyzer, rl_analyzer, shuffle_skills, static_analyzer
from seed_jax.pipeline.ppo import mini_batch_rows, ppo_epochs
from seed_jax.pipeline.skill_bank import SkillBank
from seed_jax.pipeline.update_batch import gate_audit
from seed_jax.rollout.batch import RowInfo
from seed_jax.rollout.trajectory import StepSample, Trajectory
from seed_jax.train.batch import SeedBatch, pack_rows
from seed_jax.train.update import STEP_SCALAR_POOLING, pool_metrics


def test_pack_rows_by_hand():
    ids, mask, rmask = pack_rows([[5, 6], [], [7]], [[1, 2, 3], [], [4]], 3, 4, pad_id=9)
    assert ids.tolist() == [[9, 5, 6, 1, 2, 3, 9], [9, 9, 9, 9, 9, 9, 9], [9, 9, 7, 4, 9, 9, 9]]
    assert mask.tolist() == [[0, 1, 1, 1, 1, 1, 0], [0] * 7, [0, 0, 1, 1, 0, 0, 0]]
    assert rmask.tolist() == [[1, 1, 1, 0], [0, 0, 0, 0], [1, 0, 0, 0]]
    with pytest.raises(ValueError, match="exceed"):
        pack_rows([[1, 2, 3, 4]], [[1]], 3, 4, 0)


def test_buckets_by_hand():
    assert [round_up(n) for n in (0, 1, 16, 17, 25, 100, 8192, 8193, 20000)] == \
        [16, 16, 16, 24, 32, 128, 8192, 16384, 24576]
    assert round_up(5, (4, 8)) == 8 and round_up(9, (4, 8)) == 16
    assert all(b / a <= 1.5 for a, b in zip(BUCKETS, BUCKETS[1:]))  # at most a third is padding
    assert [row_bucket(n) for n in (0, 1, 2, 3, 5, 8, 9)] == [1, 1, 2, 4, 8, 8, 16]
    assert [round_to_multiple(n, 4) for n in (0, 1, 4, 5)] == [0, 4, 4, 8]


@pytest.mark.parametrize("rows,mini,micro,hosts,want", [
    (10, 256, 4, 1, 12), (300, 256, 16, 1, 256), (300, 256, 16, 2, 128), (5, 8, 2, 1, 6), (3, 256, 16, 4, 16)])
def test_mini_batch_rows(rows, mini, micro, hosts, want):
    assert mini_batch_rows(rows, mini, micro, hosts) == want


def _seed_batch(n, R=3, P=2):
    ids = np.arange(n * (P + R), dtype=np.int32).reshape(n, P + R)
    rmask = np.ones((n, R), np.float32)
    return SeedBatch(student_ids=ids, student_mask=np.ones_like(ids), response_mask=rmask,
                     advantages=rmask.copy(), has_skill=np.zeros(n, np.float32), old_logp=-rmask)


def test_ppo_epochs_visit_every_real_row_once_per_epoch():
    """A recording step: 10 real rows, mini-batches of 4 -> 12 rows (2 padding) in 3 slices per
    epoch; every real row is trained exactly once per epoch, padding rows are fully masked."""
    seen = []

    def step(state, mb):
        real = mb.response_mask.sum(1) > 0
        seen.append(sorted(int(x) for x in mb.student_ids[real, 0]))
        assert mb.num_rows == 4 and mb.student_mask[~real].sum() == 0
        tokens = float(mb.response_mask.sum())
        return state + 1, {"loss": 1.0, "tokens": tokens, "pg_loss": TokenSum(tokens, tokens)}

    state, m = ppo_epochs(0, _seed_batch(10), step, mini_batch_size=4, micro_batch_size=2, epochs=2, seed=0,
                          update=3, mesh=None)
    first = [r for mb in seen[:3] for r in mb]
    second = [r for mb in seen[3:] for r in mb]
    rows = [5 * i for i in range(10)]
    assert sorted(first) == rows and sorted(second) == rows
    assert state == len(seen) == m["optimizer_steps"] == 6 and m["tokens"] == 2 * 30 and m["pg_loss"] == 1.0


def test_pool_metrics_by_hand():
    a = {"loss": 2.0, "tokens": 1.0, "grad_norm": 1.0, "lr": 0.1, "skipped": 0.0, "kl": TokenSum(3.0, 1.0)}
    b = {"loss": 5.0, "tokens": 3.0, "grad_norm": 3.0, "lr": 0.2, "skipped": 1.0, "kl": TokenSum(1.0, 3.0)}
    m = pool_metrics([a, b])
    assert m == {"loss": (2 * 1 + 5 * 3) / 4, "tokens": 4.0, "grad_norm": 2.0, "lr": 0.2, "skipped": 1.0,
                 "kl": 4.0 / 4.0, "optimizer_steps": 2.0}
    assert set(STEP_SCALAR_POOLING) <= set(a)


def _traj(tid, task_id, won=False, env_error=False, task_type=""):
    s = StepSample([1], [2], [-1.0], "x", "Your task is to: t", "obs", True, 0.0)
    return Trajectory(task_id, 0, tid, "t", [] if env_error else [s], 10.0 * won, won, env_error=env_error,
                      info={"task_type": task_type} if task_type else {})


def test_shuffle_skills_is_a_derangement_and_keeps_skill_less_trajectories_empty():
    skills = {f"t{i}": f"skill {i}" for i in range(6)} | {"none1": None, "none2": None}
    out = shuffle_skills(skills, seed=1, update=2)
    assert out["none1"] is None and out["none2"] is None
    moved = {k: v for k, v in out.items() if v}
    assert sorted(moved.values()) == sorted(v for v in skills.values() if v)
    assert all(v != skills[k] for k, v in moved.items())
    assert out == shuffle_skills(skills, seed=1, update=2) and out != shuffle_skills(skills, seed=1, update=3)
    assert shuffle_skills({"a": "s", "b": None}, 0, 0) == {"a": None, "b": None}


def test_analyzer_registry_and_rl_choice():
    ctx = AnalysisContext(success_threshold=1.0, max_prompt_tokens=100, max_new_tokens=8, seed=0, update=0)
    trajs = [_traj("a", "q1", won=True), _traj("b", "q2"), _traj("c", "q3", env_error=True)]
    h = get_analyzer("heuristic")(trajs, ctx)
    assert set(h.parses) == {"a", "b"} and h.parse_rate == 1.0 and all(h.skills.values())
    assert all("x" in p or "obs" in p for p in h.prompts.values())
    assert rl_analyzer("none", "self") is None
    assert rl_analyzer("online", "heuristic") is get_analyzer("heuristic")
    sh = rl_analyzer("shuffled", "heuristic")(trajs, ctx)
    assert sh.parses == h.parses and sh.skills == {"a": h.skills["b"], "b": h.skills["a"]}
    with pytest.raises(ValueError, match="unknown analyzer"):
        get_analyzer("oracle")
    with pytest.raises(ValueError, match="'scripted' is not available"):
        get_analyzer("scripted")(trajs, ctx)
    with pytest.raises(ValueError, match="policy"):
        get_analyzer("self")(trajs, ctx)


def test_static_analyzer_looks_up_the_bank_by_task_and_type():
    bank = SkillBank([{"task_id": "q1", "success": True, "skill": "own", "task_type": "heat"},
                      {"task_id": "q9", "success": True, "skill": "same type", "task_type": "cool"},
                      {"task_id": "q8", "success": True, "skill": "first", "task_type": "look"}])
    ctx = AnalysisContext(success_threshold=1.0, max_prompt_tokens=100, max_new_tokens=8, bank=bank,
                          tasks={"q2": {"task_id": "q2", "task_type": "cool"}})
    got = static_analyzer([_traj("a", "q1"), _traj("b", "q2"), _traj("c", "q3", task_type="look"),
                           _traj("d", "q4", env_error=True)], ctx)
    assert got.skills == {"a": "own", "b": "same type", "c": "first"} and got.parses == {}


def test_gate_audit_equals_a_numpy_sigmoid_reference():
    rng = np.random.default_rng(0)
    old = rng.normal(-2, 1, (4, 5)).astype(np.float32)
    teacher = rng.normal(-2, 1, (4, 5)).astype(np.float32)
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0], [1, 1, 0, 0, 0]], np.float32)
    rows = [RowInfo("a", 0, True), RowInfo("a", 1, True), RowInfo("b", 0, False), RowInfo("c", 0, True)]
    steps, per_traj = gate_audit(rows, old, teacher, mask, beta=5.0)
    g = 1.0 / (1.0 + np.exp(-5.0 * (teacher.astype(np.float64) - old)))
    assert [(s.traj_id, s.step) for s in steps] == [("a", 0), ("a", 1), ("c", 0)]
    for s, i in zip(steps, (0, 1, 3)):
        m = mask[i] > 0
        assert s.n_tokens == m.sum()
        assert s.gate_mean == pytest.approx(g[i][m].mean(), rel=1e-5)
        assert s.gate_gt_half == pytest.approx((g[i][m] > 0.5).mean())
    both = np.concatenate([g[0][mask[0] > 0], g[1][mask[1] > 0]])
    assert per_traj["a"].mean == pytest.approx(both.mean(), rel=1e-5) and per_traj["a"].n_tokens == 8
    assert set(per_traj) == {"a", "c"} and math.isclose(per_traj["c"].share_gt_half, (g[3][:2] > 0.5).mean())
