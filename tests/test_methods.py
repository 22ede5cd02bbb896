"""Every method switch (docs/METHOD.md §7) on the tiny presets: what makes each method that method.

One small run per method, shared by the tests below (module-scoped), checks

- which stages ran and which were skipped (``stages/<stage>.json``);
- ``lambda_opd`` of the RL `TrainConfig`, whether the compiled train step has a teacher pass
  (the lowered program has one more decoder scan, ``stablehlo.while``), and whether the run's
  updates computed the OPD term (``train/opd_loss`` in their metrics);
- which skills reached which prompts: at train through the RL callback's `UpdateRecord`
  (the OPD skill of each trajectory and the prompts the policy saw), at eval through the
  evaluation transcripts;
- whether training happened at all (RL updates, ``rl/final_model``).

The expectations (`EXPECT`) are written out here from the paper's list of baselines and
ablations, not read from `seed_jax.pipeline.methods`.

Runs. The search methods run ``configs/search.py:tiny`` with one change: the policy is a
*grammar model* (`grammar_model`), a 2-layer decoder whose blocks add nothing to the residual
stream, so that its next token depends on the current token only, through a table. It answers
``<answer> COLOUR ANIMAL</answer>`` with a random colour and animal, so every episode ends with a
valid action of its own and the tiny preset's model-free analyzer writes a skill that names that
answer: skills differ from trajectory to trajectory, and a skill that reaches the wrong
trajectory shows. ``skill_prompt`` and ``skill_grpo`` run ``configs/alfworld.py:tiny`` (the
tasks have types) with a stage-1 bank written here after the collect and annotate stages: one
successful skill per task type that names its type. The random policy never succeeds, so the
bank it collects has no successful skill and a lookup outside the collected tasks would return
none; the written bank makes "the skill of the same task type" a checkable statement. The
``seed_static`` bank (search, no task types) holds one skill per training task.

`test_self_analyzer_in_rl` runs the policy as its own analyzer inside RL (docs/METHOD.md §3.1),
with a grammar model whose greedy answer is a known JSON skill.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
from pathlib import Path

import jax
import numpy as np
import pytest

from seed_jax.launch import run_pipeline
from seed_jax.models import Model, ModelConfig, load_tokenizer
from seed_jax.models.decoder import init_params
from seed_jax.pipeline.environments import make_benchmark
from seed_jax.pipeline.heuristic_annotator import heuristic_skill
from seed_jax.pipeline.methods import METHODS
from seed_jax.pipeline.runtime import load_policy, save_policy, train_config
from seed_jax.rollout.analyzer import analyze_trajectories
from seed_jax.rollout.loop import make_prompt_encoder
from seed_jax.rollout.policy import Policy
from seed_jax.rollout.trajectory import Trajectory, read_trajectories
from seed_jax.skills import SKILL_HEADING, SkillRecord, canonical_answer, parse_skill, write_skill_records
from seed_jax.train.checkpoint import Checkpointer
from seed_jax.train.mesh import make_mesh
from seed_jax.train.state import create_sharded_state
from seed_jax.train.step import make_train_step
from seed_jax.train.synthetic import random_params, synthetic_seed_batch, tiny_config

pytestmark = pytest.mark.integration  # whole pipelines / subprocess launches: CONTRIBUTING.md tiers

STAGES = ("collect", "annotate", "sft", "rl", "eval")


@dataclasses.dataclass(frozen=True)
class Expect:
    """What a method is (docs/METHOD.md §7): ``stage1``: stage-1 data is collected and annotated;
    ``sft``: stage-1 SFT runs and RL starts from it; ``opd``: the OPD term is on (lambda_opd =
    0.01, a teacher pass in the step); ``opd_skills``: where the OPD skill of a trajectory comes
    from (``own``: the analysis of that trajectory, ``bank``: the stage-1 bank entry of its task,
    ``other``: the analysis of another trajectory, None: no skill); ``prompt_skills``: the bank
    skill of the task is shown in the policy's prompts at train and eval; ``trains``: RL updates."""

    stage1: bool
    sft: bool
    opd: bool
    opd_skills: str | None
    prompt_skills: bool
    trains: bool


