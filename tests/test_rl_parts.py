"""The parts of the RL stage against hand-computed references: the row layout, buckets, the
PPO mini-batch walk, the analyzer registry and the gate audit."""

from __future__ import annotations

import math

import numpy as np
import pytest

from seed_jax.buckets import BUCKETS, round_to_multiple, round_up, row_bucket
from seed_jax.configs.search import get_config
from seed_jax.losses import TokenSum
from seed_jax.pipeline.analyzers import AnalysisContext, get_analyzer, rl_analyzer, shuffle_skills, static_analyzer
from seed_jax.pipeline.ppo import host_split_error, mini_batch_rows, ppo_epochs
from seed_jax.pipeline.skill_bank import SkillBank
from seed_jax.pipeline.update_batch import gate_audit
from seed_jax.pipeline.validate import ConfigValueError, validate
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


# (rows on a host, rl.mini_batch_size, train.micro_batch_size, hosts) -> rows per mini-batch on a host;
# by hand: min(mini / hosts, rows) up to a multiple of micro / hosts, so hosts x M = the global mini-batch
@pytest.mark.parametrize("rows,mini,micro,hosts,want", [
    (10, 256, 4, 1, 12), (300, 256, 16, 1, 256), (5, 8, 2, 1, 6), (0, 256, 16, 1, 16),
    (300, 256, 16, 2, 128), (3, 256, 16, 2, 8), (100, 256, 16, 2, 104),
    (300, 256, 16, 4, 64), (3, 256, 16, 4, 4), (0, 256, 16, 4, 4), (70, 256, 16, 4, 64)])
def test_mini_batch_rows(rows, mini, micro, hosts, want):
    M = mini_batch_rows(rows, mini, micro, hosts)
    assert M == want
    assert (M * hosts) % micro == 0 and M * hosts <= max(mini, micro)  # whole global micro-batches, never more


@pytest.mark.parametrize("mini,micro,hosts", [(256, 16, 3), (256, 2, 4), (250, 16, 1)])
def test_uneven_host_split_is_rejected(mini, micro, hosts):
    assert host_split_error(mini, micro, hosts)
    with pytest.raises(ValueError, match="micro_batch_size"):
        mini_batch_rows(64, mini, micro, hosts)
    c = get_config("tiny")
    c.rl.mini_batch_size, c.train.micro_batch_size = mini, micro
    with pytest.raises(ConfigValueError, match="micro_batch_size"):
        validate(c, hosts=hosts)


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
    teacher[0, 4] = np.nan  # a padded position's value never reaches the statistics
    rows = [RowInfo("a", 0, True), RowInfo("a", 1, True), RowInfo("b", 0, False), RowInfo("c", 0, True)]
    steps, per_traj = gate_audit(rows, old, teacher, mask, beta=5.0)
    g = 1.0 / (1.0 + np.exp(-5.0 * (teacher.astype(np.float64) - old)))
    assert [(s.traj_id, s.step) for s in steps] == [("a", 0), ("a", 1), ("c", 0)]
    for s, i in zip(steps, (0, 1, 3)):
        m = mask[i] > 0
        assert s.n_tokens == m.sum()
        assert s.gate_mean == pytest.approx(g[i][m].mean(), rel=1e-5)
        assert s.gate_gt_half == pytest.approx((g[i][m] > 0.5).mean())
        assert s.delta_mean == pytest.approx(float(np.mean([teacher[i][k] - old[i][k] for k in np.flatnonzero(m)])),
                                             rel=1e-6)
    both = np.concatenate([g[0][mask[0] > 0], g[1][mask[1] > 0]])
    assert per_traj["a"].mean == pytest.approx(both.mean(), rel=1e-5) and per_traj["a"].n_tokens == 8
    assert set(per_traj) == {"a", "c"} and math.isclose(per_traj["c"].share_gt_half, (g[3][:2] > 0.5).mean())


