"""Stage 1 (docs/METHOD.md §2): collect base-policy trajectories, annotate them, SFT the analyzer role
(plus, with ``stage1.format_warmup_tasks``, the env's scripted demonstrations of the acting format)."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import random
from collections.abc import Callable

import jax
import numpy as np

from seed_jax.buckets import round_to_multiple, round_up
from seed_jax.metrics import StageProgress
from seed_jax.pipeline.analyzers import AnalysisContext, get_analyzer
from seed_jax.pipeline.chunked import chunked_rollouts
from seed_jax.pipeline.methods import needs_skill_bank
from seed_jax.pipeline.multihost import gather_lines, host_share, to_global
from seed_jax.pipeline.run import Run
from seed_jax.pipeline.runtime import (
    load_policy,
    load_policy_tokenizer,
    make_pool,
    rollout_settings,
    sampler_spec,
    save_policy,
    sft_rows,
    sft_train_config,
)
from seed_jax.rollout.loop import fit_prompt, make_prompt_encoder
from seed_jax.rollout.trajectory import read_trajectories, write_trajectories
from seed_jax.skills import SkillRecord, read_skill_records, write_skill_records
from seed_jax.train.batch import SftBatch
from seed_jax.train.logprobs import compute_logprobs
from seed_jax.train.mesh import batch_divisor
from seed_jax.train.sft import make_sft_step
from seed_jax.train.state import create_sharded_state
from seed_jax.train.update import metric_means

log = logging.getLogger("seed_jax")


def rollout_summary(trajs) -> dict:
    ok = [t for t in trajs if not t.env_error]
    steps = [s for t in ok for s in t.steps]
    return {
        "success_rate": float(np.mean([t.won for t in ok])) if ok else 0.0,
        "return": float(np.mean([t.episode_reward for t in ok])) if ok else 0.0,
        "episode_length": float(np.mean([len(t.steps) for t in ok])) if ok else 0.0,
        "invalid_rate": float(np.mean([not s.valid for s in steps])) if steps else 0.0,
        "prompt_cut_rate": float(np.mean([s.prompt_cut for s in steps])) if steps else 0.0,
        "env_errors": float(sum(t.env_error for t in trajs)),
        "trajectories": float(len(trajs)),
    }


def collect(run: Run, mesh) -> dict:
    """Base-policy rollouts on ``stage1.num_tasks`` training tasks (the weights loaded sharded over ``mesh``)."""
    c = run.config
    if not needs_skill_bank(c):
        return {"skipped": f"method {c.method} needs no stage-1 data"}
    policy = load_policy(c, mesh=mesh)
    tasks = run.bench.tasks(run.bench.train_split, limit=c.stage1.num_tasks, seed=c.seed)
    settings = rollout_settings(c, run.bench, temperature=c.stage1.temperature, group_size=c.stage1.group_size)
    with make_pool(c, run.bench) as pool, policy.sampling(settings.sampler):
        run.phases("collect", policy.config, mesh)
        trajs = chunked_rollouts(run, pool, policy, tasks, settings, seed=c.seed, tag="s1/", stage="collect",
                                 name="trajectories")  # finished chunks survive a preemption
    if jax.process_index() == 0:
        write_trajectories(run.path("stage1", "trajectories.jsonl"), trajs)
    summary = rollout_summary(trajs)
    run.metrics.write(0, summary, prefix="stage1")
    return summary


def annotate_stage(run: Run, mesh) -> dict:
    """Skill records of the collected trajectories; on several hosts each analyses its contiguous
    share (`host_share`) and host 0 writes every host's records, in trajectory order."""
    c = run.config
    if not needs_skill_bank(c):
        return {"skipped": f"method {c.method} needs no stage-1 data"}
    every = [t for t in read_trajectories(run.path("stage1", "trajectories.jsonl")) if not t.env_error and t.steps]
    trajs = every[host_share(len(every))]
    log_name = "annotations.jsonl" if jax.process_count() == 1 else f"annotations.host{jax.process_index()}.jsonl"
    thr = run.bench.spec.success_threshold
    policy = load_policy(c, mesh=mesh) if c.stage1.analyzer == "self" else None
    # every annotator budgets x_tau in the tokens of the policy the SFT trains (its left cut then spares the header)
    encode = policy.encode_prompt if policy is not None else make_prompt_encoder(load_policy_tokenizer(c))
    ctx = AnalysisContext(success_threshold=thr, max_prompt_tokens=c.analysis.max_prompt_tokens,
                          max_new_tokens=c.stage1.max_answer_tokens, batch_size=c.analysis.batch_size, policy=policy,
                          encode_prompt=encode,
                          bench=run.bench, seed=c.seed, sampler=sampler_spec(c),
                          openai={"base_url": c.stage1.openai_base_url, "model": c.stage1.openai_model,
                                  "api_key_env": c.stage1.openai_api_key_env, "max_repairs": c.stage1.max_repairs,
                                  "max_concurrency": c.stage1.openai_max_concurrency,
                                  "reasoning": c.stage1.openai_reasoning,
                                  "log_path": run.path("stage1", log_name)})
    with policy.sampling(ctx.sampler) if policy is not None else contextlib.nullcontext():
        if policy is not None:
            run.phases("annotate", policy.config, mesh)
        analysis = get_analyzer(c.stage1.analyzer)(trajs, ctx)
    parses, prompts = analysis.parses, analysis.prompts
    records = [SkillRecord.from_parse(t, prompts[t.traj_id], parses[t.traj_id], thr)
               for t in trajs if parses.get(t.traj_id) is not None and parses[t.traj_id].ok]
    records = [SkillRecord.from_json(line) for line in gather_lines([r.to_json() for r in records])]
    rng = random.Random(c.seed)
    order = list(range(len(records)))
    rng.shuffle(order)
    n_held = int(round(len(records) * c.stage1.heldout_fraction)) if len(records) > 1 else 0
    held = [records[i] for i in sorted(order[:n_held])]
    train = [records[i] for i in sorted(order[n_held:])]
    if jax.process_index() == 0:
        write_skill_records(run.path("stage1", "sft.jsonl"), train)
        write_skill_records(run.path("stage1", "sft_heldout.jsonl"), held)
    summary = {"parse_rate": len(records) / max(len(every), 1), "records": len(records),
               "train": len(train), "heldout": len(held)}
    run.metrics.write(0, summary, prefix="stage1")
    return summary


