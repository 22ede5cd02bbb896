"""Sampler: greedy parity with transformers' generate, seeds, stop strings (outside thinking,
by the action parser's rule), sampling filters."""

from __future__ import annotations

import dataclasses
import inspect

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from seed_jax.envs.actions import THINK_TAGS, parse_action
from seed_jax.models import load_model
from seed_jax.sampling import SamplerSpec, SamplingParams, _find_stop, generate, sample_token
from tests.conftest import TINY_KINDS

PROMPTS = [[5, 17, 33, 90, 12, 7, 8, 44, 61], [9, 100, 3], [70, 71, 72, 73, 74, 75]]


def _hf_greedy(hf, prompts, n):
    T = max(map(len, prompts))
    ids = torch.full((len(prompts), T), 2)
    mask = torch.zeros((len(prompts), T), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, T - len(p):] = torch.tensor(p)
        mask[i, T - len(p):] = 1
    with torch.no_grad():
        out = hf.generate(input_ids=ids, attention_mask=mask, max_new_tokens=n, do_sample=False,
                          eos_token_id=2, pad_token_id=2)
    rows = []
    for r in out[:, T:].tolist():
        rows.append(r[: r.index(2) + 1] if 2 in r else r)
    return rows


@pytest.mark.parametrize("kind", TINY_KINDS)
def test_greedy_equals_transformers_generate(kind, tiny_model_dirs, smol_tokenizer):
    hf, d = tiny_model_dirs[kind]
    model = load_model(d)
    res = generate(model, smol_tokenizer, PROMPTS, max_new_tokens=20, temperature=0.0, chunk=8)
    assert res.token_ids == _hf_greedy(hf, PROMPTS, 20)
    # greedy log-probs are the model's own log-softmax of the chosen tokens
    full = PROMPTS[1] + res.token_ids[1]
    logits = np.asarray(model(np.array([full]), np.ones((1, len(full)), np.int32)))[0]
    lsm = logits - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1, keepdims=True)) - logits.max(-1, keepdims=True)
    want = [lsm[len(PROMPTS[1]) - 1 + j, t] for j, t in enumerate(res.token_ids[1])]
    np.testing.assert_allclose(res.logprobs[1], want, atol=1e-4)


def test_fixed_seed_reproduces_and_seeds_differ(tiny_model_dirs, smol_tokenizer):
    model = load_model(tiny_model_dirs["qwen2"][1])
    a = generate(model, smol_tokenizer, PROMPTS, max_new_tokens=16, temperature=1.0, seed=3)
    b = generate(model, smol_tokenizer, PROMPTS, max_new_tokens=16, temperature=1.0, seed=3)
    c = generate(model, smol_tokenizer, PROMPTS, max_new_tokens=16, temperature=1.0, seed=4)
    assert a.token_ids == b.token_ids and a.logprobs == b.logprobs
    assert a.token_ids != c.token_ids


def test_sampled_logprobs_equal_the_scoring_pass_at_the_same_temperature(tiny_model_dirs, smol_tokenizer):
    """The sampler at T = 0.5 records log softmax(z / T) of each drawn token; the RL scoring
    pass (`compute_logprobs(..., temperature=T)`, which old / ref / train log-probs use) gives
    the same values for the same tokens, and the untempered pass does not."""
    from seed_jax.train.batch import pack_rows
    from seed_jax.train.logprobs import compute_logprobs

    model = load_model(tiny_model_dirs["llama"][1])
    res = generate(model, smol_tokenizer, PROMPTS, max_new_tokens=10, temperature=0.5, seed=1, ignore_eos=True)
    P, R = 16, 10
    ids, mask, _ = pack_rows([list(p) for p in PROMPTS], res.token_ids, P, R, 2)
    tempered = compute_logprobs(model.params, model.config, ids, mask, P, R, micro_batch=3, temperature=0.5)
    plain = compute_logprobs(model.params, model.config, ids, mask, P, R, micro_batch=3)
    for i, lp in enumerate(res.logprobs):
        np.testing.assert_allclose(tempered[i, :len(lp)], lp, atol=2e-4)
        assert np.abs(plain[i, :len(lp)] - np.asarray(lp)).max() > 1e-2