def test_the_run_bank_knows_task_types_for_rl_and_final_eval(tmp_path):
    """The bank of a run (RL and both evaluations) looks skills up by task type: an eval task of
    type 'look' gets the 'look' skill, not the first successful one (a 'heat' skill)."""
    import types

    from seed_jax.skills import SkillRecord, canonical_answer, write_skill_records

    recs = [SkillRecord("x", canonical_answer("s", "Heat the thing in the microwave first, then place it."), "a",
                        "success", "t-heat"),
            SkillRecord("x", canonical_answer("s", "Look under the desk lamp to examine the object there."), "b",
                        "success", "t-look")]
    (tmp_path / "stage1").mkdir()
    write_skill_records(tmp_path / "stage1" / "sft.jsonl", recs)
    bench = types.SimpleNamespace(train_split="train", tasks=lambda split: [
        {"task_id": "t-heat", "task_type": "heat"}, {"task_id": "t-look", "task_type": "look"}])
    bank = SkillBank.for_run(tmp_path, bench)
    assert bank.lookup({"task_id": "eval-7", "task_type": "look"}).startswith("Look under")
    assert bank.lookup({"task_id": "eval-8", "task_type": "heat"}).startswith("Heat the")
    assert bank.lookup({"task_id": "eval-9", "task_type": "cool"}).startswith("Heat the")  # first success


def test_search_tasks_get_the_skill_of_the_most_similar_bank_task_of_their_source(tmp_path):
    """Search tasks have no task type: each eval task gets the skill of the training task whose
    question reads most like its own (BM25), within its data source; the old fallback gave every
    task the first successful skill ('Film ...')."""
    import types

    from seed_jax.skills import SkillRecord, canonical_answer, write_skill_records

    skills = {"t-film": "Film questions: search the film title first, then read its director line.",
              "t-river": "River questions: search the river name, then read the length in the infobox.",
              "t-band": "Band questions: search both band names and compare their formation years.",
              "t-nq-river": "Open questions: search the river name directly and answer in a few words.",
              "t-fail": "Failed: answer at once without any search to save the turns."}
    recs = [SkillRecord("x", canonical_answer("s", text), f"traj-{tid}", "failure" if tid == "t-fail" else "success",
                        tid) for tid, text in skills.items()]
    (tmp_path / "stage1").mkdir()
    write_skill_records(tmp_path / "stage1" / "sft.jsonl", recs)
    train = [{"task_id": "t-film", "question": "Who directed the film Jaws?", "data_source": "hotpotqa"},
             {"task_id": "t-river", "question": "How long is the river Danube?", "data_source": "hotpotqa"},
             {"task_id": "t-band", "question": "Which band formed first, Blur or Oasis?", "data_source": "hotpotqa"},
             {"task_id": "t-nq-river", "question": "where does the river thames start", "data_source": "nq"},
             {"task_id": "t-fail", "question": "Which river band directed the film?", "data_source": "hotpotqa"}]
    bench = types.SimpleNamespace(train_split="train", tasks=lambda split: train)
    bank = SkillBank.for_run(tmp_path, bench)

    def got(question, source):
        return bank.lookup({"task_id": "eval", "question": question, "data_source": source}).split(":")[0]

    assert got("Who directed the film Alien?", "hotpotqa") == "Film questions"
    assert got("How long is the river Nile?", "hotpotqa") == "River questions"
    assert got("Which band formed first, Queen or Kiss?", "hotpotqa") == "Band questions"
    assert got("How long is the river Nile?", "nq") == "Open questions"  # same source only
    assert got("How long is the river Nile?", "triviaqa") == "River questions"  # no such source: all
    assert got("Quantum chromodynamics?", "hotpotqa") == "Film questions"  # no shared word: first of source
    webshop = SkillBank([{"task_id": "w1", "success": True, "skill": "shoes", "text": "red running shoes",
                          "group": "fashion"},
                         {"task_id": "w2", "success": True, "skill": "tea", "text": "green tea bags, 100 count",
                          "group": "grocery"}])
    assert webshop.lookup({"task_id": "w9", "instruction": "i want green tea", "category": "grocery"}) == "tea"


# ------------------------------------------------------------------ issue-12 recipe fixes


def test_ppo_mini_batches_hold_the_real_rows_first():
    """10 real rows in mini-batches of 4: the first two are all real rows, the two padding rows
    sit in the last one (not spread over all three)."""
    real_counts = []

    def step(state, mb):
        real_counts.append(int((mb.response_mask.sum(1) > 0).sum()))
        return state, {"loss": 0.0, "tokens": float(mb.response_mask.sum())}

    for update in range(5):  # several permutations: never a padding row before the last slice
        real_counts.clear()
        ppo_epochs(0, _seed_batch(10), step, mini_batch_size=4, micro_batch_size=2, epochs=1, seed=0,
                   update=update, mesh=None)
        assert real_counts == [4, 4, 2]