EXPECT = {
    "seed": Expect(stage1=True, sft=True, opd=True, opd_skills="own", prompt_skills=False, trains=True),
    "grpo": Expect(stage1=False, sft=False, opd=False, opd_skills=None, prompt_skills=False, trains=True),
    "seed_no_sft": Expect(stage1=False, sft=False, opd=True, opd_skills="own", prompt_skills=False, trains=True),
    "sft_grpo": Expect(stage1=True, sft=True, opd=False, opd_skills=None, prompt_skills=False, trains=True),
    "seed_static": Expect(stage1=True, sft=True, opd=True, opd_skills="bank", prompt_skills=False, trains=True),
    "skill_prompt": Expect(stage1=True, sft=False, opd=False, opd_skills=None, prompt_skills=True, trains=False),
    "skill_grpo": Expect(stage1=True, sft=False, opd=False, opd_skills=None, prompt_skills=True, trains=True),
    "vanilla": Expect(stage1=False, sft=False, opd=False, opd_skills=None, prompt_skills=False, trains=False),
    "seed_shuffled": Expect(stage1=True, sft=True, opd=True, opd_skills="other", prompt_skills=False, trains=True),
}
ALFWORLD_METHODS = ("skill_prompt", "skill_grpo")
LAMBDA_OPD = 0.01  # the paper recipe (docs/METHOD.md §6)


def test_every_method_has_an_expectation():
    assert set(EXPECT) == set(METHODS)


# --------------------------------------------------------------------------- grammar models


def one_token(tok, piece: str) -> int:
    ids = tok(piece, add_special_tokens=False)["input_ids"]
    assert len(ids) == 1, f"{piece!r} is not one token: {ids}"
    return ids[0]


def grammar_model(tok, table: dict[int, dict[int, float]], hidden: int = 64, seed: int = 0) -> Model:
    """A decoder whose next-token logits depend on the current token only.

    ``table[t][v]`` is the logit of ``v`` after ``t`` (every other token: 0). Attention and MLP
    outputs are zero (``o_proj`` and ``down_proj`` kernels), so the last hidden state is the
    current token's embedding; the embedding of the k-th token of the table is the unit vector
    e_k, which the final RMSNorm scales to sqrt(hidden) e_k, and row k of the untied LM head holds
    that token's logits / sqrt(hidden). Tokens outside the table keep random embeddings (their
    next token is close to uniform).
    """
    assert len(table) <= hidden
    cfg = ModelConfig(model_type="llama", vocab_size=len(tok), hidden_size=hidden, intermediate_size=2 * hidden,
                      num_layers=2, num_heads=4, num_kv_heads=2, head_dim=hidden // 4, tie_word_embeddings=False,
                      eos_token_ids=(tok.eos_token_id,), bos_token_id=tok.bos_token_id)
    p = jax.tree_util.tree_map(np.array, jax.device_get(init_params(cfg, jax.random.PRNGKey(seed))))
    p["layers"]["self_attn"]["o_proj"]["kernel"][:] = 0
    p["layers"]["mlp"]["down_proj"]["kernel"][:] = 0
    emb, head = p["embed_tokens"]["embedding"], p["lm_head"]
    head[:] = 0
    for k, (t, nxt) in enumerate(table.items()):
        emb[t] = 0
        emb[t, k] = 1.0
        for v, logit in nxt.items():
            head[k, v] = logit / np.sqrt(hidden)
    return Model(cfg, p, "grammar")


COLOURS = "red blue green black white brown pink gray gold silver".split()
ANIMALS = "cat dog fox owl bee cow pig hen ant bat".split()


def answering_policy(tok) -> Model:
    """``<answer> COLOUR ANIMAL</answer>`` after the chat template's last token, colour and
    animal uniform over ten each (logit 30 for every allowed token, 0 for the rest)."""
    last = make_prompt_encoder(tok)("x")[-1]  # the generation prompt's last token
    lt, answer, gt, close = (one_token(tok, s) for s in ("<", "answer", ">", "</"))
    colours = [one_token(tok, " " + w) for w in COLOURS]
    animals = [one_token(tok, " " + w) for w in ANIMALS]
    table = {last: {lt: 30.0}, lt: {answer: 30.0}, answer: {gt: 30.0}, gt: dict.fromkeys(colours, 30.0)}
    table.update({c: dict.fromkeys(animals, 30.0) for c in colours})
    table.update({a: {close: 30.0} for a in animals})
    table[close] = {answer: 30.0}  # "</answer>" is a stop string: generation ends there
    return grammar_model(tok, table)


