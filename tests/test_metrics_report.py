"""Metrics jsonl/TensorBoard writer, skill audit log, timers, progress bars and the run report.

References are independent of the code under test: JSON lines are parsed with a strict
``json.loads``, TensorBoard event files with a hand-written TFRecord reader over the
``tensorboardX.proto`` Event message, and expected summary values are computed in the test.
"""

from __future__ import annotations

import io
import json
import math
import re
import struct
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from seed_jax import metrics as M
from seed_jax.metrics import GateSummary, MetricsWriter, SkillLog, SkillLogEntry, StageProgress, Timer
from seed_jax.report import ReportError, main, make_report

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
REPO = Path(__file__).resolve().parents[1]


def strict_lines(path: Path) -> list[dict]:
    """Parse every line as strict JSON (NaN/Infinity rejected)."""
    def bad(c):
        raise ValueError(f"non-strict JSON constant {c}")
    return [json.loads(line, parse_constant=bad) for line in path.read_text().splitlines()]


def tb_scalars(logdir: Path) -> list[tuple[str, int, float]]:
    """(tag, step, value) of every scalar in the TFRecord event files under ``logdir``.

    TFRecord framing: uint64 length (LE), uint32 length-crc, payload, uint32 payload-crc.
    """
    from tensorboardX.proto import event_pb2

    out = []
    files = sorted(logdir.glob("events.out.tfevents.*"))
    assert files, f"no event files in {logdir}"
    for f in files:
        data, pos = f.read_bytes(), 0
        while pos < len(data):
            (n,) = struct.unpack("<Q", data[pos:pos + 8])
            payload = data[pos + 12:pos + 12 + n]
            assert len(payload) == n, f"truncated record in {f}"
            pos += 12 + n + 4
            ev = event_pb2.Event()
            ev.ParseFromString(payload)
            for v in ev.summary.value:
                out.append((v.tag, int(ev.step), float(v.simple_value)))
    return out


# --------------------------------------------------------------------------- MetricsWriter

def test_write_read_roundtrip_and_tensorboard(tmp_path):
    rng = np.random.default_rng(0)
    written = {}
    with MetricsWriter(tmp_path) as w:
        for step in range(4):
            vals = {"success_rate": float(rng.uniform()), "return": np.float32(rng.normal()),
                    "env_errors": int(step)}
            w.write(step, vals, prefix="rollout")
            w.write(step, {"train/loss": np.array(rng.normal())})
            written[step] = {"rollout/" + k: float(v) for k, v in vals.items()}
            written[step]["train/loss"] = float(json.loads(
                (tmp_path / "metrics.jsonl").read_text().splitlines()[-1])["train/loss"])
    recs = MetricsWriter.read(tmp_path)
    assert recs == strict_lines(tmp_path / "metrics.jsonl")
    assert len(recs) == 8
    times = [r["time"] for r in recs]
    assert times == sorted(times) and all(t > 1.6e9 for t in times)
    for step in range(4):
        a, b = recs[2 * step], recs[2 * step + 1]
        assert a["step"] == b["step"] == step
        assert set(a) == {"step", "time", "rollout/success_rate", "rollout/return",
                          "rollout/env_errors"}
        for k in ("rollout/success_rate", "rollout/return", "rollout/env_errors"):
            assert a[k] == written[step][k]  # exact: JSON round-trips doubles
    # TensorBoard holds the same scalars (float32 precision)
    tb = tb_scalars(tmp_path / "tb")
    assert len(tb) == 4 * 4
    got = {(tag, s): v for tag, s, v in tb}
    for step in range(4):
        for k, v in written[step].items():
            assert got[(k, step)] == pytest.approx(v, rel=1e-6, abs=1e-6)


def test_non_finite_written_as_null(tmp_path):
    with MetricsWriter(tmp_path) as w:
        w.write(0, {"a": float("nan"), "b": float("inf"), "c": -np.inf, "d": np.float32("nan"),
                    "e": 1.5})
    text = (tmp_path / "metrics.jsonl").read_text()
    assert "NaN" not in text and "Infinity" not in text
    (rec,) = strict_lines(tmp_path / "metrics.jsonl")
    assert rec["a"] is None and rec["b"] is None and rec["c"] is None and rec["d"] is None
    assert rec["e"] == 1.5
    # only the finite value reaches TensorBoard
    assert [(t, v) for t, _, v in tb_scalars(tmp_path / "tb")] == [("e", 1.5)]


