"""A run whose workdir is a bucket (``gs://b/run``): every file lands in the bucket, none on local
disk, and a relaunch reads them back (config.json, stage markers, jsonl logs, the orbax checkpoint).

The bucket is a fake: epath's ``gs://`` backend is fsspec, and the test registers for ``gs`` /
``gcs`` an fsspec file system that keeps the objects under a directory standing for the bucket
store (``<tmp>/store/<bucket>/...``). Orbax writes array data with TensorStore's own GCS driver,
so its kvstore spec for a ``gs://`` path is pointed at the same store (the ``file`` driver), and
its bucket-layout query (google-cloud-storage, not installed here) answers "flat". The run itself
sees only ``gs://`` URLs: a path that lost its scheme would land in ``<cwd>/gs:/...``.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path

import jax
import pytest
from etils.epath import backend as epath_backend
from fsspec.implementations.dirfs import DirFileSystem
from fsspec.implementations.local import LocalFileSystem
from jax._src import compilation_cache
from orbax.checkpoint._src.path import gcs_utils

from seed_jax.jsonl import append_jsonl, read_jsonl, repair_torn_tail
from seed_jax.paths import local_copy, run_path, staged_dir, write_text_atomic

pytestmark = pytest.mark.integration  # whole pipelines / subprocess launches: CONTRIBUTING.md tiers

WORKDIR = "gs://b/run"


class _FakeGCS(DirFileSystem):
    """``gs://<bucket>/<key>`` -> ``<root>/<bucket>/<key>`` (fsspec, as gcsfs would be called)."""

    protocol = ("gs", "gcs")
    cachable = False
    root = ""

    def __init__(self, *args, finalize_on_close=None, **kwargs):  # epath passes gcsfs's option
        super().__init__(path=self.root, fs=LocalFileSystem(auto_mkdir=True))  # no folders in a bucket


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


@pytest.fixture
def bucket(tmp_path, monkeypatch):
    """The fake bucket store's directory; cwd and TMPDIR are empty directories of their own."""
    store, cwd, tmp = tmp_path / "store", tmp_path / "cwd", tmp_path / "tmp"
    for d in (store, cwd, tmp):
        d.mkdir()
    monkeypatch.setattr(_FakeGCS, "root", str(store))
    registry = importlib.import_module("fsspec.registry")._registry
    for scheme in _FakeGCS.protocol:
        monkeypatch.setitem(registry, scheme, _FakeGCS)
    epath_backend.fsspec_backend._get_filesystem.cache_clear()

    def kvstore(path):
        name, key = gcs_utils.parse_gcs_path(path, add_trailing_slash=False)
        return {"driver": "file", "path": f"{store}/{name}/{key}"}

    monkeypatch.setattr(gcs_utils, "get_kvstore_for_gcs", kvstore)
    monkeypatch.setattr(gcs_utils, "is_hierarchical_namespace_enabled", lambda path: False)
    monkeypatch.chdir(cwd)
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    cache_dir = jax.config.jax_compilation_cache_dir
    yield store
    jax.config.update("jax_compilation_cache_dir", cache_dir)  # the run pointed it into the bucket
    compilation_cache.reset_cache()  # JAX keeps its cache object: drop the bucket's for the next tests
    epath_backend.fsspec_backend._get_filesystem.cache_clear()
    assert not _files(cwd) and not _files(tmp), "a remote run wrote to local disk"
    assert not any("gs:" in p.name for p in tmp_path.rglob("*")), "a gs:// path lost its scheme"


def _config(num_updates: int):
    config = importlib.import_module("seed_jax.configs.search").get_config("tiny")
    config.method = "seed_no_sft"
    config.rl.num_updates = num_updates
    config.stages = "rl"
    return config


def test_run_in_a_bucket_writes_there_and_resumes_from_it(bucket, caplog):
    from seed_jax.launch import run_pipeline
    from seed_jax.pipeline.run import ConfigChangedError

    caplog.set_level(logging.INFO, logger="seed_jax")
    run_pipeline(_config(2), WORKDIR)
    run = bucket / "b" / "run"
    files = _files(run)
    for f in ("config.json", "stages/rl.json", "metrics.jsonl", "skills.jsonl", "rl/transcripts.jsonl",
              "summary.md", "rl/final_model/config.json", "rl/final_model/tokenizer_config.json",
              "rl/ckpt/1/commit_success.txt"):
        assert f in files, f
    assert any(f.startswith("tb/events.out.tfevents") for f in files)
    assert json.loads((run / "config.json").read_text())["rl"]["num_updates"] == 2
    assert [r["step"] for r in read_jsonl(run / "metrics.jsonl") if "train/loss" in r] == [1, 2]

    # config.json is read back: a key that changes results is refused
    changed = _config(2)
    changed.train.lr = 2 * changed.train.lr
    with pytest.raises(ConfigChangedError, match="train.lr"):
        run_pipeline(changed, WORKDIR)

    # a raised rl.num_updates continues from the bucket's checkpoint, appending to its logs
    caplog.clear()
    run_pipeline(_config(3), WORKDIR)
    assert "RL: resumed from checkpoint 2 (next update 3)" in caplog.text  # checkpoint n: after update n
    rows = read_jsonl(run / "metrics.jsonl")
    assert [r["step"] for r in rows if "train/loss" in r] == [1, 2, 3]
    assert sorted({r["update"] for r in read_jsonl(run / "rl" / "transcripts.jsonl")}) == [1, 2, 3]
    assert json.loads((run / "stages" / "rl.json").read_text())["num_updates"] == 3