# A JSON answer that `parse_skill` accepts, as tokens that all differ (a table model cannot
# repeat a token with two different successors): the second key spells "_" as the escape \x5f.
ANALYSIS_PIECES = ['{"', 'episode', '_', 'summary', '":"', 'Done', '","', 'ep', 'isode', '\\', 'x', '5', 'fs',
                   'kill', '":', '"', 'Always', ' end', ' with', ' one', ' action', ' tag', '."', '}']
ANALYSIS_SKILL = "Always end with one action tag."


def analyzing_policy(tok) -> Model:
    """Greedy decoding writes ``"".join(ANALYSIS_PIECES)`` then EOS, after any prompt.

    Every step's chain token has logit 15 and a competitor (" zebra") logit 14: greedy always
    follows the chain, sampling at temperature 1 follows one step with probability ~0.72, all 25
    steps with probability ~3e-4.
    """
    last = make_prompt_encoder(tok)("x")[-1]
    chain = [last] + [one_token(tok, s) for s in ANALYSIS_PIECES] + [tok.eos_token_id]
    assert len(set(chain)) == len(chain)
    assert tok.decode(chain[1:-1]) == "".join(ANALYSIS_PIECES)
    zebra = one_token(tok, " zebra")
    return grammar_model(tok, {t: {nxt: 15.0, zebra: 14.0} for t, nxt in zip(chain, chain[1:])})


def test_grammar_models_do_what_they_say(smol_tokenizer):
    from seed_jax.sampling import generate

    tok = smol_tokenizer
    enc = make_prompt_encoder(tok)
    prompts = [enc("What colour is it?"), enc("a longer question " * 40)]
    res = generate(answering_policy(tok), tok, prompts * 4, max_new_tokens=16, temperature=1.0,
                   stop_strings=("</answer>",), seed=1)
    for text in res.texts:
        colour, animal = text.removeprefix("<answer> ").removesuffix("</answer>").split(" ")
        assert colour in COLOURS and animal in ANIMALS, text
    assert len(set(res.texts)) > 4
    model = analyzing_policy(tok)
    greedy = generate(model, tok, prompts, max_new_tokens=40, temperature=0.0)
    assert greedy.texts == ["".join(ANALYSIS_PIECES)] * 2
    assert parse_skill(greedy.texts[0]).ok and parse_skill(greedy.texts[0]).skill == ANALYSIS_SKILL
    sampled = generate(model, tok, prompts * 4, max_new_tokens=40, temperature=1.0, seed=2)
    assert not any(parse_skill(t).ok for t in sampled.texts)


# ------------------------------------------------------------------------------------ runs


@dataclasses.dataclass
class MethodRun:
    method: str
    config: object
    workdir: Path
    out: dict  # stage -> summary (the last call of run_pipeline)
    records: list  # UpdateRecords
    bank: dict[str, str]  # written bank: task_id -> skill (search) or task_type -> skill (alfworld)

    def stage(self, name: str) -> dict | None:
        f = self.workdir / "stages" / f"{name}.json"
        return json.loads(f.read_text()) if f.exists() else None


def _config(env: str, method: str, **keys):
    c = importlib.import_module(f"seed_jax.configs.{env}").get_config("tiny")
    c.method = method
    for dotted, value in keys.items():
        *parents, leaf = dotted.split("__")
        node = c
        for part in parents:
            node = node[part]
        node[leaf] = value
    return c


def _write_bank(path: Path, entries: list[tuple[str, str]]) -> None:
    """stage1/sft.jsonl with one successful record per (task_id, skill)."""
    write_skill_records(path, [
        SkillRecord(prompt=f"Trajectory of task {tid}", answer=canonical_answer(f"Solved {tid}.", skill),
                    traj_id=f"bank/{tid}#0", outcome="success", task_id=tid) for tid, skill in entries])


def _type_skill(task_type: str) -> str:
    return f"For every {task_type} task: finish the {task_type} part before placing the object."


@pytest.fixture(scope="module")
def answering_dir(tmp_path_factory):
    tok = load_tokenizer(None)
    return save_policy(Policy.of(answering_policy(tok), tok), tmp_path_factory.mktemp("answering") / "model")


