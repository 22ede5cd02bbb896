"""Stage 0 of the household study: a tiny decoder trained from scratch by behaviour cloning.

The study needs a starting policy that behaves like a small instruct model in the household:
it answers in the ``<think>..</think><action>..</action>`` format, acts sensibly but not
perfectly (success roughly 20-50 %), and can *read a hint*: when a skill block
``H(h, s)`` (`seed_jax.skills.insert_skill`) sits in its prompt, it uses it. An instruct LLM
brings that last ability from pre-training; a from-scratch model must be shown it, otherwise
the teacher pass of OPD would see an out-of-distribution prompt and the study could not
test the method at all. So stage 0 clones two kinds of pairs (prompt -> response + EOS):

- *acting*: every step of noisy expert demonstrations (`experiments.household.demos`), the
  ordinary prompt h_t -> the demonstrator's response (detours and invalid responses
  included, so the clone inherits them);
- *hint reading*: for a share ``skill_share`` of the steps (``find_skill_share`` of the
  'find' steps, where the object is not in sight), ``H(h_t, s)`` -> the expert's response at
  that state, where ``s`` is the scripted analyzer's hindsight skill of that same
  demonstration (`envs.household.annotate_episode`), as in SEED's teacher twin.

With ``search`` the demonstrators look for the task object instead of going straight to it
(`experiments.household.demos.search_command`), so the clone searches too and is unsure where
the object is, the one thing a hindsight skill knows and the clone cannot (measured with the
teacher probe on the stage-1 checkpoint: an accurate skill lifts the expert's response at detour
steps by +1.10 nats with search and every 'find' step a hint pair, +0.02 with the omniscient
demonstrator and 30 % hint pairs, whose clone was already nearly sure of the expert's action at
most detour steps).

A third kind teaches the *analyzer role* in the stage-1 record format (x_tau -> scripted JSON
answer, `analyzer_examples`, on demonstrations with several detour shares so that both
workflows and avoidance rules occur). Measured reason: a policy cloned on acting only and
then given the pipeline's stage-1 SFT (analyzer records only) forgot how to act (seen success
0.58 -> 0.00 at lr 5e-4 x 3 epochs; 0.58 -> 0.29 with 23 % invalid responses and still no
parseable JSON at lr 1e-4 x 2 epochs). A small model needs both roles trained together, as
an instruct model has them; stage 1 then specialises the analyzer on the policy's own
trajectories at a small learning rate.

Training (all with `seed_jax.train.sft.make_sft_step`, AdamW):

1. *induction warm-up* (``copy_steps``): synthetic rows ``BOS x SEP x`` of random word ids,
   loss on the repeat (`copy_batch`). The household's BC signal alone did not grow copying
   attention within a CPU budget (measured with hidden 64: after 500 BC steps of 16 pairs the
   clone still wrote random object names, NLL ~4 nats on them; after 300 warm-up steps the task
   object was copied within 600 BC steps; hidden 128 learns about twice as fast per step).
   An instruct model brings this ability from pre-training.
2. *behaviour cloning* (``steps``, cosine schedule): acting and hint pairs; with
   ``lm_weight > 0`` the prompt tokens are targets too, each kept with probability
   ``lm_weight`` (a language-modelling term on the environment's text, `bc_batches`). The
   result is saved to ``<out>_bc/`` (``phase_b.json``); a re-run resumes after it.
3. *acting + analyzer* (``analyzer_steps``, `train_multitask`): acting batches and analyzer
   batches (answer-only loss) alternate, at ``analyzer_lr``, over ``analyzer_episodes``
   analyzer demonstrations per task.

``init`` = a finished stage-0 policy directory with ``steps = 0`` *continues* that policy:
phases 1 and 2 are skipped (a loaded model copies already) and phase 3 runs from its weights,
so more analyzer training is a few minutes instead of a new stage 0 (round five, docs/EVIDENCE.md).

The thinking text starts with the task sentence (``restate_task``, `experiments.household.demos`), so
the long-range copy is one contiguous span and later mentions are short-range copies.

The model is a Llama-type decoder (`seed_jax.models.ModelConfig`, tied embeddings) over the
word tokenizer (`experiments.household.tokenizer.build_household_tokenizer`); it is saved as a
Hugging Face directory with `seed_jax.pipeline.runtime.save_policy`, so ``config.model.path``
can point at it and the pipeline loads it with `load_policy`.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import json
import logging
import random
import time
from collections.abc import Sequence
from pathlib import Path

import jax
import numpy as np

from seed_jax.buckets import round_up
from seed_jax.envs.household import HouseholdEnv, annotate_json, household_task_config, make_tasks
from seed_jax.experiments.household.demos import Demo, noisy_episode, subgoal_texts, subgoal_verb
from seed_jax.experiments.household.tokenizer import build_household_tokenizer
from seed_jax.metrics import StageProgress
from seed_jax.models import Model, ModelConfig, load_model
from seed_jax.models.decoder import init_params
from seed_jax.pipeline.environments import make_benchmark
from seed_jax.pipeline.runtime import load_policy, rollout_settings, save_policy
from seed_jax.pipeline.stage1 import rollout_summary
from seed_jax.rollout.loop import make_prompt_encoder, run_rollouts
from seed_jax.rollout.policy import Policy
from seed_jax.rollout.pool import open_env_pool
from seed_jax.skills import build_analyzer_prompt, insert_skill
from seed_jax.train.batch import SftBatch, pack_rows
from seed_jax.train.config import TrainConfig
from seed_jax.train.mesh import make_mesh
from seed_jax.train.sft import make_sft_step
from seed_jax.train.state import create_sharded_state

log = logging.getLogger("seed_jax")

PROMPT_BUCKETS = (64, 128, 256, 512, 1024, 2048)
RESPONSE_BUCKETS = (16, 32, 64, 128)


@dataclasses.dataclass(frozen=True)
class BCConfig:
    """Stage-0 settings: a typed view of ``config.stage0``; the values (one place, every preset)
    are in `configs.household`."""

    init: str  # 'scratch' (a fresh decoder over the word tokenizer), 'embedded' (SmolLM2-135M-Instruct) or a HF dir
    hidden: int  # model width (head_dim = hidden / heads, MLP width 2 x hidden)
    layers: int  # decoder layers
    heads: int  # attention heads
    kv_heads: int  # key / value heads (grouped-query attention)
    num_tasks: int  # demonstration tasks (seen combinations, their own task seed)
    task_seed: int  # seed of the demonstration tasks (apart from the env's train / eval seeds)
    episodes_per_task: int  # demonstrations per task
    noise: float  # share of detours (random admissible non-optimal commands)
    invalid: float  # share of invalid responses
    nothing: float  # share of well-formed non-admissible commands
    skill_share: float  # share of steps also shown as hint-reading examples
    find_skill_share: float  # the same share at 'find' steps (the expert's subgoal), where a hint names the place
    search: bool  # demonstrators search for the task object instead of going straight to it (demos.search_command)
    include_plan: bool  # the hint's skill holds the shortest plan
    restate_task: bool  # thinking text starts with the task sentence
    copy_steps: int  # synthetic induction warm-up steps (0 = none)
    lm_weight: float  # expected weight of the language-modelling term on prompt tokens
    steps: int  # behaviour-cloning optimizer steps (epochs cycle as needed)
    batch_size: int  # BC (and acting) rows per optimizer step
    lr: float  # peak learning rate of the warm-up and BC phases
    warmup_steps: int  # linear warm-up steps of every phase (capped by its length)
    analyzer_steps: int  # multi-task phase: acting and analyzer batches alternate
    analyzer_batch: int  # analyzer rows per multi-task analyzer step
    analyzer_noises: tuple  # detour shares of the analyzer demos (successes and failures)
    analyzer_episodes: int  # analyzer demos per demonstration task
    analyzer_lr: float  # constant learning rate of the multi-task phase
    eval_tasks: int  # seen tasks of the stage-0 evaluation
    seed: int  # initialisation, demonstration noise, hint choice and batch order

    @classmethod
    def from_config(cls, cd) -> BCConfig:
        fields = {f.name for f in dataclasses.fields(cls)}
        kw = {k: (tuple(v) if isinstance(v, list) else v) for k, v in dict(cd).items() if k in fields}
        return cls(**kw)

    @property
    def pretrained(self) -> bool:
        return self.init != "scratch"


def initial_policy(config, bc: BCConfig):
    """``(tokenizer, model config, params)`` stage 0 starts from: a fresh decoder over the word
    tokenizer (``init = 'scratch'``), or a pretrained instruct model and its own tokenizer
    (``'embedded'``: SmolLM2-135M-Instruct; else a HF directory) with the run's ``model.*``
    compute settings (`seed_jax.pipeline.runtime.load_policy`)."""
    if not bc.pretrained:
        tok = build_tokenizer()
        cfg = model_config(tok, bc)
        return tok, cfg, init_params(cfg, jax.random.PRNGKey(bc.seed))
    c = copy.deepcopy(config)
    c.model.path = None if bc.init == "embedded" else bc.init
    policy = load_policy(c)
    return policy.tokenizer, policy.config, policy.params


def build_tokenizer():
    """The study's word tokenizer: household env + annotator + analyzer prompt + subgoal words."""
    return build_household_tokenizer(extra_texts=subgoal_texts())


