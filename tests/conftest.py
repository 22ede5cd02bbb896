"""Shared fixtures: tiny random Hugging Face models (no download) and the embedded tokenizer."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
from hypothesis import settings as hypothesis_settings

# Property tests draw the same examples on every run (derandomize) so that CI is reproducible;
# `HYPOTHESIS_PROFILE=explore python -m pytest tests/test_skills.py` draws fresh random
# examples on each run, for hunting new failures.
hypothesis_settings.register_profile("repro", derandomize=True, print_blob=True)
hypothesis_settings.register_profile("explore", derandomize=False, print_blob=True)
hypothesis_settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repro"))

# Compile-only TPU devices (libtpu, no chip): several processes may load libtpu at once (this
# process and the plan / start-up tests' subprocesses); without it the second one fails on
# libtpu's lockfile.
os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "true")

REPO = Path(__file__).resolve().parents[1]

TINY_KINDS = ("qwen2", "qwen3", "llama")


@pytest.fixture(autouse=True)
def _seed_jax_logger_restored():
    """A command's ``main`` called in-process (``bench/household_study.py``, ``seed_jax.launch``)
    gives the ``seed_jax`` logger its own stderr handler and stops it propagating, as a command
    should; left so, the later tests' ``caplog`` (on the root logger) reads nothing. Each test
    gets the logger back as it found it."""
    log = logging.getLogger("seed_jax")
    handlers, level, propagate = list(log.handlers), log.level, log.propagate
    yield
    log.handlers[:] = handlers
    log.setLevel(level)
    log.propagate = propagate


def tiny_hf_model(kind: str, seed: int = 0, **overrides):
    """A tiny random transformers model of `kind` (eval mode, float32)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(seed)
    common = dict(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                  rope_theta=10000.0, bos_token_id=1, eos_token_id=2, pad_token_id=2)
    if kind == "qwen2":
        cfg, cls = Qwen2Config(**{**common, **overrides}), Qwen2ForCausalLM
    elif kind == "qwen3":
        cfg, cls = Qwen3Config(**{**common, "head_dim": 24, **overrides}), Qwen3ForCausalLM
    elif kind == "llama":
        cfg, cls = LlamaConfig(**{**common, "tie_word_embeddings": True, **overrides}), LlamaForCausalLM
    else:
        raise ValueError(kind)
    model = cls(cfg).eval()
    with torch.no_grad():  # random (non-unit) norm weights and biases so they are exercised
        for name, p in model.named_parameters():
            if name.endswith(("norm.weight", ".bias")):
                p.copy_(1.0 + 0.1 * torch.randn_like(p) if name.endswith("weight") else 0.1 * torch.randn_like(p))
    return model


@pytest.fixture(scope="session")
def tiny_model_dirs(tmp_path_factory):
    """{kind: (hf_model, saved_dir)} for the three tiny families."""
    out = {}
    for kind in TINY_KINDS:
        m = tiny_hf_model(kind)
        d = tmp_path_factory.mktemp(f"tiny_{kind}")
        m.save_pretrained(d)
        out[kind] = (m, d)
    return out


@pytest.fixture(scope="session")
def smol_tokenizer():
    from seed_jax.models import load_tokenizer

    return load_tokenizer(None)


def official_webshop_dir(root: Path) -> Path:
    """A directory in WebShop's official layout (`envs.webshop.data`) built from the vendored
    attributes: ``items_shuffle_1000.json`` a generated catalog, ``items_ins_v2_1000.json`` the real
    attributes, ``items_human_ins.json`` one 'human' instruction per product that has an
    instruction (its synthetic one). Stands in for the official files the tests cannot download."""
    import gzip
    import json

    from seed_jax.envs.webshop.data import VENDORED_ATTRIBUTES
    from seed_jax.envs.webshop.generate import write_catalog

    root.mkdir(parents=True, exist_ok=True)
    with gzip.open(VENDORED_ATTRIBUTES, "rt", encoding="utf-8") as f:
        attrs = json.load(f)
    (root / "items_ins_v2_1000.json").write_text(json.dumps(attrs), encoding="utf-8")
    write_catalog(root / "items_ins_v2_1000.json", root / "items_shuffle_1000.json")
    human = {asin: [{"instruction": v["instruction"], "instruction_attributes": v["instruction_attributes"],
                     "instruction_options": []}] for asin, v in attrs.items() if v.get("instruction")}
    (root / "items_human_ins.json").write_text(json.dumps(human), encoding="utf-8")
    return root


def pytest_collection_modifyitems(config, items):
    """Test tiers (CONTRIBUTING.md): a test marked ``integration`` (whole pipelines, subprocess
    launches, several processes, installs: by its module's ``pytestmark`` or its own marker) or
    ``slow`` keeps its mark; every other test is ``unit``, so ``-m unit`` selects the tier run
    before each commit and ``-m "not slow"`` (CI, the README) both tiers."""
    for item in items:
        if item.get_closest_marker("integration") is None and item.get_closest_marker("slow") is None:
            item.add_marker(pytest.mark.unit)