def test_remote_file_helpers(bucket):
    """Appends, atomic writes and whole-directory staging on a gs:// path; the local path unchanged."""
    log = run_path(f"{WORKDIR}/logs/a.jsonl")
    assert str(log) == f"{WORKDIR}/logs/a.jsonl"
    repair_torn_tail(log)  # nothing there yet: a no-op
    append_jsonl(log, [{"i": 0}])
    append_jsonl(log, [{"i": 1}, {"i": 2}])
    assert [r["i"] for r in read_jsonl(log)] == [0, 1, 2]
    assert (bucket / "b" / "run" / "logs" / "a.jsonl").read_text().count("\n") == 3
    write_text_atomic(f"{WORKDIR}/x.json", "{}")
    write_text_atomic(f"{WORKDIR}/x.json", '{"a": 1}')
    assert (bucket / "b" / "run" / "x.json").read_text() == '{"a": 1}'
    assert _files(bucket / "b" / "run") == {"logs/a.jsonl", "x.json"}
    for text in ("old", "new"):
        with staged_dir(f"{WORKDIR}/model") as d:
            (d / "sub").mkdir()
            (d / "sub" / "w.txt").write_text(text)
            if text == "old":
                (d / "gone.txt").write_text("only in the old one")
    assert _files(bucket / "b" / "run" / "model") == {"sub/w.txt"}
    local = local_copy(f"{WORKDIR}/model")
    assert (local / "sub" / "w.txt").read_text() == "new" and _files(local) == {"sub/w.txt"}
    shutil.rmtree(local)  # local_copy's download lives until exit; the fixture checks TMPDIR is empty


def test_collect_parts_in_a_bucket(bucket):
    """A chunked collect's part file (`seed_jax.pipeline.chunked`) in a gs:// run directory: started,
    appended, read back by a relaunch, and removed when the stage is marked done."""
    from seed_jax.jsonl import append_lines
    from seed_jax.pipeline.chunked import read_part
    from seed_jax.pipeline.run import Run
    from seed_jax.rollout.trajectory import Trajectory

    run = Run(_config(1), WORKDIR)
    part = run.path("parts", "collect", "trajectories.jsonl")
    header = {"part": "trajectories", "tasks": 2, "group_size": 1, "seed": 0, "policy": "random@0"}
    assert read_part(part, header, 1) == []
    traj = Trajectory(task_id="0", group_id=0, traj_id="s1/0#0", task_description="t", steps=[],
                      episode_reward=0.0, won=False)
    append_lines(part, [traj.to_json()])
    assert read_part(part, header, 1) == [traj]
    stored = bucket / "b" / "run" / "parts" / "collect" / "trajectories.jsonl"
    assert stored.read_text().splitlines() == [json.dumps(header), traj.to_json()]
    run.mark_done("collect", {})
    run.close()
    assert not stored.exists() and (bucket / "b" / "run" / "stages" / "collect.json").exists()


def test_local_paths_stay_local(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert str(run_path("runs/x")) == os.path.join(str(tmp_path), "runs", "x")
    assert local_copy("runs/x") == tmp_path / "runs" / "x"
    with staged_dir("runs/m") as d:
        assert d == tmp_path / "runs" / "m.tmp"
        (d / "f").write_text("1")
    assert _files(tmp_path) == {"runs/m/f"}
    with pytest.raises(ValueError, match="memory://"):
        run_path("memory://x")


def test_a_bucket_url_as_model_path_is_refused_naming_the_fix():
    from seed_jax.pipeline.validate import ConfigValueError, check_inputs

    config = _config(2)
    config.model.path = "gs://b/models/qwen"
    with pytest.raises(ConfigValueError, match=r"config.model.path: gs://b/models/qwen is a URL.*STAGE_IN"):
        check_inputs(config)
