"""Export ready to serve: bf16 weights and generation_config.json that transformers loads, the
export command on an RL checkpoint, and the chat REPL, each checked against transformers."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors import safe_open

from seed_jax.models import load_model, save_model, save_tokenizer
from tests.conftest import tiny_hf_model

pytestmark = pytest.mark.integration  # whole pipelines / subprocess launches: CONTRIBUTING.md tiers

REPO = Path(__file__).resolve().parents[1]
# a base model's generation defaults (EOS ids of a chat model, sampling defaults) to carry through
BASE_GENERATION = {"bos_token_id": 1, "eos_token_id": [2, 7], "pad_token_id": 2, "do_sample": True,
                   "temperature": 0.7, "top_p": 0.8, "top_k": 20, "repetition_penalty": 1.05}


@pytest.fixture(scope="module")
def bf16_base(smol_tokenizer, tmp_path_factory):
    """A tiny random Qwen2 in bfloat16 over the embedded tokenizer's vocabulary, saved by transformers
    with a generation_config.json and the tokenizer: ``(torch model, directory)``."""
    hf = tiny_hf_model("qwen2", vocab_size=len(smol_tokenizer)).to(torch.bfloat16)
    d = tmp_path_factory.mktemp("bf16_base")
    hf.save_pretrained(d)
    (d / "generation_config.json").write_text(json.dumps(BASE_GENERATION))
    smol_tokenizer.save_pretrained(str(d))
    return hf, d


def _logits(model, ids):
    with torch.no_grad():
        return model(input_ids=torch.tensor(ids)).logits.float().numpy()


def test_bf16_export_round_trips_through_transformers(bf16_base, smol_tokenizer, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    from seed_jax.sampling import generate

    hf, base = bf16_base
    model = load_model(base, dtype="bfloat16", param_dtype="bfloat16")
    out = tmp_path / "export"
    save_model(model, out)
    save_tokenizer(smol_tokenizer, out)

    cfg = json.loads((out / "config.json").read_text())
    assert cfg["torch_dtype"] == "bfloat16" and cfg["dtype"] == "bfloat16"
    # the weights are the base model's bf16 tensors, bit for bit
    ref = hf.state_dict()
    with safe_open(str(out / "model.safetensors"), framework="pt") as f:
        names = set(f.keys())
        for name in names:
            t = f.get_tensor(name)
            assert t.dtype == torch.bfloat16, name
            assert torch.equal(t, ref[name]), name
    assert names == {k for k in ref if not (k == "lm_head.weight" and hf.config.tie_word_embeddings)}

    # generation_config.json: the base model's, as transformers reads it
    assert json.loads((out / "generation_config.json").read_text()) == BASE_GENERATION
    gen = GenerationConfig.from_pretrained(out)
    for k, v in BASE_GENERATION.items():
        assert getattr(gen, k) == v, k

    reloaded = AutoModelForCausalLM.from_pretrained(out)
    assert reloaded.dtype == torch.bfloat16
    tok = AutoTokenizer.from_pretrained(out)
    prompt = tok.apply_chat_template([{"role": "user", "content": "Where is the apple?"}], tokenize=False,
                                     add_generation_prompt=True)
    ids = tok(prompt, add_special_tokens=False)["input_ids"]
    assert ids == smol_tokenizer(prompt, add_special_tokens=False)["input_ids"]

    # logits: the exported bf16 weights, both sides computing in float32
    ref32 = reloaded.float().eval()
    ours = load_model(out, dtype="float32", param_dtype="float32")
    np.testing.assert_allclose(np.asarray(ours(np.array([ids]))), _logits(ref32, [ids]), atol=1e-4)
    # and the bf16 model as exported computes in bf16 close to transformers' bf16
    bf = AutoModelForCausalLM.from_pretrained(out).eval()
    assert np.abs(np.asarray(model(np.array([ids]))) - _logits(bf, [ids])).max() < 0.1

    # greedy generation: the project's sampler vs transformers' generate on the export
    res = generate(ours, tok, [ids], max_new_tokens=12, temperature=0.0)
    with torch.no_grad():
        ref_ids = ref32.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                                 do_sample=False, max_new_tokens=12, repetition_penalty=1.0)[0, len(ids):].tolist()
    assert res.token_ids[0] == ref_ids


def test_embedded_gguf_generation_config_from_its_metadata():
    import gguf

    from seed_jax.models import embedded_model_path
    from seed_jax.models.gguf_file import gguf_hf_config
    from seed_jax.models.model import generation_config_from_hf

    r = gguf.GGUFReader(str(embedded_model_path()))
    got = generation_config_from_hf(gguf_hf_config(r))
    want = {"bos_token_id": r.fields["tokenizer.ggml.bos_token_id"].contents(),
            "eos_token_id": r.fields["tokenizer.ggml.eos_token_id"].contents(),
            "pad_token_id": r.fields["tokenizer.ggml.padding_token_id"].contents()}
    assert got == want == {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 2}


def test_saved_tokenizer_names_a_class_transformers_4_knows(smol_tokenizer, tmp_path):
    save_tokenizer(smol_tokenizer, tmp_path)
    cfg = json.loads((tmp_path / "tokenizer_config.json").read_text())
    # transformers 4.x resolves tokenizer classes by these names; 5.x's generic "TokenizersBackend" it cannot
    assert cfg["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert cfg["chat_template"] == smol_tokenizer.chat_template


# ------------------------------------------------------------------------------ export command


def _tiny_run(workdir: Path):
    """A run directory of the tiny search preset (method grpo: no SFT stage) with one RL checkpoint at
    step 3 whose parameters differ from the initial ones; returns those parameters."""
    import jax

    from seed_jax.configs.search import get_config
    from seed_jax.pipeline.runtime import load_policy, train_config
    from seed_jax.train.checkpoint import Checkpointer
    from seed_jax.train.mesh import make_mesh
    from seed_jax.train.state import create_sharded_state

    config = get_config("tiny")
    config.method = "grpo"
    workdir.mkdir(parents=True)
    (workdir / "config.json").write_text(json.dumps(config.to_dict(), indent=1, default=str))
    start = load_policy(config)
    trained = jax.tree_util.tree_map(lambda p: p + 0.01 * jax.random.normal(jax.random.PRNGKey(1), p.shape, p.dtype),
                                     start.params)
    state = create_sharded_state(trained, train_config(config), make_mesh(), rng=config.seed)
    with Checkpointer(workdir / "rl" / "ckpt") as ckpt:
        ckpt.save(3, state, {"update": 3})
    return jax.device_get(trained), start


def test_export_command_writes_the_checkpoint_transformers_loads(tmp_path, capsys):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from seed_jax.export import main
    from seed_jax.models.weights import export_tensors

    trained, start = _tiny_run(tmp_path / "run")
    assert main([f"--workdir={tmp_path / 'run'}", "--step=7", f"--out={tmp_path / 'x'}"]) == 2
    err = capsys.readouterr().err
    assert "--step 7: no such checkpoint" in err and "there are [3]" in err
    assert main([f"--workdir={tmp_path / 'nope'}", f"--out={tmp_path / 'x'}"]) == 2
    assert "no such directory" in capsys.readouterr().err

    out = tmp_path / "export"
    assert main([f"--workdir={tmp_path / 'run'}", "--step=3", f"--out={out}"]) == 0
    assert f"vllm serve {out}" in capsys.readouterr().out
    hf = AutoModelForCausalLM.from_pretrained(out).eval()
    sd = hf.state_dict()
    for name, arr in export_tensors(trained, start.config):  # the checkpoint's weights, not the start's
        np.testing.assert_array_equal(sd[name].numpy(), arr, err_msg=name)
    gen = json.loads((out / "generation_config.json").read_text())
    assert gen["eos_token_id"] == start.config.eos_token_ids[0]
    tok = AutoTokenizer.from_pretrained(out)
    assert tok.eos_token_id == gen["eos_token_id"] and tok.chat_template

    # an existing, non-empty --out is refused
    assert main([f"--workdir={tmp_path / 'run'}", f"--out={out}"]) == 2
    assert "not empty" in capsys.readouterr().err


# ------------------------------------------------------------------------------------ chat REPL


def test_chat_repl_replies_as_transformers_greedy(bf16_base, smol_tokenizer, tmp_path):
    from transformers import AutoModelForCausalLM

    from seed_jax.chat import main

    _, base = bf16_base
    out = tmp_path / "policy"
    save_model(load_model(base, dtype="bfloat16", param_dtype="bfloat16"), out)
    save_tokenizer(smol_tokenizer, out)
    gen = {**BASE_GENERATION, "do_sample": False}  # greedy, so transformers gives the reference
    (out / "generation_config.json").write_text(json.dumps(gen))

    stdout = io.StringIO()
    assert main([str(out), "--max_new_tokens=8"], stdin=io.StringIO("Hello there\nAnd then?\n/quit\nignored\n"),
                stdout=stdout) == 0

    ref = AutoModelForCausalLM.from_pretrained(out).float().eval()
    messages, expected = [], []
    for text in ("Hello there", "And then?"):
        messages.append({"role": "user", "content": text})
        prompt = smol_tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        ids = smol_tokenizer(prompt, add_special_tokens=False)["input_ids"]
        with torch.no_grad():
            new = ref.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                               max_new_tokens=8, repetition_penalty=1.0)[0, len(ids):]
        reply = smol_tokenizer.decode(new, skip_special_tokens=True)
        messages.append({"role": "assistant", "content": reply})
        expected.append(reply + "\n\n")
    assert stdout.getvalue() == "".join(expected)


def test_chat_module_rejects_a_missing_dir(tmp_path):
    r = subprocess.run([sys.executable, "-m", "seed_jax.chat", str(tmp_path / "missing")], cwd=REPO,
                       capture_output=True, text=True, timeout=120, input="hi\n")
    assert r.returncode == 2 and "does not exist" in r.stderr and "Traceback" not in r.stderr