def sft_batches(records, encode_prompt, tokenizer, max_prompt_tokens: int, max_answer_tokens: int,
                batch_size: int, seed: int, epoch: int, rows: int | None = None):
    """Yield `SftBatch`es of ``batch_size`` examples (x_tau LEFT-padded to P, answer + EOS
    RIGHT-padded to R), in a seeded order per epoch, each filled with masked rows to ``rows``
    (default ``batch_size``; the last batch too)."""
    eos = tokenizer.eos_token_id
    ex = []
    for r in records:
        p = encode_prompt(r.prompt)[-max_prompt_tokens:]
        a = (tokenizer(r.answer, add_special_tokens=False)["input_ids"] + [eos])[:max_answer_tokens]
        ex.append((p, a))
    if not ex:
        return
    P = round_up(max(len(p) for p, _ in ex))
    R = round_up(max(len(a) for _, a in ex))
    order = list(range(len(ex)))
    random.Random(f"{seed}:{epoch}").shuffle(order)
    pad = tokenizer.pad_token_id or 0
    for s in range(0, len(order), batch_size):
        idx = order[s:s + batch_size]
        fill = [[]] * ((rows or batch_size) - len(idx))
        yield SftBatch.pack([ex[i][0] for i in idx] + fill, [ex[i][1] for i in idx] + fill, P, R, pad)


def heldout_nll(params, model_cfg, records, encode_prompt, tokenizer, c, mesh=None) -> float | None:
    """Token-mean NLL of the held-out answers: ``-sum(m * logp) / sum(m)``; with a ``mesh`` the
    passes run over it, the parameters sharded (`compute_logprobs`; every host calls it together
    with the same records)."""
    total, count = 0.0, 0.0
    micro = c.stage1.sft_micro_batch_size
    if mesh is not None:
        micro = round_to_multiple(micro, math.lcm(batch_divisor(mesh), jax.process_count()))
    for b in sft_batches(records, encode_prompt, tokenizer, c.analysis.max_prompt_tokens, c.stage1.max_answer_tokens,
                         c.stage1.sft_batch_size, 0, 0):
        R = b.loss_mask.shape[1]
        lp = compute_logprobs(params, model_cfg, b.input_ids, b.attention_mask, b.input_ids.shape[1] - R, R,
                              micro_batch=micro, mesh=mesh)
        total += float(-(lp * b.loss_mask).sum())
        count += float(b.loss_mask.sum())
    return total / count if count else None


@dataclasses.dataclass(frozen=True)
class Demonstration:
    """One scripted acting turn: the env's prompt and a well-formed response (`Benchmark.demonstrations`)."""

    prompt: str
    answer: str
    turn: int  # 0-based turn of the scripted episode


