"""Where hindsight skills come from: one registry of analyzers, shared by stage 1 and RL.

An analyzer maps finished trajectories to an `Analysis`: per trajectory the analyzer prompt
``x_tau`` (`seed_jax.skills.render_analyzer_prompt`, the SFT input), the parsed answer and the
skill that the RL step uses for the teacher prompt ``H(h, s)`` (None: no OPD signal).

=============  =====================================================================  =========
name           skills from                                                             used by
=============  =====================================================================  =========
``self``       the policy itself, greedy, with the parameters it is given (theta_old)   stage 1, RL
``openai``     an OpenAI-compatible chat endpoint (`seed_jax.pipeline.annotator`)      stage 1
``heuristic``  model-free templates (`seed_jax.pipeline.heuristic_annotator`)          stage 1, RL
``scripted``   the environment's own expert analysis (``Benchmark.scripted_answer``)   stage 1, RL
``static``     the stage-1 skill bank, looked up by task (`SkillBank`)                RL
``shuffled``   another analyzer's skills moved to other trajectories (a derangement)   RL
=============  =====================================================================  =========

``scripted`` exists only for the benchmarks with an expert analysis (``household``:
`seed_jax.pipeline.environments.EXPERT_ANALYSIS`); in RL it is the oracle: the teacher reads an
accurate skill of the very episode it scores. Every analyzer skips trajectories with ``env_error`` or no steps. `rl_analyzer` picks the RL
analyzer of a method (`MethodSwitches.skill_source`), `stage1_analyzer` the stage-1 one.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Mapping, Sequence

from seed_jax.metrics import StageProgress
from seed_jax.pipeline.annotator import OpenAIChat, annotate_many
from seed_jax.pipeline.heuristic_annotator import heuristic_skill
from seed_jax.pipeline.skill_bank import SkillBank
from seed_jax.rollout.analyzer import analyze_trajectories, fit_analyzer_prompt
from seed_jax.rollout.policy import Policy
from seed_jax.rollout.trajectory import Trajectory
from seed_jax.skills import SkillParse, parse_skill, render_analyzer_prompt


@dataclasses.dataclass(frozen=True)
class Analysis:
    """``parses`` / ``prompts``: traj_id -> the analyzer's parsed answer / its prompt x_tau (empty
    for analyzers that write nothing, e.g. ``static``); ``skills``: traj_id -> the skill for OPD;
    ``cut``: the trajectories whose x_tau the budget shortened."""

    parses: dict[str, SkillParse]
    prompts: dict[str, str]
    skills: dict[str, str | None]
    cut: frozenset[str] = frozenset()

    @staticmethod
    def from_parses(parses: dict[str, SkillParse], prompts: dict[str, str], cut=frozenset()) -> Analysis:
        return Analysis(parses, prompts, {k: (p.skill if p.ok else None) for k, p in parses.items()}, frozenset(cut))

    @property
    def truncated_share(self) -> float | None:
        """Share of the analyser prompts that the budget shortened (None without prompts)."""
        return len(self.cut) / len(self.prompts) if self.prompts else None

    @property
    def parse_rate(self) -> float | None:
        """Share of parsed answers (None when the analyzer wrote none)."""
        return sum(p.ok for p in self.parses.values()) / len(self.parses) if self.parses else None


@dataclasses.dataclass(frozen=True)
class AnalysisContext:
    """What an analyzer may use. ``policy`` (a `seed_jax.rollout.policy.Policy`, theta_old in RL)
    for ``self`` (sampling with the `seed_jax.sampling.SamplerSpec` ``sampler``); ``bench`` (its
    ``scripted_answer``) for ``scripted``; ``bank`` and ``tasks``
    (task_id -> task dict) for ``static``; ``seed`` / ``update`` seed ``shuffled``;
    ``encode_prompt`` (the policy's prompt encoder, the one the stage-1 SFT reads x_tau with)
    budgets x_tau in tokens for every analyzer (`prompt`)."""

    success_threshold: float
    max_prompt_tokens: int
    max_new_tokens: int
    batch_size: int = 32
    policy: Policy | None = None
    bench: object = None
    bank: SkillBank | None = None
    tasks: Mapping[str, dict] = dataclasses.field(default_factory=dict)
    openai: Mapping[str, object] = dataclasses.field(default_factory=dict)
    seed: int = 0
    update: int = 0
    sampler: object = None
    encode_prompt: Callable[[str], list[int]] | None = None

    @property
    def max_prompt_chars(self) -> int:
        """The character budget of x_tau: ~3 characters per prompt token."""
        return 3 * self.max_prompt_tokens

    def prompt(self, traj: Trajectory) -> tuple[str, bool]:
        """``(x_tau, cut)`` within ``max_prompt_tokens`` tokens of ``encode_prompt``
        (`fit_analyzer_prompt`, as the ``self`` analyzer does), so that the SFT's left cut at the
        same budget never reaches the header (task, outcome); without an encoder, at the
        character budget ``max_prompt_chars``."""
        if self.encode_prompt is not None:
            text, _, cut = fit_analyzer_prompt(traj, self.encode_prompt, self.success_threshold,
                                               self.max_prompt_tokens)
            return text, cut
        return render_analyzer_prompt(traj, self.success_threshold, max_chars=self.max_prompt_chars)

    def prompts(self, trajs: Sequence[Trajectory]) -> tuple[dict[str, str], frozenset[str]]:
        rendered = {t.traj_id: self.prompt(t) for t in trajs}
        return {k: v[0] for k, v in rendered.items()}, frozenset(k for k, v in rendered.items() if v[1])


Analyzer = Callable[[Sequence[Trajectory], AnalysisContext], Analysis]


def analyzable(trajs: Sequence[Trajectory]) -> list[Trajectory]:
    return [t for t in trajs if not t.env_error and t.steps]


def self_analyzer(trajs, ctx: AnalysisContext) -> Analysis:
    if ctx.policy is None:
        raise ValueError("the 'self' analyzer needs the policy (AnalysisContext.policy)")
    p = ctx.policy
    with p.sampling(ctx.sampler):  # every host enters it (a collective when params span hosts)
        parses, prompts, cut = analyze_trajectories(
            p.model, p.tokenizer, analyzable(trajs), params=p.params, encode_prompt=p.encode_prompt,
            success_threshold=ctx.success_threshold, max_new_tokens=ctx.max_new_tokens,
            max_prompt_tokens=ctx.max_prompt_tokens, batch_size=ctx.batch_size, sampler=ctx.sampler)
    return Analysis.from_parses(parses, prompts, cut)


def openai_analyzer(trajs, ctx: AnalysisContext) -> Analysis:
    """``ctx.openai``: ``base_url`` ('' = ``$OPENAI_BASE_URL``), ``model``, ``api_key_env``,
    ``max_repairs``, ``max_concurrency`` (requests in flight), ``reasoning`` (auto | yes | no)
    and ``log_path`` (the resumable jsonl log; None = none), see `seed_jax.pipeline.annotator`."""
    o = dict(ctx.openai)
    chat = OpenAIChat(o.get("base_url", ""), o["model"], o.get("api_key_env", "OPENAI_API_KEY"),
                      max_tokens=ctx.max_new_tokens, reasoning=str(o.get("reasoning", "auto")))
    todo = analyzable(trajs)
    prompts, cut = ctx.prompts(todo)
    with StageProgress(len(todo), "annotate") as bar:
        parses = annotate_many(prompts, chat, max_repairs=int(o.get("max_repairs", 2)),
                               max_concurrency=int(o.get("max_concurrency", 8)), log_path=o.get("log_path"),
                               on_done=lambda: bar.update(1))
    return Analysis.from_parses(parses, prompts, cut)


def heuristic_analyzer(trajs, ctx: AnalysisContext) -> Analysis:
    todo = analyzable(trajs)
    return Analysis.from_parses({t.traj_id: heuristic_skill(t, ctx.success_threshold) for t in todo},
                                *ctx.prompts(todo))


def scripted_analyzer(trajs, ctx: AnalysisContext) -> Analysis:
    answer = getattr(ctx.bench, "scripted_answer", None)
    if answer is None:
        raise ValueError(f"the analyzer 'scripted' is not available for env "
                         f"{getattr(ctx.bench, 'name', '?')!r} (it provides no expert analysis)")
    todo = analyzable(trajs)
    return Analysis.from_parses({t.traj_id: parse_skill(answer(t)) for t in todo}, *ctx.prompts(todo))


def static_analyzer(trajs, ctx: AnalysisContext) -> Analysis:
    """Bank skills by task (`SkillBank.lookup` on the task dict; a task unknown to ``ctx.tasks``
    is looked up by its id and the trajectory's task type)."""
    if ctx.bank is None:
        raise ValueError("the 'static' analyzer needs the stage-1 skill bank")
    skills = {}
    for t in analyzable(trajs):
        task = ctx.tasks.get(t.task_id) or {"task_id": t.task_id, "task_type": t.info.get("task_type", "")}
        skills[t.traj_id] = ctx.bank.lookup(task)
    return Analysis({}, {}, skills)


def shuffle_skills(skills: Mapping[str, str | None], seed: int, update: int) -> dict[str, str | None]:
    """Control: move every skill to another trajectory (seeded permutation, no fixed point when
    there are two or more skills); trajectories without a skill keep none."""
    ids = [k for k, v in skills.items() if v]
    if len(ids) < 2:
        return dict.fromkeys(skills)
    order = ids[:]
    random.Random(f"{seed}:shuffle:{update}").shuffle(order)
    shifted = order[1:] + order[:1]  # a cyclic shift of a random order: a derangement
    out: dict[str, str | None] = dict.fromkeys(skills)
    for src, dst in zip(order, shifted):
        out[dst] = skills[src]
    return out


def shuffled(inner: Analyzer) -> Analyzer:
    """``inner``'s analysis with its skills shuffled (`shuffle_skills`); parses stay as written."""

    def analyze(trajs, ctx: AnalysisContext) -> Analysis:
        a = inner(trajs, ctx)
        return Analysis(a.parses, a.prompts, shuffle_skills(a.skills, ctx.seed, ctx.update), a.cut)

    return analyze


ANALYZERS: dict[str, Analyzer] = {
    "self": self_analyzer,
    "openai": openai_analyzer,
    "heuristic": heuristic_analyzer,
    "scripted": scripted_analyzer,
    "static": static_analyzer,
}
# the names `seed_jax.pipeline.validate` accepts for stage1.analyzer and analysis.analyzer
# ('scripted' only for an env with an expert analysis)
STAGE1_ANALYZERS = ("self", "openai", "scripted", "heuristic")
RL_ONLINE_ANALYZERS = ("self", "heuristic", "scripted")


def get_analyzer(name: str) -> Analyzer:
    if name not in ANALYZERS:
        raise ValueError(f"unknown analyzer {name!r}; known: {sorted(ANALYZERS)}")
    return ANALYZERS[name]


def rl_analyzer(skill_source: str, online: str) -> Analyzer | None:
    """The RL analyzer of a method's ``skill_source``: ``online`` -> ``ANALYZERS[online]``
    (``analysis.analyzer``), ``static`` -> the bank, ``shuffled`` -> the online one shuffled,
    ``none`` -> None (no skills)."""
    if skill_source == "none":
        return None
    if skill_source == "static":
        return static_analyzer
    inner = get_analyzer(online)
    return shuffled(inner) if skill_source == "shuffled" else inner