def test_penalty_mode_by_hand():
    from seed_jax.losses import step_advantages

    # group 0: equal outcomes (10, 10); group 1: (10, 0). Step k of trajectory j, penalties p_k.
    R, groups = [10.0, 10.0, 10.0, 0.0], [0, 0, 1, 1]
    steps, pen = [0, 0, 1, 2, 3], [0.0, 0.1, 0.0, 0.1, 0.0]
    after = step_advantages(R, groups, steps, pen, penalty_mode="after_norm")
    std1 = np.std([10.0, 0.0], ddof=1)
    np.testing.assert_allclose(after, [0.0, -0.1, 0.0, 10.0 / 2 / (std1 + 1e-6) - 0.1, -5.0 / (std1 + 1e-6)],
                               rtol=1e-6)
    inside = step_advantages(R, groups, steps, pen, penalty_mode="in_score")
    np.testing.assert_allclose(inside, [0.0, -0.1 / 1e-6, 0.0, (10 - 0.1 - 5) / (std1 + 1e-6), -5 / (std1 + 1e-6)],
                               rtol=1e-5)
    with pytest.raises(ValueError, match="penalty mode"):
        step_advantages(R, groups, steps, pen, penalty_mode="before")


def _char_encode(text):
    return [ord(c) for c in text]


def test_teacher_prompt_keeps_the_skill_and_task_and_drops_the_oldest_history():
    from seed_jax.rollout.batch import teacher_prompt
    from seed_jax.skills import insert_skill

    lines = ["You are an agent.", "Your task is to: put a mug on the desk."] + \
        [f"[history {i}] you saw a long corridor with many doors." for i in range(10)] + ["Answer in <action>."]
    h = "\n".join(lines)
    skill = "Check the desk drawer before walking to other rooms."
    full, cut = teacher_prompt(h, skill, _char_encode, cap=10_000)
    assert not cut and full == _char_encode(insert_skill(h, skill))
    cap = len(full) - 150
    ids, cut = teacher_prompt(h, skill, _char_encode, cap=cap)
    text = "".join(map(chr, ids))
    assert cut and len(ids) <= cap
    assert text.startswith("You are an agent.\nYour task is to: put a mug") and skill in text
    assert text.endswith("[history 9] you saw a long corridor with many doors.\nAnswer in <action>.")
    assert "[history 0]" not in text and "[history 1]" not in text and "[history 5]" in text


def test_every_annotator_budgets_x_tau_in_tokens_so_the_sft_cut_keeps_the_header():
    """An annotator other than ``self`` (here ``heuristic``) with the policy's encoder: x_tau fits
    ``analysis.max_prompt_tokens`` tokens, so the SFT's left cut at that budget
    (`stage1.sft_batches`: ``encode_prompt(prompt)[-max_prompt_tokens:]``) keeps the Task and
    Outcome header. The character budget alone (3 characters per token; here a token is one
    character) leaves x_tau three times too long and the cut takes the header away."""
    from seed_jax.skills import render_analyzer_prompt

    encode = lambda text: _char_encode("<|user|>" + text + "<|assistant|>")  # noqa: E731
    steps = [StepSample([1], [2], [-1.0], f"<think>step {i}</think><action>go {i}</action>", "p",
                        f"OBS-{i} " + "y" * 400, True, 0.0) for i in range(20)]
    traj = Trajectory("q", 0, "q#0", "put a mug on the desk", steps, 0.0, False)
    budget = 1500
    ctx = AnalysisContext(success_threshold=1.0, max_prompt_tokens=budget, max_new_tokens=8, encode_prompt=encode)
    x_tau = get_analyzer("heuristic")([traj], ctx).prompts["q#0"]
    sft_input = "".join(map(chr, encode(x_tau)[-budget:]))
    assert len(encode(x_tau)) <= budget and "### Step 1\n" in sft_input and "### Step 20\n" in sft_input
    assert "## Task\nput a mug on the desk" in sft_input and "## Outcome\nFAILURE" in sft_input
    by_chars, _ = render_analyzer_prompt(traj, 1.0, max_chars=3 * budget)  # the old budget
    assert "## Task" not in "".join(map(chr, encode(by_chars)[-budget:]))