def test_bad_values_rejected_with_key(tmp_path):
    w = MetricsWriter(tmp_path, tensorboard=False)
    with pytest.raises(TypeError, match="'train/x'"):
        w.write(0, {"x": "high"}, prefix="train")
    with pytest.raises(TypeError, match="'v'"):
        w.write(0, {"v": np.zeros(3)})
    with pytest.raises(ValueError, match="reserved"):
        w.write(0, {"step": 1.0})
    with pytest.raises(TypeError, match="step"):
        w.write(1.5, {"a": 1.0})
    w.close()
    with pytest.raises(RuntimeError, match="closed"):
        w.write(0, {"a": 1.0})
    assert not (tmp_path / "metrics.jsonl").exists() or strict_lines(tmp_path / "metrics.jsonl") == []


def test_torn_last_line_skipped_and_repaired_on_resume(tmp_path):
    with MetricsWriter(tmp_path, tensorboard=False) as w:
        w.write(0, {"a": 1.0})
        w.write(1, {"a": 2.0})
    path = tmp_path / "metrics.jsonl"
    with open(path, "a") as f:
        f.write('{"step": 2, "time": 1.0, "a": 3.')  # killed mid-write
    with pytest.warns(UserWarning, match="torn last line"):
        recs = MetricsWriter.read(tmp_path)
    assert [(r["step"], r["a"]) for r in recs] == [(0, 1.0), (1, 2.0)]
    # resuming removes the torn tail, then appends cleanly
    with pytest.warns(UserWarning, match="removing a torn last line"):
        w = MetricsWriter(tmp_path, tensorboard=False)
    w.write(2, {"a": 4.0})
    w.close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        recs = MetricsWriter.read(tmp_path)
    assert [(r["step"], r["a"]) for r in recs] == [(0, 1.0), (1, 2.0), (2, 4.0)]
    assert len(strict_lines(path)) == 3


def test_complete_line_without_newline_is_kept(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 0, "time": 1.0, "a": 1.0}\n{"step": 1, "time": 2.0, "a": 2.0}')
    assert [r["step"] for r in MetricsWriter.read(tmp_path)] == [0, 1]
    with MetricsWriter(tmp_path, tensorboard=False) as w:
        w.write(2, {"a": 3.0})
    assert [r["step"] for r in strict_lines(path)] == [0, 1, 2]


def test_corrupt_middle_line_raises(tmp_path):
    (tmp_path / "metrics.jsonl").write_text('{"step": 0}\n{"step": \n{"step": 2}\n')
    with pytest.raises(ValueError, match="line 2"):
        MetricsWriter.read(tmp_path)


def test_resume_appends_jsonl_and_tensorboard(tmp_path):
    with MetricsWriter(tmp_path) as w:
        w.write(0, {"a": 0.5})
        w.write(1, {"a": 0.25})
    with MetricsWriter(tmp_path) as w:
        w.write(2, {"a": 0.125})
    assert [(r["step"], r["a"]) for r in MetricsWriter.read(tmp_path)] == [(0, 0.5), (1, 0.25),
                                                                        (2, 0.125)]
    assert sorted((s, v) for _, s, v in tb_scalars(tmp_path / "tb")) == [(0, 0.5), (1, 0.25),
                                                                         (2, 0.125)]


def test_disabled_writer_writes_nothing(tmp_path):
    w = MetricsWriter(tmp_path / "run", enabled=False)
    rec = w.write(3, {"a": float("nan")})
    w.close()
    assert rec["step"] == 3 and rec["a"] is None
    assert not (tmp_path / "run").exists()


# --------------------------------------------------------------------------- skills

