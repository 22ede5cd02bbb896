"""Stage 1 (spec section 2): collect base-policy trajectories, annotate them, SFT the analyzer role."""

from __future__ import annotations

import logging
import random

import jax
import numpy as np

from seed_jax.metrics import StageProgress
from seed_jax.pipeline.multihost import host_local_params, to_global
from seed_jax.pipeline.run import Run
from seed_jax.pipeline.runtime import load_policy, make_pool, rollout_settings, save_policy, sft_train_config
from seed_jax.pipeline.validate import needs_skill_bank
from seed_jax.rollout.analyzer import analyze_trajectories
from seed_jax.rollout.batch import left_pad, right_pad, round_up
from seed_jax.rollout.loop import make_prompt_encoder, run_rollouts
from seed_jax.rollout.trajectory import read_trajectories, write_trajectories
from seed_jax.skills import SkillRecord, annotate, build_analyzer_prompt, read_skill_records, write_skill_records

log = logging.getLogger("seed_jax")


def rollout_summary(trajs) -> dict:
    ok = [t for t in trajs if not t.env_error]
    steps = [s for t in ok for s in t.steps]
    return {
        "success_rate": float(np.mean([t.won for t in ok])) if ok else 0.0,
        "return": float(np.mean([t.episode_reward for t in ok])) if ok else 0.0,
        "episode_length": float(np.mean([len(t.steps) for t in ok])) if ok else 0.0,
        "invalid_rate": float(np.mean([not s.valid for s in steps])) if steps else 0.0,
        "env_errors": float(sum(t.env_error for t in trajs)),
        "trajectories": float(len(trajs)),
    }


def collect(run: Run) -> dict:
    c = run.config
    if not needs_skill_bank(c):
        return {"skipped": f"method {c.method} needs no stage-1 data"}
    model, tok = load_policy(c)
    tasks = run.bench.tasks(run.bench.train_split, limit=c.stage1.num_tasks, seed=c.seed)
    settings = rollout_settings(c, run.bench, temperature=c.stage1.temperature, group_size=c.stage1.group_size)
    with make_pool(c, run.bench) as pool:
        trajs = run_rollouts(pool, model, tok, tasks, settings, seed=c.seed, tag="s1/",
                             encode_prompt=make_prompt_encoder(tok))
    write_trajectories(run.path("stage1", "trajectories.jsonl"), trajs)
    summary = rollout_summary(trajs)
    run.metrics.write(0, summary, prefix="stage1")
    return summary


def annotate_stage(run: Run) -> dict:
    c = run.config
    if not needs_skill_bank(c):
        return {"skipped": f"method {c.method} needs no stage-1 data"}
    trajs = [t for t in read_trajectories(run.path("stage1", "trajectories.jsonl")) if not t.env_error and t.steps]
    thr = run.bench.spec.success_threshold
    kind = c.stage1.analyzer
    if kind == "self":
        model, tok = load_policy(c)
        parses, prompts = analyze_trajectories(
            model, tok, trajs, encode_prompt=make_prompt_encoder(tok), success_threshold=thr,
            max_new_tokens=c.stage1.max_answer_tokens, max_prompt_tokens=c.analysis.max_prompt_tokens,
            batch_size=c.analysis.batch_size)
    elif kind == "openai":
        from seed_jax.pipeline.annotator import OpenAIChat

        chat = OpenAIChat(c.stage1.openai_base_url, c.stage1.openai_model, c.stage1.openai_api_key_env,
                          max_tokens=c.stage1.max_answer_tokens)
        parses, prompts = {}, {}
        bar = StageProgress(len(trajs), "annotate")
        for t in trajs:
            prompts[t.traj_id] = build_analyzer_prompt(t, thr, max_chars=3 * c.analysis.max_prompt_tokens)
            parses[t.traj_id], _ = annotate(prompts[t.traj_id], chat, c.stage1.max_repairs)
            bar.update(1)
        bar.close()
    elif kind == "heuristic":
        from seed_jax.pipeline.heuristic_annotator import heuristic_annotator

        parses, prompts = heuristic_annotator(trajs, thr, 3 * c.analysis.max_prompt_tokens)
    else:
        annotator = getattr(run.bench, "scripted_annotator", None)
        if annotator is None:
            raise ValueError(f"config.stage1.analyzer: 'scripted' is not available for env {run.bench.name!r}")
        parses, prompts = annotator(trajs)
    records = [SkillRecord.from_parse(t, prompts[t.traj_id], parses[t.traj_id], thr)
               for t in trajs if parses.get(t.traj_id) is not None and parses[t.traj_id].ok]
    rng = random.Random(c.seed)
    order = list(range(len(records)))
    rng.shuffle(order)
    n_held = int(round(len(records) * c.stage1.heldout_fraction)) if len(records) > 1 else 0
    held = [records[i] for i in sorted(order[:n_held])]
    train = [records[i] for i in sorted(order[n_held:])]
    write_skill_records(run.path("stage1", "sft.jsonl"), train)
    write_skill_records(run.path("stage1", "sft_heldout.jsonl"), held)
    summary = {"parse_rate": len(records) / max(len(trajs), 1), "records": len(records),
               "train": len(train), "heldout": len(held)}
    run.metrics.write(0, summary, prefix="stage1")
    return summary


