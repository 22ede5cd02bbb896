"""Teacher probe: does a policy, given a hint H(h, s), favour the expert's actions?

The OPD gate only helps when the teacher twin ``pi(. | H(h, s))`` prefers good actions more
than the student ``pi(. | h)`` does. The probe measures that directly on fresh noisy expert
demonstrations (`experiments.household.demos.noisy_episode`, so the sampled command at every step is
known to be expert-consistent or not) for three choices of the skill ``s`` of a demonstration:

- ``own``: the scripted analyzer's skill of that same demonstration (accurate hindsight);
- ``shuffled``: the scripted skill of another demonstration (a wrong hint);
- ``self``: the skill the policy itself writes for the demonstration (greedy, the stage-2
  analyzer path `seed_jax.rollout.analyzer.analyze_trajectories`); steps of a demonstration
  whose answer does not parse are left out of this condition.

Per step t with demonstrated response a_t (the demonstrator's, possibly a detour) and the
expert's response e_t at the same state (same thinking text, optimal command), token log-probs
under the policy are l_c(x) with the hint of condition c and l_0(x) without. Reported, per
condition:

    gate(S)    = token mean over steps S of sigmoid(beta * (l_c(a_t) - l_0(a_t)))
                 for S = consistent steps and S = inconsistent steps (the audit's quantity)
    lift_e     = step mean of sum_tokens [l_c(e_t) - l_0(e_t)] over inconsistent steps
                 (how much the hint raises the expert's response where the demonstrator erred)
    lift_a     = step mean of sum_tokens [l_c(a_t) - l_0(a_t)] over inconsistent steps
    headroom_e = step mean of -sum_tokens l_0(e_t) over inconsistent steps: the most any hint
                 can raise the expert's response by (its log-prob cannot exceed 0)
    by_subgoal = lift_e and lift_a over the inconsistent steps of each subgoal ('find' = the
                 object is not yet in sight: where a hint naming its place can help most)

A hint the policy can use gives gate(consistent) > gate(inconsistent) and lift_e > lift_a;
a shuffled hint should give neither. With ``search`` (the study's ``stage0.search``) the
demonstrations search for the task object as stage 0's did, so the search steps that miss the
object's place are among the inconsistent steps, as in the policy's own rollouts.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from seed_jax.buckets import round_up
from seed_jax.experiments.household.audit import names_start_place
from seed_jax.experiments.household.bc import PROMPT_BUCKETS, RESPONSE_BUCKETS, encode_examples
from seed_jax.experiments.household.demos import noisy_episode, subgoal_verb
from seed_jax.experiments.household.report import arm_dir
from seed_jax.pipeline.environments import make_benchmark
from seed_jax.pipeline.runtime import load_policy
from seed_jax.rollout.analyzer import analyze_trajectories
from seed_jax.rollout.loop import make_prompt_encoder
from seed_jax.skills import insert_skill
from seed_jax.train.batch import pack_rows
from seed_jax.train.logprobs import compute_logprobs

CONDITIONS = ("own", "shuffled", "self")


def _logprobs(model, tok, prompts: Sequence[str], responses: Sequence[str], micro_batch: int,
              max_prompt_tokens: int) -> list[np.ndarray]:
    """Per pair, the token log-probs of ``response + EOS`` after the chat-templated prompt."""
    encoded = encode_examples([(p, r, "") for p, r in zip(prompts, responses)], tok, max_prompt_tokens,
                              RESPONSE_BUCKETS[-1])
    p_ids, r_ids = [p for p, _ in encoded], [r for _, r in encoded]
    out: list[np.ndarray | None] = [None] * len(prompts)
    groups: dict[tuple[int, int], list[int]] = {}
    for i, (p, r) in enumerate(encoded):
        groups.setdefault((round_up(len(p), PROMPT_BUCKETS), round_up(len(r), RESPONSE_BUCKETS)), []).append(i)
    for (P, R), idx in sorted(groups.items()):
        ids, mask, _ = pack_rows([p_ids[i] for i in idx], [r_ids[i] for i in idx], P, R, tok.pad_token_id)
        logp = compute_logprobs(model.params, model.config, ids, mask, P, R, micro_batch)
        for row, i in enumerate(idx):
            out[i] = logp[row, :len(r_ids[i])]
    return out  # type: ignore[return-value]


def _summary(rows: Sequence[dict], beta: float) -> dict:
    def gate(sel):
        toks = np.concatenate([r["d_a"] for r in sel]) if sel else np.zeros(0)
        return float(np.mean(0.5 * (1.0 + np.tanh(0.5 * beta * toks)))) if toks.size else None  # sigmoid

    cons = [r for r in rows if r["consistent"]]
    inc = [r for r in rows if not r["consistent"]]
    by_subgoal: dict = {}
    for r in inc:
        if r.get("subgoal"):
            by_subgoal.setdefault(r["subgoal"], []).append(r)
    def headroom(sel):
        vals = [-r["l0_e"].sum() for r in sel if "l0_e" in r]
        return float(np.mean(vals)) if vals else None

    return {"steps_consistent": len(cons), "steps_inconsistent": len(inc),
            "gate_consistent": gate(cons), "gate_inconsistent": gate(inc),
            "lift_expert": float(np.mean([r["d_e"].sum() for r in inc])) if inc else None,
            "lift_sampled": float(np.mean([r["d_a"].sum() for r in inc])) if inc else None,
            "headroom_expert": headroom(inc),
            "by_subgoal": {k: {"steps": len(v), "lift_expert": float(np.mean([r["d_e"].sum() for r in v])),
                               "lift_sampled": float(np.mean([r["d_a"].sum() for r in v])),
                               "headroom_expert": headroom(v)}
                           for k, v in sorted(by_subgoal.items())}}


def teacher_probe(model, tok, tasks: Sequence[dict], *, noise: float = 0.3, max_steps: int = 15,
                  history_window: int = 2, beta: float = 5.0, seed: int = 0, micro_batch: int = 32,
                  max_prompt_tokens: int = 1024, analyzer_max_new_tokens: int = 192,
                  success_threshold: float = 5.0, search: bool = False) -> dict:
    """{condition: summary} of the module docstring, plus 'self_parse_rate' and 'self_place_rate'
    (the share of demonstrations whose self-written skill parses and names the object's start
    place, `names_start_place`; every 'own' skill does). ``search``: the
    demonstrations search for the task object (`experiments.household.demos.search_command`), as
    stage 0's do when ``stage0.search`` is set."""
    rng = random.Random(f"probe:{seed}")
    demos = [noisy_episode(t, rng, noise, 0.0, max_steps, history_window, search=search) for t in tasks]
    own = [d.skill() for d in demos]
    shift = rng.randrange(1, len(demos)) if len(demos) > 1 else 0
    shuffled = [own[(i + shift) % len(demos)] for i in range(len(demos))]  # every demo gets another's
    trajs = [d.to_trajectory(f"probe#{i}") for i, d in enumerate(demos)]
    parses, _, _ = analyze_trajectories(model, tok, trajs, encode_prompt=make_prompt_encoder(tok),
                                     success_threshold=success_threshold,
                                     max_new_tokens=analyzer_max_new_tokens,
                                     max_prompt_tokens=max_prompt_tokens, progress=False)
    self_skills = [parses[t.traj_id].skill if parses.get(t.traj_id) and parses[t.traj_id].ok else None
                   for t in trajs]
    skills = {"own": own, "shuffled": shuffled, "self": self_skills}

    steps = [(k, s) for k, d in enumerate(demos) for s in d.steps]
    plain_a = _logprobs(model, tok, [s.prompt for _, s in steps], [s.response for _, s in steps],
                        micro_batch, max_prompt_tokens)
    plain_e = _logprobs(model, tok, [s.prompt for _, s in steps], [s.expert_response for _, s in steps],
                        micro_batch, max_prompt_tokens)
    out: dict = {"demos": len(demos), "steps": len(steps),
                 "self_parse_rate": sum(s is not None for s in self_skills) / max(len(demos), 1),
                 "self_place_rate": sum(names_start_place(s, d.task) for s, d in zip(self_skills, demos))
                 / max(len(demos), 1)}
    for cond in CONDITIONS:
        keep = [i for i, (k, _) in enumerate(steps) if skills[cond][k]]
        hinted = [insert_skill(steps[i][1].prompt, skills[cond][steps[i][0]]) for i in keep]
        hint_a = _logprobs(model, tok, hinted, [steps[i][1].response for i in keep], micro_batch, max_prompt_tokens)
        hint_e = _logprobs(model, tok, hinted, [steps[i][1].expert_response for i in keep], micro_batch,
                           max_prompt_tokens)
        rows = [{"consistent": steps[i][1].consistent, "d_a": ha - plain_a[i], "d_e": he - plain_e[i], "l0_e": plain_e[i],
                 "subgoal": subgoal_verb(steps[i][1].expert_response)}
                for i, ha, he in zip(keep, hint_a, hint_e)]
        out[cond] = _summary(rows, beta)
    return out