def _write_type_bank(config, workdir) -> dict[str, str]:
    """Replace the collected stage-1 bank by one successful skill per task type (on the first
    training task of that type); the first record's type, look, is no eval task's type here.
    Returns task_type -> skill."""
    bench = make_benchmark(config.env)
    first = {}
    for t in bench.tasks(bench.train_split):
        first.setdefault(t["task_type"], t["task_id"])
    order = ["look", *sorted(set(first) - {"look"})]
    _write_bank(workdir / "stage1" / "sft.jsonl", [(first[k], _type_skill(k)) for k in order])
    eval_types = {t["task_type"] for s in bench.eval_splits
                  for t in bench.tasks(s, limit=config.eval.num_tasks, seed=config.seed)}
    assert "look" not in eval_types and len(eval_types) > 1  # the first skill is wrong for every eval task
    return {k: _type_skill(k) for k in first}


@pytest.fixture(scope="module")
def run_method(tmp_path_factory, answering_dir):
    cache: dict[str, MethodRun] = {}

    def get(method: str) -> MethodRun:
        if method not in cache:
            cache[method] = _run(method, tmp_path_factory.mktemp(method), answering_dir)
        return cache[method]

    return get


def _run(method, workdir, answering_dir) -> MethodRun:
    """The method's run; the bank is written between the annotate stage and the rest."""
    records = []
    if method in ALFWORLD_METHODS:
        config = _config("alfworld", method)
        run_pipeline(_config("alfworld", method), workdir, stages="collect,annotate")
        bank = _write_type_bank(config, workdir)
        out = run_pipeline(config, workdir, stages="collect,annotate,sft,rl,eval", rl_callbacks=[records.append])
        return MethodRun(method, config, workdir, out, records, bank)
    keys = {"model__path": str(answering_dir), "model__random_init": False}
    config = _config("search", method, **keys)
    bank = {}
    if method == "seed_static":
        run_pipeline(_config("search", method, **keys), workdir, stages="collect,annotate")
        bench = make_benchmark(config.env)
        bank = {t["task_id"]: f"Static skill number {i}: search once, then answer."
                for i, t in enumerate(bench.tasks(bench.train_split))}
        _write_bank(workdir / "stage1" / "sft.jsonl", list(bank.items()))
    out = run_pipeline(config, workdir, stages="collect,annotate,sft,rl,eval", rl_callbacks=[records.append])
    return MethodRun(method, config, workdir, out, records, bank)


# ---------------------------------------------------------------------------------- stages


@pytest.mark.parametrize("method", METHODS)
def test_stages_that_ran(method, run_method):
    r, e = run_method(method), EXPECT[method]
    ran = {s: (r.stage(s) is not None and "skipped" not in r.stage(s)) for s in STAGES}
    assert all(r.stage(s) is not None for s in STAGES), "every stage leaves a marker"
    assert ran == {"collect": e.stage1, "annotate": e.stage1, "sft": e.sft, "rl": e.trains, "eval": True}
    assert (r.workdir / "stage1" / "sft.jsonl").exists() == e.stage1
    assert (r.workdir / "sft" / "model" / "config.json").exists() == e.sft
    assert (r.workdir / "rl" / "final_model" / "config.json").exists() == e.trains
    assert (r.workdir / "rl" / "ckpt").exists() == e.trains
    assert [rec.update for rec in r.records] == (list(range(1, r.config.rl.num_updates + 1)) if e.trains else [])
    assert sorted(p.name for p in (r.workdir / "eval").glob("final_*.json"))


# ------------------------------------------------------------------ lambda_opd, teacher pass


def _scans(tc) -> int:
    """``stablehlo.while`` loops in the lowered train step of ``tc`` (one per decoder pass)."""
    cfg = tiny_config()
    batch = synthetic_seed_batch(0, 8, 6, 5, 9, cfg.vocab_size).replace(teacher_logp=None)
    mesh = make_mesh(devices=jax.devices()[:1])
    state = create_sharded_state(random_params(cfg, 0), tc, mesh)
    return make_train_step(cfg, tc, mesh).lower(state, batch).as_text().count("stablehlo.while")