def model_config(tok, bc: BCConfig, max_positions: int = 4096):
    """A Llama-type decoder over the tokenizer's vocabulary, tied embeddings."""
    h = bc.hidden
    if h % bc.heads:
        raise ValueError(f"stage0.hidden ({h}) must be a multiple of stage0.heads ({bc.heads})")
    return ModelConfig(model_type="llama", vocab_size=len(tok), hidden_size=h, intermediate_size=2 * h,
                       num_layers=bc.layers, num_heads=bc.heads, num_kv_heads=bc.kv_heads, head_dim=h // bc.heads,
                       tie_word_embeddings=True, eos_token_ids=(tok.eos_token_id,), bos_token_id=tok.bos_token_id,
                       max_position_embeddings=max_positions)


def make_demos(tasks: Sequence[dict], bc: BCConfig, max_steps: int, history_window: int) -> list[Demo]:
    rng = random.Random(f"demos:{bc.seed}")
    return [noisy_episode(t, rng, bc.noise, bc.invalid, max_steps, history_window, bc.restate_task,
                          bc.nothing, bc.search)
            for t in tasks for _ in range(bc.episodes_per_task)]


def bc_examples(demos: Sequence[Demo], skill_share: float, seed: int = 0,
                include_plan: bool = False, find_skill_share: float | None = None) -> list[tuple[str, str, str]]:
    """(prompt text, response text, kind) pairs: every step as 'act', plus 'hint' pairs
    (H(h_t, skill of the demo) -> expert response) for a seeded share of the steps:
    ``find_skill_share`` (default ``skill_share``) of the steps whose expert subgoal is 'find'
    (`demos.subgoal_verb`), ``skill_share`` of the others."""
    rng = random.Random(f"hints:{seed}")
    find_share = skill_share if find_skill_share is None else find_skill_share
    out = []
    for d in demos:
        skill = None
        for s in d.steps:
            out.append((s.prompt, s.response, "act"))
            share = find_share if subgoal_verb(s.expert_response) == "find" else skill_share
            if rng.random() < share:
                skill = skill or d.skill(include_plan)
                out.append((insert_skill(s.prompt, skill), s.expert_response, "hint"))
    return out