def format_demonstrations(run: Run, encode_prompt: Callable[[str], list[int]] | None = None) -> list[Demonstration]:
    """The format warm-up's SFT examples: the env's scripted turns on the first
    ``stage1.format_warmup_tasks`` training tasks, in a seeded order, that the env has a
    demonstration for (the search env shows only tasks its retriever answers, ALFWorld games whose
    walkthrough wins within the step limit, WebShop goals the script buys); fewer when the split
    runs out; [] when 0 or the env has no demonstrations. With ``encode_prompt`` each turn's
    prompt is fitted to ``rollout.max_prompt_tokens`` as the rollout fits it (`fit_prompt`: fewer
    past steps first), else the env's full prompt."""
    c = run.config
    n = c.stage1.format_warmup_tasks
    if n <= 0 or run.bench.demonstrations is None:
        return []
    cap = c.rollout.max_prompt_tokens

    def prompt_of(env) -> str:
        candidates = [env.build_prompt(), *env.prompt_variants()]
        return fit_prompt(candidates, encode_prompt, cap)[0] if encode_prompt else candidates[0]

    tasks = list(run.bench.tasks(run.bench.train_split))
    random.Random(f"{c.seed + 1}:demonstrations").shuffle(tasks)
    out, shown = [], 0
    for task in tasks:
        turns = run.bench.demonstrations([task], prompt_of)
        if turns:
            out += [Demonstration(p, a, t) for t, (p, a) in enumerate(turns)]
            shown += 1
            if shown == n:
                break
    if shown < n:
        log.warning("format warm-up: %d of stage1.format_warmup_tasks = %d training tasks have a demonstration",
                    shown, n)
    return out


def sft_epoch_batches(groups, encode_prompt, tokenizer, batch_size: int, seed: int, epoch: int,
                      rows: int | None = None) -> list:
    """One epoch's batches over several record groups, each group padded to its own shapes
    (`sft_batches`; ``groups``: ``(records, max_prompt_tokens, max_answer_tokens)``), the batches
    of all groups in a seeded order."""
    batches = [b for records, p_max, a_max in groups
               for b in sft_batches(records, encode_prompt, tokenizer, p_max, a_max, batch_size, seed, epoch, rows)]
    random.Random(f"{seed}:{epoch}:groups").shuffle(batches)
    return batches


def sft(run: Run, mesh) -> dict:
    """SFT on the accepted skill records (the analyzer role) and the format demonstrations."""
    c = run.config
    if not run.switches.sft:
        return {"skipped": f"method {c.method} has no stage-1 SFT"}
    policy = load_policy(c, mesh=mesh)
    records = read_skill_records(run.path("stage1", "sft.jsonl"))
    held = read_skill_records(run.path("stage1", "sft_heldout.jsonl"))
    demos = format_demonstrations(run, policy.encode_prompt)
    encode, tok = policy.encode_prompt, policy.tokenizer
    summary = {"records": len(records), "format_demonstrations": len(demos)}
    # skill records, then the demonstrations turn by turn (each turn's prompts have similar lengths)
    turns = sorted({d.turn for d in demos})
    groups = [(g, p_max, a_max) for g, p_max, a_max in (
        (records, c.analysis.max_prompt_tokens, c.stage1.max_answer_tokens),
        *(([d for d in demos if d.turn == t], c.rollout.max_prompt_tokens, c.rollout.max_response_tokens)
          for t in turns)) if g]
    if not records:
        log.warning("stage-1 SFT: no accepted skill records%s", "" if demos else "; the SFT policy is the base policy")
    if groups:
        tc = sft_train_config(c, batch_divisor(mesh))
        summary["heldout_nll_before"] = heldout_nll(policy.params, policy.config, held, encode, tok, c, mesh)
        state = create_sharded_state(policy.params, tc, mesh, rng=c.seed)
        policy = policy.with_params(None)  # the state holds its own copy: free the loaded one
        run.phases("sft", policy.config, mesh)
        step = make_sft_step(policy.config, tc, mesh)
        bs = c.stage1.sft_batch_size
        n_batches = sum(-(-len(g) // bs) for g, _, _ in groups)
        bar = StageProgress(n_batches * c.stage1.sft_epochs, "stage-1 SFT", unit="batch")
        i = 0
        for epoch in range(c.stage1.sft_epochs):
            for batch in sft_epoch_batches(groups, encode, tok, bs, c.seed, epoch, sft_rows(c, tc)):
                # on several hosts every host feeds the same rows: duplicated rows leave every
                # token mean (and so the update) exactly as on one host
                state, m = step(state, to_global(batch, mesh))
                m = metric_means(m)
                run.metrics.write(i, m, prefix="sft")
                bar.update(1, nll=f"{m.get('nll', m['loss']):.3f}")
                i += 1
        bar.close()
        policy = policy.with_params(state.params, version=i, source="sft")
        del state  # the optimizer state is not needed past here; the parameters stay sharded
        summary["final_loss"] = m["loss"]
        summary["steps"] = i
        summary["heldout_nll_after"] = heldout_nll(policy.params, policy.config, held, encode, tok, c, mesh)
    save_policy(policy, run.workdir / "sft" / "model")
    return summary
