"""What lives on the devices per phase (`seed_jax.pipeline.residency`): the plan against hand
counts, and a tiny run on 8 fake CPU devices whose measured live bytes per device and phase
match the plan and stay balanced (no device holds the whole tree)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest
from jax.sharding import Mesh

from seed_jax.models import ModelConfig
from seed_jax.pipeline.residency import PHASES, Residency, _union_bytes, phase_bytes, phase_peaks, tree_bytes
from seed_jax.sampling import SamplerSpec
from seed_jax.train.config import TrainConfig

pytestmark = pytest.mark.integration  # whole pipelines / subprocess launches: CONTRIBUTING.md tiers

REPO = Path(__file__).resolve().parents[1]

CFG = ModelConfig(model_type="llama", vocab_size=256, hidden_size=32, intermediate_size=64, num_layers=2,
                  num_heads=4, num_kv_heads=2, head_dim=8, tie_word_embeddings=True, eos_token_ids=(2,),
                  dtype="float32", param_dtype="float32")


def _hand_param_count(cfg: ModelConfig) -> int:
    """Embedding + per layer (q, k, v, o, gate, up, down, two norms) + the final norm; tied head."""
    h, f, kv = cfg.hidden_size, cfg.intermediate_size, cfg.num_kv_heads * cfg.head_dim
    q = cfg.num_heads * cfg.head_dim
    layer = h * q + 2 * h * kv + q * h + 3 * h * f + 2 * h
    return cfg.vocab_size * h + cfg.num_layers * layer + h


def test_tree_bytes_by_hand_on_one_device():
    mesh = Mesh(np.asarray(jax.devices()[:1]).reshape(1, 1, 1), ("data", "fsdp", "tensor"))
    n = _hand_param_count(CFG)
    got = tree_bytes(CFG, mesh, TrainConfig(), SamplerSpec(backend="unrolled"))
    assert got["weights"] == got["master"] == 4 * n
    assert got["reference"] == 4 * n  # compute dtype float32: a second full tree
    assert 2 * 4 * n <= got["opt_state"] <= 2 * 4 * n + 64  # AdamW's mu and nu, plus a few counters
    assert got["sampler"] == 4 * CFG.vocab_size * CFG.hidden_size  # views, plus the tied head transposed
    bf16 = tree_bytes(CFG.replace(dtype="bfloat16"), mesh, TrainConfig(compute_dtype="bfloat16"),
                      SamplerSpec(backend="unrolled"))
    assert bf16["sampler"] == 2 * (n + CFG.vocab_size * CFG.hidden_size) and bf16["reference"] < 4 * n


def test_phases_name_their_trees():
    plan = phase_bytes(Residency("resident", True, False), dict(weights=1, master=10, opt_state=100, reference=1000,
                                                                sampler=10000))
    assert plan == {"collect": 10001, "annotate": 10001, "sft": 110, "rl_rollout": 11110, "rl_analysis": 11110,
                    "rl_logprobs": 1110, "rl_train": 1110, "eval": 10001}
    lean = phase_bytes(Residency("reread", False, True), dict(weights=1, master=10, opt_state=100, reference=1000,
                                                              sampler=10000))
    assert lean["annotate"] == 0 and lean["rl_rollout"] == 10110 and lean["rl_logprobs"] == 1110
    assert lean["rl_train"] == 110 and set(lean) == set(PHASES)


def test_aliased_spans_count_once():
    assert _union_bytes([(0, 100), (10, 20), (100, 5), (None, 7), (200, 10)]) == 100 + 5 + 7 + 10


def _run_8_devices(workdir: Path) -> list[dict]:
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=8", "JAX_PLATFORMS": "cpu",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    cmd = [sys.executable, "-m", "seed_jax.launch", "--config=configs/search.py:tiny", f"--workdir={workdir}",
           "--config.mesh.data=1", "--config.mesh.fsdp=8", "--config.train.micro_batch_size=8",
           "--config.rl.num_updates=1"]
    out = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=1200)
    assert out.returncode == 0, out.stderr[-3000:]
    return [json.loads(line) for line in (workdir / "residency.jsonl").read_text().splitlines()]


def test_every_phase_of_an_8_device_run_matches_its_residency_plan(tmp_path):
    """The weights load straight into the fsdp layout: no device holds more than 1.25x the mean
    (loading the whole tree onto the first device failed this), and each phase's measured bytes
    agree with the plan of the same config within 15%."""
    lines = _run_8_devices(tmp_path / "w")
    phases = {line["phase"] for line in lines}
    assert {"collect", "sft", "rl_rollout", "rl_analysis", "rl_logprobs", "rl_train", "eval"} <= phases
    for line in lines:
        per = list(line["measured"].values())
        assert len(per) == 8
        assert max(per) <= 1.25 * np.mean(per), line
        assert abs(max(per) - line["planned"]) <= 0.15 * line["planned"], line


LOAD_SCRIPT = """
import sys, json, numpy as np, jax
from jax.sharding import Mesh
from seed_jax.models import load_model
from seed_jax.train.logprobs import param_shardings
mesh = Mesh(np.asarray(jax.devices()).reshape(1, 8, 1), ("data", "fsdp", "tensor"))
out = {}
for src in sys.argv[1:]:
    src = None if src == "embedded" else src
    whole = load_model(src)
    sharded = load_model(src, shardings=lambda cfg: param_shardings(cfg, mesh))
    same = all(bool(np.array_equal(np.asarray(a), np.asarray(b)))
               for a, b in zip(jax.tree.leaves(whole.params), jax.tree.leaves(sharded.params)))
    per = {}
    for a in jax.tree.leaves(sharded.params):
        for s in a.addressable_shards:
            per[str(s.device)] = per.get(str(s.device), 0) + s.data.nbytes
    total = sum(a.nbytes for a in jax.tree.leaves(whole.params))
    out[str(src)] = {"same": same, "per_device": per, "total": total}