def probe_points(out, arms: Sequence[str], seeds: Sequence[int]) -> dict[str, Path]:
    """name -> model directory of the policies the probe reads that exist: the stage-1
    checkpoint and the final policy of the first seed of the GRPO and SEED arms."""
    out = Path(out)
    points = {"stage-1 checkpoint": out / "base" / "sft" / "model"}
    for arm in ("sft_grpo", "seed"):
        if arm in arms and seeds:
            points[arm] = arm_dir(out, arm, seeds[0]) / "rl" / "final_model"
    return {name: path for name, path in points.items() if (path / "config.json").exists()}


def probe_checkpoints(config, out, arms: Sequence[str], seeds: Sequence[int]) -> dict:
    """The probe of every `probe_points` policy on the first ``study.probe_tasks`` training tasks."""
    bench = make_benchmark(config.env)
    tasks = bench.tasks(bench.train_split)[:int(config.study.probe_tasks)]
    res = {}
    for name, path in probe_points(out, arms, seeds).items():
        policy = load_policy(config, path)
        res[name] = teacher_probe(policy.model, policy.tokenizer, tasks, max_steps=int(config.env.max_steps),
                                  history_window=int(config.env.history_window),
                                  beta=float(config.train.beta_opd), seed=int(config.seed),
                                  micro_batch=int(config.train.micro_batch_size),
                                  max_prompt_tokens=int(config.analysis.max_prompt_tokens),
                                  analyzer_max_new_tokens=int(config.analysis.max_new_tokens),
                                  success_threshold=float(bench.spec.success_threshold),
                                  search=bool(config.stage0.search))
    return res