@pytest.mark.parametrize("method", METHODS)
def test_lambda_opd_and_teacher_pass(method, run_method):
    """The RL TrainConfig of the method's config (`train_config`, what the RL stage builds):
    lambda_opd 0.01 with OPD, else 0; its compiled step has exactly one more decoder scan than
    the same step without OPD (the teacher forward) iff OPD is on; the run's updates report the
    OPD loss iff OPD is on."""
    r, e = run_method(method), EXPECT[method]
    tc = train_config(r.config)
    assert tc.lambda_opd == (LAMBDA_OPD if e.opd else 0.0)
    assert tc.beta_opd == 5.0
    if e.trains:
        assert tc.micro_batch_size == r.config.train.micro_batch_size
        plain = _scans(tc.replace(lambda_opd=0.0))
        assert _scans(tc) == plain + (1 if e.opd else 0)
        assert _scans(tc.replace(lambda_opd=LAMBDA_OPD)) == plain + 1  # the count can tell
    for rec in r.records:
        assert ("train/opd_loss" in rec.metrics) == e.opd
        assert ("train/gate_mean" in rec.metrics) == e.opd


# -------------------------------------------------------------------------- skills at train


def _shown_skills(prompt: str, skills) -> list[str]:
    return [s for s in skills if s in prompt]


def _own_skills(rec, threshold) -> dict[str, str]:
    """The model-free analysis of each analysable trajectory itself (the tiny preset's analyzer)."""
    return {t.traj_id: heuristic_skill(t, threshold).skill for t in rec.trajectories if t.steps and not t.env_error}


@pytest.mark.parametrize("method", [m for m in METHODS if EXPECT[m].trains])
def test_skills_at_train(method, run_method):
    r, e = run_method(method), EXPECT[method]
    threshold = make_benchmark(r.config.env).spec.success_threshold
    assert r.records
    for rec in r.records:
        trajs = [t for t in rec.trajectories if t.steps and not t.env_error]
        assert trajs
        prompts = [(t, s.prompt_text) for t in trajs for s in t.steps]
        # prompts: the bank skill of the task's type (skill methods), else no skill at all
        for t, prompt in prompts:
            if e.prompt_skills:
                assert _shown_skills(prompt, r.bank.values()) == [r.bank[t.info["task_type"]]], t.traj_id
                assert prompt.count(SKILL_HEADING) == 1
            else:
                assert SKILL_HEADING not in prompt
        # OPD skills
        own = _own_skills(rec, threshold)
        got = {t.traj_id: rec.skills.get(t.traj_id) for t in trajs}
        if e.opd_skills is None:
            assert not any(rec.skills.values()) and not rec.parses and not rec.step_gates
            continue
        if e.opd_skills == "own":
            assert got == own
            assert {k: p.skill for k, p in rec.parses.items()} == own
        elif e.opd_skills == "bank":
            assert got == {t.traj_id: r.bank[t.task_id] for t in trajs}
            assert not rec.parses
        elif e.opd_skills == "other":
            assert {k: p.skill for k, p in rec.parses.items()} == own  # the analysis as written
            assert sorted(got.values()) == sorted(own.values())  # the same skills, moved
            unique = [k for k, s in own.items() if list(own.values()).count(s) == 1]
            assert len(unique) >= 2, "the trajectories' skills must differ for the test to tell"
            assert all(got[k] != own[k] for k in unique), "a trajectory kept its own skill"
        # the teacher pass sees the skill of every trajectory that has one, and only those
        assert {g.traj_id for g in rec.step_gates} == {k for k, v in got.items() if v}
        assert set(rec.gates) == {k for k, v in got.items() if v}
    if e.opd_skills == "own":  # distinct skills, so a skill on the wrong trajectory would show
        assert len({s for rec in r.records for s in _own_skills(rec, threshold).values()}) > 2


def test_skill_prompt_trains_nothing(run_method):
    r = run_method("skill_prompt")
    assert not r.records and r.stage("rl")["skipped"]
    assert not (r.workdir / "rl").exists()
    assert not (r.workdir / "metrics.jsonl").exists() or not any(
        "train/loss" in json.loads(line) for line in (r.workdir / "metrics.jsonl").read_text().splitlines())


# --------------------------------------------------------------------------- skills at eval


def _eval_transcripts(r: MethodRun) -> dict[str, list[Trajectory]]:
    bench = make_benchmark(r.config.env)
    paths = {s: r.workdir / "eval" / f"final_{s}.trajectories.jsonl" for s in bench.eval_splits}
    if not all(p.exists() for p in paths.values()):
        pytest.xfail("the eval stage writes no transcripts (eval/<tag>_<split>.trajectories.jsonl) yet")
    return {s: read_trajectories(p) for s, p in paths.items()}