def test_bucketed_batch_gives_same_rows_as_single_prompts(tiny_model_dirs, smol_tokenizer):
    model = load_model(tiny_model_dirs["qwen3"][1])
    batched = generate(model, smol_tokenizer, PROMPTS, max_new_tokens=12, temperature=0.0)
    for i, p in enumerate(PROMPTS):
        single = generate(model, smol_tokenizer, [p], max_new_tokens=12, temperature=0.0)
        assert single.token_ids[0] == batched.token_ids[i]


def test_stop_string_ends_the_sequence_at_the_string(tiny_model_dirs, smol_tokenizer):
    model = load_model(tiny_model_dirs["llama"][1])
    free = generate(model, smol_tokenizer, PROMPTS, max_new_tokens=24, temperature=0.0)
    text = free.texts[0]
    stop = text[len(text) // 2: len(text) // 2 + 3]
    assert stop and stop in text
    res = generate(model, smol_tokenizer, PROMPTS, max_new_tokens=24, temperature=0.0, stop_strings=[stop], chunk=4)
    assert res.finish_reasons[0] == "stop"
    assert res.texts[0] == text[: text.index(stop) + len(stop)]
    ids = res.token_ids[0]
    assert ids == free.token_ids[0][: len(ids)]  # a prefix of the free run ...
    assert stop in smol_tokenizer.decode(ids) and stop not in smol_tokenizer.decode(ids[:-1])  # ... minimal
    assert len(res.logprobs[0]) == len(ids)


def test_a_stop_string_while_thinking_does_not_end_the_response(smol_tokenizer):
    def ids_of(text):
        return smol_tokenizer(text, add_special_tokens=False)["input_ids"]

    def upto(ids, k):
        return smol_tokenizer.decode(ids[:k], skip_special_tokens=True)

    ids = ids_of("<think>maybe <action>look</action>?</think><action>go to desk 1</action> and more")
    k = _find_stop(smol_tokenizer, ids, ("</action>",), 0, THINK_TAGS)
    assert upto(ids, k).endswith("?</think><action>go to desk 1</action>")
    assert not upto(ids, k - 1).endswith("</action>")
    assert parse_action(upto(ids, k), ("action",)).text == "go to desk 1"
    plain = _find_stop(smol_tokenizer, ids, ("</action>",), 0)  # no think tags: the first one anywhere
    assert upto(ids, plain).endswith("<think>maybe <action>look</action>")
    assert not parse_action(upto(ids, plain), ("action",)).valid
    # a <think> not yet closed: everything after it is still thinking
    assert _find_stop(smol_tokenizer, ids_of("<think>maybe <action>look</action> or"), ("</action>",), 0,
                      THINK_TAGS) is None


def test_generate_skips_stop_strings_inside_thinking(tiny_model_dirs, smol_tokenizer):
    """On a tiny model's greedy text, with think tags cut out of that text: a stop string inside
    the thinking span is passed over, the next one after it ends the response."""
    model = load_model(tiny_model_dirs["qwen3"][1])
    free = generate(model, smol_tokenizer, PROMPTS, max_new_tokens=24, temperature=0.0)
    text = free.texts[0]
    case = None  # (stop, f1, f2, open, close): the stop at f1 inside [open, close], again at f2 after it
    for i in range(1, len(text) - 2):
        stop = text[i:i + 2]
        f1 = text.find(stop)
        f2 = text.find(stop, f1 + 1)
        if "\ufffd" in stop or f1 < 1 or f2 < 0:
            continue
        open_tag = text[f1 - 1:f1 + 1]
        if text.find(open_tag) != f1 - 1:
            continue
        for j in range(f1 + 2, f2 - 1):
            close = text[j:j + 2]
            if text.find(close, f1 + 1) == j and open_tag not in text[j + 2:f2 + 2] and "\ufffd" not in close:
                case = (stop, f1, f2, open_tag, close)
                break
        if case:
            break
    assert case, f"no stop string seen twice with room for think tags in {text!r}"
    stop, f1, f2, open_tag, close = case
    kw = dict(max_new_tokens=24, temperature=0.0, stop_strings=[stop], chunk=4)
    plain = generate(model, smol_tokenizer, PROMPTS, **kw)
    assert plain.finish_reasons[0] == "stop" and plain.texts[0] == text[:f1 + 2]
    res = generate(model, smol_tokenizer, PROMPTS, think_tags=(open_tag, close), **kw)
    assert res.finish_reasons[0] == "stop" and res.texts[0] == text[:f2 + 2]
    assert res.token_ids[0] == free.token_ids[0][:len(res.token_ids[0])]
    assert len(res.token_ids[0]) > len(plain.token_ids[0])
    # thinking that never closes: the stop string never counts
    res = generate(model, smol_tokenizer, PROMPTS, think_tags=(open_tag, "\x00"), **kw)
    assert res.finish_reasons[0] != "stop" and res.texts[0] == text and res.token_ids[0] == free.token_ids[0]


def test_top_k_one_is_greedy_and_top_p_keeps_the_nucleus():
    logits = jnp.array([[0.0, 3.0, 1.0, 2.9, -1.0]] * 64)
    rng = jax.random.PRNGKey(0)
    tok, _ = sample_token(logits, rng, SamplingParams(temperature=1.0, top_k=1))
    assert set(np.asarray(tok).tolist()) == {1}
    p = np.exp(logits[0]) / np.exp(logits[0]).sum()  # sorted: 1 (.47), 3 (.43), 2 ...
    tok, lp = sample_token(logits, rng, SamplingParams(temperature=1.0, top_p=0.8))
    assert set(np.asarray(tok).tolist()) <= {1, 3} and len(set(np.asarray(tok).tolist())) == 2
    np.testing.assert_allclose(np.exp(np.asarray(lp)), p[np.asarray(tok)], rtol=1e-5)


def test_bad_sampling_settings_are_rejected():
    with pytest.raises(ValueError, match="top_p"):
        SamplingParams(top_p=0.0)
    with pytest.raises(ValueError, match="temperature"):
        SamplingParams(temperature=-1)


def test_sampling_params_fields_are_generate_keywords():
    """`RolloutSettings.sampling` reaches `generate` as ``**dataclasses.asdict(sampling)``."""
    keywords = inspect.signature(generate).parameters
    for f in dataclasses.fields(SamplingParams):
        assert keywords[f.name].kind is inspect.Parameter.KEYWORD_ONLY
        assert keywords[f.name].default == f.default


def test_stop_window_filter_never_hides_a_new_stop(smol_tokenizer):
    """Reference: `_find_stop` on the whole decoded text. For every prefix split (``checked``
    tokens seen, the rest new) of texts with stop strings at varied places, a stop string that
    first appears after ``checked`` is seen by the window filter that spares the full decode."""
    from seed_jax.sampling import _tail_may_stop

    stops = ("</action>", "</answer>")
    texts = ["<think>maybe <action>look</action>?</think><action>go to desk 1</action> and more",
             "plain text then </ans" + "wer> at the end", "ünïcödé ✓✓ before </action>✓ after",
             "<action>open drawer 2</action>" + " filler" * 30 + "</answer>"]
    for text in texts:
        ids = smol_tokenizer(text, add_special_tokens=False)["input_ids"]
        for checked in range(len(ids)):
            for end in range(checked + 1, len(ids) + 1):
                row = ids[:end]
                new = _find_stop(smol_tokenizer, row, stops, checked + 1, None)
                seen_before = _find_stop(smol_tokenizer, ids[:checked], stops, 0, None) if checked else None
                if new is not None and seen_before is None:
                    assert _tail_may_stop(smol_tokenizer, row, stops, checked), (text, checked, end)
    # and the filter does spare rows: no stop string anywhere near the new tokens
    ids = smol_tokenizer("</action> " + "word " * 40, add_special_tokens=False)["input_ids"]
    assert not _tail_may_stop(smol_tokenizer, ids, stops, len(ids) - 4)


def test_sampler_copy_is_made_once_per_scope(tiny_model_dirs, smol_tokenizer, monkeypatch):
    """Inside `sampler_scope` every `generate` on the scope's params version uses its one copy (a
    nested scope too); another version, or a call outside any scope, makes a copy of its own."""
    import seed_jax.sampling as sampling

    model = load_model(tiny_model_dirs["qwen2"][1])
    made = []
    real = sampling._make_sampler_params
    monkeypatch.setattr(sampling, "_make_sampler_params", lambda *a: made.append(1) or real(*a))
    for backend in ("unrolled", "scan"):
        made.clear()
        spec = SamplerSpec(backend=backend)
        with sampling.sampler_scope(model.params, model.config, spec):
            a = generate(model, smol_tokenizer, PROMPTS, max_new_tokens=4, temperature=0.0, sampler=spec)
            with sampling.sampler_scope(model.params, model.config, spec):  # nested: the same copy
                b = generate(model, smol_tokenizer, PROMPTS, max_new_tokens=4, temperature=0.0, sampler=spec)
            assert len(made) == 1 and a.token_ids == b.token_ids
            new = jax.tree.map(lambda x: x + 0, model.params)  # a new version (same values)
            c = generate(model, smol_tokenizer, PROMPTS, max_new_tokens=4, temperature=0.0, sampler=spec, params=new)
            assert len(made) == 2 and c.token_ids == a.token_ids
        generate(model, smol_tokenizer, PROMPTS, max_new_tokens=4, temperature=0.0, sampler=spec)
        generate(model, smol_tokenizer, PROMPTS, max_new_tokens=4, temperature=0.0, sampler=spec)
        assert len(made) == 4  # outside a scope: one copy per call
    assert not sampling._SCOPES


def test_closed_sampler_scope_lets_a_step_donate_the_params(tiny_model_dirs, smol_tokenizer):
    """On CPU the unrolled sampler's copy is views of the policy's buffers; while it lives a
    donating step cannot reuse them (XLA copies instead, silently); leaving the scope drops it."""
    import seed_jax.sampling as sampling

    model = load_model(tiny_model_dirs["qwen2"][1])
    donate = jax.jit(lambda p: jax.tree.map(lambda x: x * 1.0, p), donate_argnums=0)
    spec = SamplerSpec(backend="unrolled")

    def donated_share(inside: bool) -> float:
        params = jax.tree.map(lambda x: x + 0, model.params)  # a fresh version to donate
        leaves = jax.tree.leaves(params)
        with sampling.sampler_scope(params, model.config, spec):
            generate(model, smol_tokenizer, PROMPTS[:1], max_new_tokens=2, temperature=0.0, sampler=spec,
                     params=params)
            if inside:
                jax.block_until_ready(donate(params))
        if not inside:
            jax.block_until_ready(donate(params))
        return sum(a.is_deleted() for a in leaves) / len(leaves)

    assert donated_share(inside=True) < 1.0  # the layer views pin their buffers
    assert donated_share(inside=False) == 1.0
    assert not sampling._SCOPES


def test_temperature_and_top_p_are_runtime_values_of_one_program(tiny_model_dirs, smol_tokenizer):
    """Collect / eval (T = 0.4) and RL (T = 1.0) sample with the same compiled prefill and decode
    programs: a second temperature (and a second top_p) compiles nothing. Each call equals a call
    at that temperature alone (the traced value samples as the constant did): the T = 1.0 draw after
    the T = 0.4 one equals a T = 1.0 draw on a fresh program cache, and the two temperatures draw
    differently. Greedy (T = 0) and top-k, which change the program, still compile their own."""
    from seed_jax import sampling

    model = load_model(tiny_model_dirs["llama"][1])
    kw = dict(max_new_tokens=12, seed=5, chunk=4, ignore_eos=True)
    jax.clear_caches()
    cool = generate(model, smol_tokenizer, PROMPTS, temperature=0.4, **kw)
    def sizes():
        return sampling._prefill._cache_size(), sampling._decode_chunk._cache_size()

    first = sizes()
    warm = generate(model, smol_tokenizer, PROMPTS, temperature=1.0, **kw)
    assert sizes() == first
    generate(model, smol_tokenizer, PROMPTS, temperature=0.7, top_p=0.9, **kw)  # top_p < 1: the filter's program
    nucleus = sizes()
    assert nucleus[0] == first[0] + 1
    generate(model, smol_tokenizer, PROMPTS, temperature=0.7, top_p=0.8, **kw)
    assert sizes() == nucleus
    jax.clear_caches()
    alone = generate(model, smol_tokenizer, PROMPTS, temperature=1.0, **kw)
    assert warm.token_ids == alone.token_ids and warm.logprobs == alone.logprobs
    assert cool.token_ids != warm.token_ids