def test_gate_summary_hand_computed():
    g = GateSummary.from_arrays([0.2, 0.6, 0.9, 0.7], [1, 1, 0, 1])
    assert g.mean == pytest.approx((0.2 + 0.6 + 0.7) / 3)
    assert g.share_gt_half == pytest.approx(2 / 3)
    assert g.n_tokens == 3
    assert GateSummary.from_arrays([0.5, 0.51]).share_gt_half == 0.5  # strict > 0.5
    assert GateSummary.from_arrays([0.3, 0.9], [0, 0]) is None
    with pytest.raises(ValueError, match="shape"):
        GateSummary.from_arrays([0.3, 0.9], [1, 1, 1])


def test_skill_log_records(tmp_path):
    log = SkillLog(tmp_path)
    log.write(SkillLogEntry(update=3, traj_id="u3-g0-1", task_id="hotpot-17", success=True,
                          parse_ok=True, skill="Search the exact entity first.",
                          summary="Found the answer in two searches.",
                          gate=GateSummary(mean=0.75, share_gt_half=0.5, n_tokens=12)))
    log.write([SkillLogEntry(update=4, traj_id="u4-g1-0", task_id="nq-2", success=False,
                           parse_ok=False, skill="", summary="unparsed", gate=None)])
    with pytest.raises(TypeError, match="SkillLogEntry"):
        log.write([{"update": 1}])
    recs = strict_lines(tmp_path / "skills.jsonl")
    assert recs == SkillLog.read(tmp_path)
    assert recs[0] == {"update": 3, "traj_id": "u3-g0-1", "task_id": "hotpot-17",
                       "outcome": "success", "parse_ok": True,
                       "skill": "Search the exact entity first.",
                       "summary": "Found the answer in two searches.",
                       "gate": {"mean": 0.75, "share_gt_half": 0.5, "n_tokens": 12}}
    assert recs[1]["outcome"] == "failure" and recs[1]["gate"] is None
    assert recs[1]["parse_ok"] is False
    assert SkillLog.read(tmp_path / "absent") == []


# --------------------------------------------------------------------------- Timer / progress