@pytest.mark.parametrize("method", METHODS)
def test_skills_at_eval(method, run_method):
    """Final evaluation: Skill-Prompt / Skill-GRPO show every eval task the bank skill of its
    own task type (the eval tasks are not in the bank, so this is the type lookup); every other
    method shows no skill."""
    r, e = run_method(method), EXPECT[method]
    transcripts = _eval_transcripts(r)
    for split, trajs in transcripts.items():
        assert len(trajs) == r.config.eval.num_tasks, split
        for t in trajs:
            for s in t.steps:
                if e.prompt_skills:
                    assert _shown_skills(s.prompt_text, r.bank.values()) == [r.bank[t.info["task_type"]]], \
                        (split, t.task_id)
                else:
                    assert SKILL_HEADING not in s.prompt_text


# ------------------------------------------------------------------------ self-analysis in RL


@pytest.fixture(scope="module")
def self_analysis_run(tmp_path_factory):
    """seed_no_sft on search tiny with ``analysis.analyzer=self``: the policy (`analyzing_policy`)
    writes the skills inside RL. A learning rate of 1e-3 (the tiny preset's: 1e-4) makes the first
    update change some of the policy's greedy answers, so that the second update's skills tell
    theta_old (the parameters after update 0) from the RL start."""
    tok = load_tokenizer(None)
    model_dir = save_policy(Policy.of(analyzing_policy(tok), tok), tmp_path_factory.mktemp("analyzing") / "model")
    workdir = tmp_path_factory.mktemp("self_analysis")
    config = _config("search", "seed_no_sft", model__path=str(model_dir), model__random_init=False,
                     analysis__analyzer="self", analysis__max_new_tokens=40, train__lr=1e-3)
    records = []
    run_pipeline(config, workdir, stages="rl", rl_callbacks=[records.append])
    return config, workdir, model_dir, records


def test_self_analyzer_in_rl(self_analysis_run):
    config, workdir, model_dir, records = self_analysis_run
    assert [r.update for r in records] == [1, 2]
    policy = load_policy(config)
    model, tok = policy.model, policy.tokenizer
    threshold = make_benchmark(config.env).spec.success_threshold

    def greedy(rec, params):
        return analyze_trajectories(model, tok, rec.trajectories, params=params, encode_prompt=make_prompt_encoder(tok),
                                    success_threshold=threshold, max_new_tokens=config.analysis.max_new_tokens,
                                    max_prompt_tokens=config.analysis.max_prompt_tokens,
                                    batch_size=config.analysis.batch_size, progress=False)[0]

    # update 0: theta_old is the RL start, whose greedy answer is known; sampling would not write it
    first = records[0]
    assert first.parses and all(p.ok and p.skill == ANALYSIS_SKILL for p in first.parses.values())
    assert set(first.skills.values()) == {ANALYSIS_SKILL}
    # update 2: theta_old is the state after update 1 (checkpoint 1)
    tc = train_config(config)
    target = create_sharded_state(model.params, tc, make_mesh(devices=jax.devices()[:1]))
    with Checkpointer(workdir / "rl" / "ckpt") as ckpt:
        assert 1 in ckpt.all_steps()
        state, _ = ckpt.restore(1, target)
    old = jax.device_get(state.params)
    second = records[1]
    assert second.parses == greedy(second, old)
    assert second.parses != greedy(second, model.params), "update 1 did not change the greedy analysis"
    assert second.skills == {k: (p.skill if p.ok else None) for k, p in second.parses.items()}
    # parse rate: the share of parsed skills in the record, in the record's and the file's metrics
    rows = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
    rows = {row["step"]: row for row in rows if "analysis/parse_rate" in row}
    for rec in records:
        share = np.mean([p.ok for p in rec.parses.values()])
        assert rec.metrics["analysis/parse_rate"] == pytest.approx(share)
        assert rows[rec.update]["analysis/parse_rate"] == pytest.approx(share)
    parsed = [p.ok for rec in records for p in rec.parses.values()]
    assert any(parsed) and not all(parsed), "parsed and unparsed skills make the parse rate a test"