def encode_examples(examples, tok, max_prompt_tokens: int, max_response_tokens: int):
    """[(prompt ids (chat-templated, left-truncated), response ids + EOS)]."""
    encode = make_prompt_encoder(tok)
    out = []
    for prompt, response, _ in examples:
        p = encode(prompt)[-max_prompt_tokens:]
        r = (tok(response, add_special_tokens=False)["input_ids"] + [tok.eos_token_id])[:max_response_tokens]
        out.append((p, r))
    return out


def bc_batches(encoded, batch_size: int, rng: random.Random, pad_id: int, lm_weight: float = 0.0):
    """Full batches of one length bucket each, in a shuffled order (a partial batch per bucket
    is dropped; the epoch's shuffle changes which).

    ``lm_weight == 0``: prompt LEFT-padded to its bucket P, response + EOS RIGHT-padded to R,
    loss on the response only (the stage-1 SFT layout). ``lm_weight > 0``: the whole sequence
    is the target (P = 1: the first prompt token); ``loss_mask`` is 1 on response tokens and,
    on prompt tokens, 1 with probability ``lm_weight`` (drawn from ``rng``), else 0: in
    expectation a language-modelling term of weight ``lm_weight`` on the environment's text
    (the SFT step counts mask entries as 0/1, so the weight is applied by sampling).
    """
    lm = lm_weight > 0
    by_bucket: dict[tuple[int, int], list[int]] = {}
    R0 = round_up(max(len(r) for _, r in encoded), RESPONSE_BUCKETS)
    for i, (p, r) in enumerate(encoded):
        key = (1, round_up(len(p) + len(r) - 1, PROMPT_BUCKETS)) if lm else (round_up(len(p), PROMPT_BUCKETS), R0)
        by_bucket.setdefault(key, []).append(i)
    batches = []
    for (P, R), idx in sorted(by_bucket.items()):
        rng.shuffle(idx)
        for s in range(0, len(idx) - batch_size + 1, batch_size):
            batches.append((P, R, idx[s:s + batch_size]))
    rng.shuffle(batches)
    for P, R, idx in batches:
        if lm:
            firsts = [encoded[i][0][:1] for i in idx]
            rests = [encoded[i][0][1:] + encoded[i][1] for i in idx]
            ids, mask, r_mask = pack_rows(firsts, rests, P, R, pad_id)
            loss = r_mask.astype(np.float32)
            keep = np.random.default_rng(rng.getrandbits(64)).random(loss.shape) < lm_weight
            for row, i in enumerate(idx):
                n_prompt = len(encoded[i][0]) - 1
                loss[row, :n_prompt] *= keep[row, :n_prompt]
        else:
            ids, mask, r_mask = pack_rows([encoded[i][0] for i in idx], [encoded[i][1] for i in idx], P, R, pad_id)
            loss = r_mask.astype(np.float32)
        yield SftBatch(input_ids=ids, attention_mask=mask, loss_mask=loss)