def test_teacher_of_a_cut_prompt_is_the_student_ids_plus_the_skill_block():
    """A student prompt left-cut by the rollout: the teacher twin is the ids the student kept with
    the skill block spliced in (H's lines '', B, '' after the task line; before the kept ids when
    the task line was cut), never the re-rendered full prompt; a row whose kept ids are not a cut
    of its prompt takes no OPD."""
    from seed_jax.rollout.batch import BatchSettings, build_batch
    from seed_jax.skills import skill_block

    header = "<sys>You are an agent.</sys>\n"  # the chat template's part (cut first)
    encode = lambda text: _char_encode(header + text)  # noqa: E731
    lines = ["Your task is to: put a mug on the desk."] + [f"[history {i}] a corridor." for i in range(6)] + \
        ["Answer in <action>."]
    h = "\n".join(lines)
    skill = "Check the desk drawer before walking to other rooms."
    full = encode(h)

    def step(keep, prompt_ids=None):
        ids = full[-keep:] if prompt_ids is None else prompt_ids
        return StepSample(ids, [6, 7], [-1.0, -1.0], "r", h, "o", True, 0.0, prompt_tokens=len(full))

    deep = len(h) - h.index("[history 3]")  # the task line and three history lines are gone
    shallow = len(h) + 3  # only the header is cut: the task line survives
    trajs = [Trajectory("q", 0, f"q#{j}", "t", [st], 0.0, False)
             for j, st in enumerate([step(deep), step(shallow), step(0, prompt_ids=_char_encode("not h"))])]
    batch = build_batch(trajs, {t.traj_id: skill for t in trajs}, encode, BatchSettings(4096, 8), pad_id=0,
                        decode=lambda ids: "".join(map(chr, ids)))
    Pt = batch.teacher_prompt_len
    text = lambda i: "".join(map(chr, batch.teacher_ids[i, :Pt][batch.teacher_mask[i, :Pt] == 1]))  # noqa: E731
    student = lambda i: "".join(map(chr, trajs[i].steps[0].prompt_ids))  # noqa: E731
    block = "\n" + skill_block(skill) + "\n\n"  # H: lines[:i+1] + ['', B, ''] + lines[i+1:]
    assert student(0).startswith("[history 3]") and text(0) == block + student(0)
    task_end = student(1).index("\n", student(1).index("Your task is to:")) + 1
    assert text(1) == student(1)[:task_end] + block + student(1)[task_end:]
    assert text(1).replace(block, "", 1) == student(1) and "You are an agent" not in text(1)
    assert batch.has_skill.tolist() == [1.0, 1.0, 0.0] and text(2) == "not h"  # not a cut of h: no OPD
    assert batch.teacher_cut == 0
    capped = build_batch(trajs[:1], {"q#0": skill}, encode, BatchSettings(4096, 8, max_teacher_prompt_tokens=len(
        block) + 20), pad_id=0, decode=lambda ids: "".join(map(chr, ids)))
    t_ids = capped.teacher_ids[0][capped.teacher_mask[0] == 1][:-2]
    assert "".join(map(chr, t_ids)) == block + student(0)[-20:] and capped.teacher_cut == 1


def test_fit_analyzer_prompt_keeps_header_first_and_last_steps():
    from seed_jax.rollout.analyzer import fit_analyzer_prompt

    s = [StepSample([1], [2], [-1.0], f"<think>step {i}</think><action>go {i}</action>", "p", f"OBS-{i} " + "y" * 300,
                    True, 0.0) for i in range(12)]
    traj = Trajectory("t", 0, "t#0", "put a mug on the desk", s, 0.0, False)
    text, ids, cut = fit_analyzer_prompt(traj, _char_encode, 10.0, max_prompt_tokens=1200)
    assert cut and len(ids) <= 1200 and ids == _char_encode(text)  # fitted by re-rendering, not by a left cut
    assert "put a mug on the desk" in text and "### Step 1\n" in text and "### Step 12\n" in text
    assert "omitted to save space]" in text and text.rstrip().endswith('"episode_skill": string}')
    full, _, cut = fit_analyzer_prompt(traj, _char_encode, 10.0, max_prompt_tokens=100_000)
    assert not cut and all(f"### Step {i}\n" in full for i in range(1, 13))