class FakeClock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def test_timer_accumulates(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(M.time, "perf_counter", clock)
    t = Timer()
    with t("rollout"):
        clock.t += 2.0
    with t("train"):
        clock.t += 0.5
    with pytest.raises(KeyError):
        with t("rollout"):
            clock.t += 1.0
            raise KeyError("boom")  # time still counted
    assert t.totals == {"rollout": 3.0, "train": 0.5}
    assert t.metrics() == {"time/rollout": 3.0, "time/train": 0.5}
    assert t.pop("") == {"rollout": 3.0, "train": 0.5}
    assert t.totals == {}
    shared: dict[str, float] = {"analysis": 1.0}
    with Timer(shared)("analysis"):
        clock.t += 1.0
    assert shared == {"analysis": 2.0}


def test_stage_progress_eta(monkeypatch):
    monkeypatch.setenv("TQDM_DISABLE", "0")  # the bar must draw for this test (stderr is no terminal here)
    clock = FakeClock()
    monkeypatch.setattr(M.time, "perf_counter", clock)
    buf = io.StringIO()
    with StageProgress(total=10, desc="rl", unit="upd", initial=2, file=buf, mininterval=0,
                       ascii=True) as p:
        assert p.eta_seconds() is None
        for _ in range(4):
            clock.t += 2.0
            p.update(1, success=0.25)
        # 4 updates in 8 s this session, 4 left -> 8 s
        assert p.eta_seconds() == pytest.approx(8.0)
    out = buf.getvalue()
    assert "rl" in out and "6/10" in out and "success=0.25" in out
    assert re.search(r"\[\d\d:\d\d<\d\d:\d\d", out), out  # tqdm's elapsed<remaining (ETA)


# --------------------------------------------------------------------------- report

STEPS = 12


def _synthetic_run(workdir: Path) -> dict[str, dict[int, float | None]]:
    """Write a run with MetricsWriter/SkillLog and eval json; return {key: {step: value}}."""
    rng = np.random.default_rng(1)
    truth: dict[str, dict[int, float | None]] = {}

    def put(step, vals, prefix):
        w.write(step, vals, prefix=prefix)
        for k, v in vals.items():
            v = float(v)
            truth.setdefault(f"{prefix}/{k}", {})[step] = v if math.isfinite(v) else None

    w = MetricsWriter(workdir, tensorboard=False)
    for s in range(STEPS):
        put(s, {"success_rate": rng.uniform(), "return": rng.normal(),
                "episode_length": rng.uniform(2, 9), "invalid_rate": rng.uniform(0, 0.2)}, "rollout")
        put(s, {"parse_rate": rng.uniform(0.5, 1)}, "analysis")
        put(s, {"loss": rng.normal(), "opd_loss": rng.uniform(), "gate_mean": rng.uniform(),
                "gate_gt_half": rng.uniform(), "active_share": rng.uniform(),
                "kl": rng.uniform(0, 0.1), "lr": 1e-6}, "train")
        put(s, {"rollout": rng.uniform(1, 3), "train": rng.uniform(0.5, 1)}, "time")
        if s % 4 == 3:
            put(s, {"success_rate": rng.uniform()}, "eval")
    put(5, {"kl": float("nan")}, "train")  # overwrite: last write for (key, step) wins
    w.close()
    # a resumed run redoes the last step with different values
    with MetricsWriter(workdir, tensorboard=False) as w:
        put(STEPS - 1, {"success_rate": 0.875, "episode_length": 3.25}, "rollout")

    log = SkillLog(workdir)
    recs = []
    for i in range(20):
        gates = rng.uniform(size=30)
        recs.append(SkillLogEntry(update=i % STEPS, traj_id=f"t{i}", task_id=f"q{i}",
                                success=bool(i % 3 == 0), parse_ok=bool(i % 5 != 0),
                                skill=f"skill {i}", summary=f"summary {i}",
                                gate=GateSummary.from_arrays(gates) if i % 7 else None))
    log.write(recs)

    (workdir / "eval").mkdir()
    (workdir / "eval" / "sft.json").write_text(json.dumps(
        {"stage_or_step": "sft", "results": {"overall": {"success": 0.3125, "n": 32},
                                             "per_type": {"pick": {"success": 0.5, "n": 8},
                                                          "clean": {"success": 0.125, "n": 8}}}}))
    (workdir / "eval" / "rl_0011.json").write_text(json.dumps(
        {"stage_or_step": 11, "results": {"overall": {"success": 0.59375, "n": 32}}}))
    return truth


def _table_rows(md: str) -> dict[str, list[str]]:
    rows = {}
    for line in md.splitlines():
        m = re.match(r"\| `([^`]+)` \|(.*)\|$", line)
        if m:
            rows[m.group(1)] = [c.strip() for c in m.group(2).split("|")]
    return rows


def test_report_on_synthetic_run(tmp_path, capsys):
    truth = _synthetic_run(tmp_path)
    assert main([str(tmp_path)]) == 0
    out_dir = tmp_path / "report"
    expected_pngs = {"success.png", "episode_length.png", "opd_loss.png", "gate.png",
                     "gate_hist.png", "parse_rate.png", "rollout.png", "train.png", "time.png",
                     "eval.png"}
    assert {p.name for p in out_dir.glob("*.png")} == expected_pngs
    for name in expected_pngs:
        data = (out_dir / name).read_bytes()
        assert data[:8] == PNG_MAGIC and len(data) > 2000, name
    md = (out_dir / "summary.md").read_text()
    for name in expected_pngs:
        assert f"]({name})" in md
    assert "wrote" in capsys.readouterr().out

    rows = _table_rows(md)
    assert set(rows) == set(truth)
    for key, by_step in truth.items():
        last_step = max(by_step)
        last = by_step[last_step]
        cells = rows[key]
        assert cells[0] == ("nan" if last is None else format(last, ".4g")), key
        assert cells[1] == str(last_step), key
        assert cells[4] == str(len(by_step)), key
    # independently computed values for the resumed step and the NaN overwrite
    assert rows["rollout/success_rate"][0] == "0.875"
    assert rows["rollout/episode_length"][0] == "3.25"
    assert truth["train/kl"][5] is None
    # best = max of success rate over steps
    sr = truth["rollout/success_rate"]
    best_step = max(sr, key=lambda s: sr[s])
    assert rows["rollout/success_rate"][2] == f"{sr[best_step]:.4g} (max)"
    assert rows["rollout/success_rate"][3] == str(best_step)
    assert rows["train/kl"][2] == "—"  # no best direction for KL

    # skills table: counts and parse share per outcome
    n_succ = sum(1 for i in range(20) if i % 3 == 0)
    parse_succ = sum(1 for i in range(20) if i % 3 == 0 and i % 5 != 0) / n_succ
    assert f"| success | {n_succ} | {parse_succ:.4g} |" in md
    # eval tables
    assert "### sft (`eval/sft.json`)" in md and "### 11 (`eval/rl_0011.json`)" in md
    assert "| success | 0.3125 |" in md and "| success | 0.5938 |" in md
    assert "| pick | 0.5 | 8 |" in md and "| clean | 0.125 | 8 |" in md


def test_report_skips_missing_plots(tmp_path):
    with MetricsWriter(tmp_path, tensorboard=False) as w:
        for s in range(3):
            w.write(s, {"rollout/success_rate": s / 4})
    rep = make_report(tmp_path, tmp_path / "out")
    assert [p.name for p in rep.plots] == ["success.png"]
    md = rep.summary.read_text()
    assert "Skills" not in md and "Evaluation" not in md
    assert _table_rows(md)["rollout/success_rate"][:2] == ["0.5", "2"]


def test_report_errors(tmp_path, capsys):
    with pytest.raises(ReportError, match="does not exist"):
        make_report(tmp_path / "nope")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ReportError, match="nothing to report"):
        make_report(empty)
    (empty / "metrics.jsonl").write_text("")
    with pytest.raises(ReportError, match="nothing to report"):
        make_report(empty)
    assert main([str(empty)]) == 2
    assert "error: nothing to report" in capsys.readouterr().err
    bad = tmp_path / "bad"
    (bad / "eval").mkdir(parents=True)
    (bad / "eval" / "x.json").write_text(json.dumps({"stage_or_step": 1,
                                                     "results": {"overall": {"success": "hi"}}}))
    with pytest.raises(ReportError, match=r"x\.json.*overall\.success"):
        make_report(bad)