def num_batches(encoded, batch_size: int, lm: bool = False) -> int:
    counts: dict[int, int] = {}
    for p, r in encoded:
        b = round_up(len(p) + len(r) - 1 if lm else len(p), PROMPT_BUCKETS)
        counts[b] = counts.get(b, 0) + 1
    return sum(n // batch_size for n in counts.values())


def cycled_batches(encoded, batch_size: int, pad_id: int, lm_weight: float, tag: str, name: str):
    """`bc_batches` epoch after epoch without end, epoch ``e`` shuffled by ``Random(f"{tag}:{e}")``.
    Raises ValueError (naming the setting ``name``) when no length bucket holds ``batch_size``
    examples, since no epoch would then yield a batch."""
    if num_batches(encoded, batch_size, lm_weight > 0) == 0:  # checked now, not at the first next()
        raise ValueError(f"stage 0: fewer than {name}={batch_size} examples in every length bucket")

    def epochs():
        for epoch in itertools.count():
            yield from bc_batches(encoded, batch_size, random.Random(f"{tag}:{epoch}"), pad_id, lm_weight)

    return epochs()


def copy_batch(rng: np.random.Generator, vocab_size: int, batch: int = 32, length: int = 40,
               alphabets: Sequence[int] = (8, 16, 32, 0)) -> dict:
    """One batch of the induction warm-up: rows ``BOS x SEP x`` with ``x`` ``length`` ids drawn
    from a random alphabet of size k (k = 0: every non-special id); loss on the second ``x``.
    Small alphabets make one-token prefixes ambiguous, so longer-prefix matching is learnt too."""
    rows = []
    for _ in range(batch):
        k = int(rng.choice(alphabets)) or vocab_size - 4
        alphabet = rng.choice(np.arange(4, vocab_size), size=min(k, vocab_size - 4), replace=False)
        rows.append(rng.choice(alphabet, length))
    x = np.asarray(rows, np.int32)
    ids = np.concatenate([np.full((batch, 1), 2, np.int32), x, np.full((batch, 1), 5, np.int32), x], 1)
    return SftBatch(input_ids=ids, attention_mask=np.ones_like(ids), loss_mask=np.ones((batch, length), np.float32))


def sft_trainer(params, model_cfg, mesh, seed: int, **train):
    """``(state, step)``: AdamW state and the project's SFT step (`seed_jax.train.sft`) for one
    stage-0 phase; ``train`` holds the phase's `TrainConfig` fields (lr, schedule, ...)."""
    tc = TrainConfig(weight_decay=0.01, grad_clip=1.0, c_ent=0.0, c_kl=0.0, lambda_opd=0.0, **train)
    return create_sharded_state(params, tc, mesh, rng=seed), make_sft_step(model_cfg, tc, mesh)


def train_copy(params, model_cfg, bc: BCConfig, mesh, progress=None):
    """Synthetic induction warm-up (`copy_batch`) with the SFT step; returns (params, losses)."""
    if bc.copy_steps <= 0:
        return params, []
    state, step = sft_trainer(params, model_cfg, mesh, bc.seed, lr=bc.lr, schedule="warmup_constant",
                              warmup_steps=max(1, min(bc.warmup_steps, bc.copy_steps)), micro_batch_size=32)
    rng = np.random.default_rng([bc.seed, 17])
    losses = []
    for _ in range(bc.copy_steps):
        state, m = step(state, copy_batch(rng, model_cfg.vocab_size))
        losses.append(float(jax.device_get(m["loss"])))
        if progress is not None:
            progress.update(1, copy_nll=f"{losses[-1]:.3f}")
    return jax.device_get(state.params), losses


def train_bc(params, model_cfg, encoded, bc: BCConfig, mesh, pad_id: int, progress=None):
    """``bc.steps`` behaviour-cloning steps with the project's SFT step (cosine schedule to 10 %
    of ``bc.lr``; epochs reshuffled and cycled as needed); returns (params, per-step losses)."""
    total = bc.steps
    if total <= 0:  # a stage-0 policy continued (init = its directory): the multi-task phase only
        return params, []
    batches = cycled_batches(encoded, bc.batch_size, pad_id, bc.lm_weight, f"bc:{bc.seed}", "stage0.batch_size")
    state, step = sft_trainer(params, model_cfg, mesh, bc.seed, lr=bc.lr, schedule="cosine",
                              warmup_steps=min(bc.warmup_steps, total - 1), total_steps=total, min_lr_ratio=0.1,
                              micro_batch_size=bc.batch_size)
    losses: list[float] = []
    for batch in itertools.islice(batches, total):
        state, m = step(state, batch)
        losses.append(float(jax.device_get(m["loss"])))
        if progress is not None:
            progress.update(1, nll=f"{losses[-1]:.3f}")
    return jax.device_get(state.params), losses


def analyzer_demos(tasks: Sequence[dict], bc: BCConfig, max_steps: int, history_window: int) -> list[Demo]:
    """Demonstrations for the analyzer examples, ``analyzer_episodes`` per task: the k-th
    demonstration overall uses detour share ``analyzer_noises[k % len]`` (so both successes and
    failures occur)."""
    rng = random.Random(f"analyzer-demos:{bc.seed}")
    jobs = [t for t in tasks for _ in range(bc.analyzer_episodes)]
    return [noisy_episode(t, rng, bc.analyzer_noises[k % len(bc.analyzer_noises)], bc.invalid, max_steps,
                          history_window, bc.restate_task, bc.nothing, bc.search)
            for k, t in enumerate(jobs)]


def analyzer_examples(demos: Sequence[Demo], max_chars: int, success_threshold: float = 10.0,
                      include_plan: bool = False) -> list[tuple[str, str, str]]:
    """(x_tau, scripted JSON answer, 'analyze') per demonstration: the stage-1 record format
    (`seed_jax.skills.build_analyzer_prompt`, `envs.household.annotate_json`)."""
    return [(build_analyzer_prompt(d.to_trajectory(f"demo#{i}"), success_threshold, max_chars=max_chars),
             annotate_json(d.record(), include_plan), "analyze") for i, d in enumerate(demos)]


def train_multitask(params, model_cfg, act_encoded, ana_encoded, bc: BCConfig, mesh, pad_id: int, progress=None):
    """``bc.analyzer_steps`` steps alternating an acting batch (``bc_batches`` with ``lm_weight``)
    and an analyzer batch (answer-only loss, ``analyzer_batch`` rows), constant ``analyzer_lr``
    after a short warm-up; returns (params, acting losses, analyzer losses)."""
    if bc.analyzer_steps <= 0 or not ana_encoded:
        return params, [], []
    acts = cycled_batches(act_encoded, bc.batch_size, pad_id, bc.lm_weight, f"mt-act:{bc.seed}",
                          "stage0.batch_size")
    anas = cycled_batches(ana_encoded, bc.analyzer_batch, pad_id, 0.0, f"mt-ana:{bc.seed}",
                          "stage0.analyzer_batch")
    state, step = sft_trainer(params, model_cfg, mesh, bc.seed, lr=bc.analyzer_lr, schedule="warmup_constant",
                              warmup_steps=max(1, min(bc.warmup_steps, bc.analyzer_steps)), micro_batch_size=None)
    act_losses: list[float] = []
    ana_losses: list[float] = []
    for i in range(bc.analyzer_steps):
        analyzer = i % 2 == 1
        state, m = step(state, next(anas if analyzer else acts))
        (ana_losses if analyzer else act_losses).append(float(jax.device_get(m["loss"])))
        if progress is not None:
            progress.update(1, **({"analyzer_nll": f"{ana_losses[-1]:.3f}"} if analyzer else
                                  {"act_nll": f"{act_losses[-1]:.3f}"}))
    return jax.device_get(state.params), act_losses, ana_losses


def evaluate_policy(model, tok, tasks: Sequence[dict], bench, settings, seed: int = 0, params=None) -> dict:
    """Success / return / invalid rate of the policy on `tasks` (group size from `settings`)."""
    with open_env_pool(bench.factory, num_workers=0, seed=seed) as pool:
        trajs = run_rollouts(pool, model, tok, tasks, settings, params=params, seed=seed,
                             encode_prompt=make_prompt_encoder(tok), tag="s0/", progress=False)
    return rollout_summary(trajs)


def random_policy_success(tasks: Sequence[dict], max_steps: int, history_window: int, seed: int = 0,
                          episodes: int = 4) -> float:
    """Success rate of a policy that sends a uniformly random admissible command every step."""
    rng = random.Random(f"random-policy:{seed}")
    wins, n = 0, 0
    for task in tasks:
        for _ in range(episodes):
            env = HouseholdEnv(max_steps=max_steps, history_window=history_window)
            env.reset(task)
            done, info = False, {}
            while not done:
                _, _, done, info = env.step(f"<action>{rng.choice(env.admissible_commands)}</action>")
            wins += int(info["won"])
            n += 1
    return wins / max(n, 1)


def demo_tasks(bc: BCConfig, env_cfg) -> list[dict]:
    return make_tasks("seen", bc.num_tasks, seed=bc.task_seed, config=household_task_config(env_cfg))


def run_stage0(config, out_dir: str | Path, mesh=None, force: bool = False) -> dict:
    """Build tokenizer + model, clone the demonstrations, evaluate, save the HF directory.

    Writes ``out_dir/`` (config.json, safetensors, tokenizer files) and
    ``out_dir/stage0.json`` (summary: example counts, losses, success of the clone at the
    evaluation temperature on held-out seen tasks, random-policy success, wall time).
    Skipped when ``out_dir/stage0.json`` exists (unless ``force``).
    """
    out_dir = Path(out_dir)
    marker = out_dir / "stage0.json"
    if marker.exists() and not force:
        return json.loads(marker.read_text())
    t0 = time.time()
    bc = BCConfig.from_config(config.stage0)
    env_cfg = config.env
    bench = make_benchmark(env_cfg)
    tok, cfg, params = initial_policy(config, bc)
    tasks = demo_tasks(bc, env_cfg)
    demos = make_demos(tasks, bc, bench.spec.max_steps, bench.spec.history_window)
    examples = bc_examples(demos, bc.skill_share, bc.seed, bc.include_plan, bc.find_skill_share)
    encoded = encode_examples(examples, tok, config.rollout.max_prompt_tokens, config.rollout.max_response_tokens)
    mesh = mesh or make_mesh()
    t_train = time.time()
    phase_b = out_dir.parent / (out_dir.name + "_bc")
    info_b = phase_b / "phase_b.json"
    if info_b.exists() and not force:  # resume: copy warm-up + BC already done
        params = load_model(phase_b).params
        copy_losses, losses = [], []
        done_b = json.loads(info_b.read_text())
    else:
        copy_steps = 0 if bc.pretrained else bc.copy_steps  # a pretrained model copies already
        bar = StageProgress(copy_steps + bc.steps, "stage-0 copy warm-up + BC", unit="step")
        params, copy_losses = train_copy(params, cfg, dataclasses.replace(bc, copy_steps=copy_steps), mesh, bar)
        params, losses = train_bc(params, cfg, encoded, bc, mesh, tok.pad_token_id or 0, bar)
        bar.close()
        done_b = {"copy_steps": len(copy_losses),
                  "copy_loss_last": float(np.mean(copy_losses[-10:])) if copy_losses else None,
                  "train_steps": len(losses), "loss_first": losses[0] if losses else None,
                  "loss_last": float(np.mean(losses[-10:])) if losses else None,
                  "train_s": round(time.time() - t_train, 1)}
        save_policy(Policy.of(Model(cfg, params, "stage0-bc"), tok), phase_b)
        info_b.write_text(json.dumps(done_b, indent=1))
    t_mt = time.time()
    ana_demos = analyzer_demos(tasks, bc, bench.spec.max_steps, bench.spec.history_window)
    # x_tau at the budget of every analyzer (`AnalysisContext.max_prompt_chars`)
    ana = analyzer_examples(ana_demos, 3 * config.analysis.max_prompt_tokens,
                            bench.spec.success_threshold, bool(env_cfg.get("skill_plan", False)))
    ana_encoded = encode_examples(ana, tok, config.analysis.max_prompt_tokens, config.stage1.max_answer_tokens)
    bar = StageProgress(bc.analyzer_steps, "stage-0 acting + analyzer", unit="step")
    params, mt_act, mt_ana = train_multitask(params, cfg, encoded, ana_encoded, bc, mesh, tok.pad_token_id or 0, bar)
    bar.close()
    train_s = done_b.get("train_s", 0.0) + time.time() - t_mt
    model = Model(cfg, params, "stage0")
    eval_tasks = bench.tasks("seen")[: bc.eval_tasks]
    settings = rollout_settings(config, bench, temperature=config.eval.temperature, group_size=1)
    t_eval = time.time()
    ev = evaluate_policy(model, tok, eval_tasks, bench, settings, seed=bc.seed)
    summary = {
        "demos": len(demos), "demo_success": float(np.mean([d.won for d in demos])),
        "demo_consistent_share": float(np.mean([s.consistent for d in demos for s in d.steps])),
        "examples": len(examples), "hint_examples": sum(k == "hint" for *_, k in examples),
        "vocab": len(tok), "params": int(sum(np.size(x) for x in jax.tree_util.tree_leaves(params))),
        **{k: v for k, v in done_b.items() if k != "train_s"},
        "analyzer_examples": len(ana), "analyzer_demo_success": float(np.mean([d.won for d in ana_demos])),
        "multitask_steps": len(mt_act) + len(mt_ana),
        "multitask_act_loss_last": float(np.mean(mt_act[-10:])) if mt_act else None,
        "multitask_analyzer_loss_last": float(np.mean(mt_ana[-10:])) if mt_ana else None,
        "eval_tasks": len(eval_tasks), "eval_temperature": config.eval.temperature,
        **{f"eval_{k}": v for k, v in ev.items()},
        "random_policy_success": random_policy_success(eval_tasks, bench.spec.max_steps, bench.spec.history_window),
        "train_s": round(train_s, 1), "eval_s": round(time.time() - t_eval, 1), "wall_s": round(time.time() - t0, 1),
    }
    save_policy(Policy.of(model, tok), out_dir)
    marker.write_text(json.dumps(summary, indent=1))
    log.info("stage 0: %s", summary)
    return summary