def test_schedule_counts_updates_not_optimizer_steps():
    """schedule_unit 'update': the step leaves the position alone and the RL stage sets it per
    update, so two mini-batches of update 1 both train at lr(1); 'step' advances per step."""
    import jax

    from seed_jax.train.config import TrainConfig
    from seed_jax.train.mesh import make_mesh
    from seed_jax.train.state import at_schedule_pos, create_sharded_state
    from seed_jax.train.step import make_train_step
    from seed_jax.train.synthetic import random_params, synthetic_seed_batch, tiny_config
    from seed_jax.train.update import metric_means

    cfg, mesh = tiny_config(), make_mesh(devices=jax.devices()[:1])
    batch = synthetic_seed_batch(0, 4, 6, 5, 7, cfg.vocab_size).replace(teacher_logp=None)
    params = random_params(cfg, 0)
    for unit, want in (("update", [0.5, 0.5]), ("step", [0.25, 0.5])):
        tc = TrainConfig(lr=1.0, schedule="warmup_constant", warmup_steps=4, schedule_unit=unit, adam_eps=1e-3)
        state = create_sharded_state(params, tc, mesh)
        if unit == "update":
            state = at_schedule_pos(state, 1)
        lrs = []
        for _ in range(2):
            state, m = make_train_step(cfg, tc, mesh)(state, batch)
            lrs.append(metric_means(m)["lr"])
        assert lrs == pytest.approx(want), unit
        assert int(state.schedule_pos) == (1 if unit == "update" else 2)


def test_run_schedules_are_stated_in_updates():
    from seed_jax.configs import search
    from seed_jax.pipeline.runtime import train_config

    tc = train_config(search.get_config("paper"), micro_batch_size=8)  # the preset leaves it to the plan (-1)
    assert (tc.schedule_unit, tc.schedule, tc.warmup_steps, tc.total_steps) == ("update", "warmup_constant", 15, 150)
    c = search.get_config("tiny")
    c.train.schedule, c.rl.num_updates = "cosine", 40
    assert train_config(c).total_steps == 40  # the cosine runs over all updates, not optimizer steps


def test_teacher_from_old_without_any_parsed_skill_trains():
    """An update in which no skill parsed (early seed_no_sft updates): teacher_from_old still gets
    a teacher_logp (masked out of OPD on every row) and the step runs."""
    import jax

    from seed_jax.pipeline.update_batch import build_update_batch
    from seed_jax.rollout.batch import BatchSettings
    from seed_jax.train.config import TrainConfig
    from seed_jax.train.mesh import make_mesh
    from seed_jax.train.state import create_sharded_state
    from seed_jax.train.step import make_train_step
    from seed_jax.train.synthetic import random_params, tiny_config
    from seed_jax.train.update import metric_means

    cfg = tiny_config()
    steps = lambda j: [StepSample([3, 4, 5 + j], [6, 7, 8], [-1.0] * 3, "r", "Your task is to: t", "o", True, 0.0)]  # noqa: E731
    trajs = [Trajectory("q", 0, f"q#{j}", "t", steps(j), 10.0 * (j % 2), bool(j % 2)) for j in range(4)]
    tc = TrainConfig(lr=1e-3, lambda_opd=0.5, teacher_from_old=True, micro_batch_size=4)
    params = jax.device_get(random_params(cfg, 0))
    ub = build_update_batch(trajs, {t.traj_id: None for t in trajs}, BatchSettings(64, 8), encode_prompt=_char_encode,
                            decode=lambda ids: "".join(map(chr, ids)), pad_id=0, model_cfg=cfg, train_cfg=tc,
                            old_params=params, ref_params=params,
                            with_teacher=True, audit_gates=True, micro_batch_size=4)
    assert ub.batch.teacher_logp is not None and ub.batch.has_skill.sum() == 0 and ub.step_gates == []
    mesh = make_mesh(devices=jax.devices()[:1])
    _, m = make_train_step(cfg, tc, mesh)(create_sharded_state(params, tc, mesh), ub.batch)
    m = metric_means(m)
    assert m["skipped"] == 0 and m["opd_active_share"] == 0.0 and np.isfinite(m["loss"])