def test_report_cli_module(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    r = subprocess.run([sys.executable, "-m", "seed_jax.report", str(empty)], cwd=REPO,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "nothing to report" in r.stderr


@pytest.mark.parametrize("value,tty,requested,expected", [
    ("", True, True, True), ("", False, True, False), ("0", False, True, True), ("1", True, True, False),
    ("True", True, True, False), ("", True, False, False), ("0", True, False, False),
])
def test_progress_enabled_follows_tqdm_disable_and_tty(monkeypatch, value, tty, requested, expected):
    """TQDM_DISABLE decides when set (1: off, 0: on); unset, bars draw only on a terminal."""
    from seed_jax.metrics import StageProgress, progress_enabled

    monkeypatch.setenv("TQDM_DISABLE", value)
    monkeypatch.setattr(M.sys.stderr, "isatty", lambda: tty, raising=False)
    assert progress_enabled(requested) is expected
    with StageProgress(3, "x", disable=not requested) as bar:
        assert bar._bar.disable is (not expected)


# ------------------------------------------------------------ one update numbering (issue 33 item 10)


def test_resumed_rl_writes_each_update_once(tmp_path):
    """A run checkpointed after update 2 (of 4) was killed after writing update 3's row; the
    relaunch resumes from checkpoint 2 and redoes update 3: metrics.jsonl ends with one row per
    update 1..4, and the rows of stage 1, the SFT, an evaluation and an event stay."""
    from seed_jax.pipeline.rl import forget_redone_updates

    def row(u, sr):
        return {"rollout/success_rate": sr, "train/loss": 0.1 * u}

    with MetricsWriter(tmp_path, tensorboard=False) as w:
        w.write(0, {"trajectories": 8}, prefix="stage1")
        w.write(1, {"loss": 2.0}, prefix="sft")
        for u, sr in ((1, 0.25), (2, 0.5), (3, 0.125)):  # update 3: not checkpointed, then killed
            w.write(u, row(u, sr))
        w.write(3, {"eval/success_rate": 0.25})  # an in-training evaluation after update 3: redone too
        w.event(3, "config changed: train.lr 0.0001 -> 0.0003 at update 3")
    with MetricsWriter(tmp_path, tensorboard=False) as w:  # the relaunch
        assert forget_redone_updates(w, 2) == 2
        for u, sr in ((3, 0.75), (4, 1.0)):
            w.write(u, row(u, sr))
        w.write(4, {"eval/success_rate": 0.5})
    recs = strict_lines(tmp_path / "metrics.jsonl")
    updates = [(r["step"], r["rollout/success_rate"]) for r in recs if "rollout/success_rate" in r]
    assert updates == [(1, 0.25), (2, 0.5), (3, 0.75), (4, 1.0)]  # update 3 once: the redone one
    assert [r["step"] for r in recs if "stage1/trajectories" in r] == [0]
    assert [r["step"] for r in recs if "sft/loss" in r] == [1]
    assert [r["step"] for r in recs if "event" in r] == [3]
    assert [r["step"] for r in recs if "eval/success_rate" in r] == [4]
    # a first launch (nothing checkpointed) that died after update 1 redoes update 1
    with MetricsWriter(tmp_path, tensorboard=False) as w:
        assert forget_redone_updates(w, 0) == 5  # the 4 update rows and the evaluation after update 4
    assert not any("rollout/success_rate" in r for r in strict_lines(tmp_path / "metrics.jsonl"))


def test_log_line_counts_updates_from_one():
    from seed_jax.pipeline.rl import UpdateRecord, update_log_line

    rec = UpdateRecord(3, [], {}, {}, {}, {"rollout/success_rate": 0.5})
    assert update_log_line(rec, total=4, eta_s=None).startswith("RL update 3/4:")  # update 3 = step 3 = ckpt 3


def _ticks(ax):
    """The x ticks inside the drawn axis range and their labels as drawn."""
    ax.figure.canvas.draw()
    lo, hi = ax.get_xlim()
    return [(t, lab.get_text()) for t, lab in zip(ax.get_xticks(), ax.get_xticklabels()) if lo <= t <= hi]


def test_plots_tick_whole_updates_without_offset():
    from seed_jax.report import Series, compare_figure, grid_figure, line_figure

    s = Series(np.array([1, 2, 3]), np.array([1000.001, 1000.002, 1000.004]))  # would get a "+1e3" offset
    fig = line_figure("loss", [("loss", s)], "loss")
    ax = fig.axes[0]
    ticks = _ticks(ax)
    assert ticks and all(float(t).is_integer() for t, _ in ticks), ticks
    assert {lab for _, lab in ticks} >= {"1", "2", "3"}
    assert ax.xaxis.get_major_formatter().get_offset() == "" and ax.yaxis.get_major_formatter().get_offset() == ""
    assert all(lab.get_text().startswith("1000.") for lab in ax.get_yticklabels() if lab.get_text())
    assert ax.get_xlabel() == "update"
    for fig in (grid_figure("t", [("a", s), ("b", s)]), compare_figure([{"a": s}], ["run"], ["a"])):
        for ax in [a for a in fig.axes if a.get_visible()]:
            assert all(float(t).is_integer() for t, _ in _ticks(ax))
            assert ax.yaxis.get_major_formatter().get_offset() == ""


def test_report_captions_sit_under_their_own_figure(tmp_path):
    _synthetic_run(tmp_path)
    assert main([str(tmp_path)]) == 0
    lines = [ln for ln in (tmp_path / "report" / "summary.md").read_text().splitlines() if ln.strip()]
    images = [i for i, ln in enumerate(lines) if ln.startswith("![")]
    assert len(images) == 10
    for k, i in enumerate(images, 1):
        title = re.match(r"!\[(.*)\]\((.*)\)", lines[i]).group(1)
        assert lines[i - 1] == f"### {title}"  # the heading right above
        assert lines[i + 1].startswith(f"*Figure {k}: {title}: "), (lines[i], lines[i + 1])  # the caption right under