print(json.dumps(out))
"""


def test_weights_load_straight_into_the_fsdp_layout(tiny_model_dirs):
    """A safetensors directory (read slice by slice) and the embedded GGUF (placed from host
    arrays) load into the fsdp=8 layout with the same values as a whole load, each device
    holding about an eighth of the weights, not the whole tree."""
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=8", "JAX_PLATFORMS": "cpu",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    src = str(tiny_model_dirs["qwen2"][1])
    out = subprocess.run([sys.executable, "-c", LOAD_SCRIPT, src, "embedded"], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    for res in got.values():
        per = list(res["per_device"].values())
        assert res["same"] and len(per) == 8
        assert max(per) <= 1.25 * np.mean(per)
        assert max(per) < 0.3 * res["total"]  # an eighth plus the replicated norms, never the whole tree


def test_phase_peaks_add_the_resident_trees_a_program_does_not_take():
    sizes = dict(weights=1, master=10, opt_state=100, reference=1000, sampler=10000)
    peaks = phase_peaks(Residency("resident", True, False), sizes,
                        {"train_step": 5e5, "rollout_prefill": 3e4, "rollout_decode": 4e4, "logprobs": 2e3})
    assert peaks["rl_train"] == (5e5 + 1000, "train_step")  # + the resident reference
    assert peaks["rl_rollout"] == (4e4 + 10 + 100 + 1000, "rollout_decode")  # + master, moments, reference
    assert peaks["collect"] == (4e4 + 1, "rollout_decode") and peaks["eval"] == peaks["collect"]
    assert peaks["rl_logprobs"] == (2e3 + 100 + 1000, "logprobs")
    assert peaks["sft"] == (110.0, None)  # no planned program: the resident trees alone


@pytest.mark.slow
def test_two_hosts_of_four_devices_hold_what_the_residency_plan_says(tmp_path, monkeypatch):
    """The tiny run as 2 processes x 4 fake CPU devices (fsdp over all 8): host 0's devices at every
    phase are balanced and within 15% of the plan (the sampler copy is each host's own)."""
    from tests._multihost import launch

    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=4")
    launch(tmp_path / "w", "--config.mesh.data=1", "--config.mesh.fsdp=8", "--config.train.micro_batch_size=8",
           "--config.rl.num_updates=1", timeout=1500)
    lines = [json.loads(x) for x in (tmp_path / "w" / "residency.jsonl").read_text().splitlines()]
    assert {"collect", "sft", "rl_rollout", "rl_logprobs", "rl_train", "eval"} <= {x["phase"] for x in lines}
    for line in lines:
        per = list(line["measured"].values())
        assert len(per) == 4
        assert max(per) <= 1.25 * np.mean(per), line
        assert abs(max(per) - line["planned"]) <= 0.15 * line["planned"], line