def sft_batches(records, encode_prompt, tokenizer, max_prompt_tokens: int, max_answer_tokens: int,
                batch_size: int, seed: int, epoch: int):
    """Yield SFT batches (prompt LEFT-padded to P, answer + EOS RIGHT-padded to R), shuffled per epoch."""
    eos = tokenizer.eos_token_id
    ex = []
    for r in records:
        p = encode_prompt(r.prompt)[-max_prompt_tokens:]
        a = (tokenizer(r.answer, add_special_tokens=False)["input_ids"] + [eos])[:max_answer_tokens]
        ex.append((p, a))
    if not ex:
        return
    P = round_up(max(len(p) for p, _ in ex), (64, 128, 256, 512, 1024, 2048, 4096, 8192))
    R = round_up(max(len(a) for _, a in ex), (32, 64, 128, 256, 512, 1024))
    order = list(range(len(ex)))
    random.Random(f"{seed}:{epoch}").shuffle(order)
    pad = tokenizer.pad_token_id or 0
    for s in range(0, len(order), batch_size):
        idx = order[s:s + batch_size]
        prompts = [ex[i][0] for i in idx] + [[]] * (batch_size - len(idx))
        answers = [ex[i][1] for i in idx] + [[]] * (batch_size - len(idx))
        p_ids, p_mask = left_pad(prompts, P, pad)
        a_ids, a_mask = right_pad(answers, R, pad)
        yield {"input_ids": np.concatenate([p_ids, a_ids], 1), "attention_mask": np.concatenate([p_mask, a_mask], 1),
               "loss_mask": a_mask.astype(np.float32)}


def heldout_nll(params, model_cfg, records, encode_prompt, tokenizer, c) -> float | None:
    from seed_jax.train.logprobs import compute_logprobs

    total, count = 0.0, 0.0
    for b in sft_batches(records, encode_prompt, tokenizer, c.analysis.max_prompt_tokens, c.stage1.max_answer_tokens,
                         c.stage1.sft_batch_size, 0, 0):
        R = b["loss_mask"].shape[1]
        lp = compute_logprobs(params, model_cfg, b["input_ids"], b["attention_mask"], b["input_ids"].shape[1] - R, R,
                              micro_batch=c.stage1.sft_micro_batch_size)
        total += float(-(lp * b["loss_mask"]).sum())
        count += float(b["loss_mask"].sum())
    return total / count if count else None


def sft(run: Run, mesh) -> dict:
    from seed_jax.train.sft import make_sft_step
    from seed_jax.train.state import create_sharded_state

    c = run.config
    if not run.switches.sft:
        return {"skipped": f"method {c.method} has no stage-1 SFT"}
    model, tok = load_policy(c)
    records = read_skill_records(run.path("stage1", "sft.jsonl"))
    held = read_skill_records(run.path("stage1", "sft_heldout.jsonl"))
    encode = make_prompt_encoder(tok)
    summary = {"records": len(records)}
    if not records:
        log.warning("stage-1 SFT: no accepted skill records; the SFT policy is the base policy")
    else:
        tc = sft_train_config(c)
        summary["heldout_nll_before"] = heldout_nll(model.params, model.config, held, encode, tok, c)
        state = create_sharded_state(model.params, tc, mesh, rng=c.seed)
        step = make_sft_step(model.config, tc, mesh)
        n_batches = -(-len(records) // c.stage1.sft_batch_size)
        bar = StageProgress(n_batches * c.stage1.sft_epochs, "stage-1 SFT", unit="batch")
        i = 0
        for epoch in range(c.stage1.sft_epochs):
            for batch in sft_batches(records, encode, tok, c.analysis.max_prompt_tokens, c.stage1.max_answer_tokens,
                                     c.stage1.sft_batch_size, c.seed, epoch):
                # on several hosts every host feeds the same rows: duplicated rows leave every
                # token mean (and so the update) exactly as on one host
                state, m = step(state, to_global(batch, mesh))
                m = {k: float(v) for k, v in jax.device_get(m).items()}
                run.metrics.write(i, m, prefix="sft")
                bar.update(1, nll=f"{m.get('nll', m['loss']):.3f}")
                i += 1
        bar.close()
        model = type(model)(model.config, host_local_params(state.params), "sft")
        summary["final_loss"] = m["loss"]
        summary["heldout_nll_after"] = heldout_nll(model.params, model.config, held, encode, tok, c)
    if jax.process_index() == 0:
        save_policy(model, tok, run.workdir / "sft" / "model")
    return summary
