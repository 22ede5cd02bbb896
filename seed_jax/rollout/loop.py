"""Host-side multi-turn rollout loop: many live episodes, one batched sampler call per turn.

For a batch of tasks x group size N, every episode gets a slot in the env backend (worker
pool). Each turn the loop chat-templates the env-built prompt of every live episode and fits it
to ``max_prompt_tokens`` (`fit_prompt`: the env's variants with fewer past steps first, so the
task line and the current observation stay; a prompt still too long is cut from the left), samples the responses in waves of at most
``wave_rows`` episodes (one `generate` call each; 0: all live episodes in one call), steps the
environments of each wave in one batched backend call, and records a `StepSample`. With several
waves a wave's env steps run in a background thread while the next wave generates
(`_EnvSteps`; the backend's workers are processes, so environments and sampler work at the same
time), and a turn ends when the last wave's steps are back. Each episode samples
with its own random stream (its slot is its `generate` row id), so the episodes do not depend
on how the live ones are cut into waves. Episodes end on ``done``, on an env error, or after
``max_steps`` turns.

Rewards: environments return the step reward *including* the invalid-action penalty; the
record keeps them apart (``reward`` = env reward + penalty, ``penalty`` = the penalty of docs/METHOD.md §5
when the response was invalid).

What the loop reads of an env's ``info`` is the contract of `envs.base` (`INFO_KEYS`):
``valid``, ``action_text`` (recorded as `StepSample.action`), ``won`` and ``raw_observation``
of every step; the optional ``task_type``, ``data_source`` and ``score`` go to the
trajectory's ``info``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

from tqdm.auto import tqdm

from seed_jax.buckets import BUCKETS
from seed_jax.envs.actions import THINK_TAGS
from seed_jax.metrics import progress_enabled
from seed_jax.models.tokenizer import apply_chat
from seed_jax.rollout.pool import EnvBackend
from seed_jax.rollout.trajectory import StepSample, Trajectory
from seed_jax.sampling import SamplerSpec, SamplingParams, generate
from seed_jax.skills import insert_skill
from seed_jax.watchdog import beat


@dataclasses.dataclass(frozen=True)
class RolloutSettings:
    """One `run_rollouts` configuration. ``sampling`` is what every turn's `generate` call
    decodes with (``sampling.max_new_tokens``: the response budget of one turn). A stop string
    ends a response only outside the thinking delimited by ``think_tags`` (the action parser's
    rule, `envs.actions.find_stop`; None: anywhere). ``wave_rows``: most episodes per `generate`
    call (0: no limit); ``sampler``: the sampler's backend and device layout."""

    group_size: int = 8
    max_steps: int = 30
    max_prompt_tokens: int = 2048
    sampling: SamplingParams = SamplingParams(max_new_tokens=512)
    invalid_penalty: float = 0.1
    success_threshold: float = 10.0
    stop_strings: tuple[str, ...] = ("</action>",)
    think_tags: tuple[str, str] | None = THINK_TAGS
    prompt_buckets: tuple[int, ...] = BUCKETS
    wave_rows: int = 0
    sampler: SamplerSpec = SamplerSpec()

    def __post_init__(self):
        for name in ("group_size", "max_steps", "max_prompt_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"rollout.{name} must be >= 1, got {getattr(self, name)}")
        if self.wave_rows < 0:
            raise ValueError(f"rollout.wave_rows must be >= 0, got {self.wave_rows}")


def waves(items: Sequence, size: int) -> list[Sequence]:
    """``items`` in consecutive slices of at most ``size`` (0: one slice of all)."""
    size = size or max(len(items), 1)
    return [items[i:i + size] for i in range(0, len(items), size)]


class _EnvSteps:
    """The env steps of one turn's waves, each submitted as soon as its wave has generated:
    in one background thread when ``overlap`` (so one backend call at a time, in wave order,
    while the caller generates the next wave), else at once in the caller's thread."""

    def __init__(self, backend: EnvBackend, overlap: bool) -> None:
        self.backend = backend
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="env-steps") if overlap else None
        self.pending: list[Future | dict] = []

    def submit(self, actions: Mapping[int, str]) -> None:
        self.pending.append(self.pool.submit(self.backend.step, actions) if self.pool else self.backend.step(actions))

    def results(self) -> dict:
        """Every submitted step's results (waits for the background thread)."""
        out = {}
        for r in self.pending:
            out.update(r.result() if isinstance(r, Future) else r)
        self.pending = []
        return out

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True)


def make_prompt_encoder(tokenizer, system_prompt: str | None = None) -> Callable[[str], list[int]]:
    """user text -> token ids of the chat-templated prompt (generation prompt appended)."""

    def encode(user_text: str) -> list[int]:
        return tokenizer(apply_chat(tokenizer, user_text, system_prompt), add_special_tokens=False)["input_ids"]

    return encode


def fit_prompt(candidates: Sequence[str], encode_prompt: Callable[[str], list[int]],
                max_prompt_tokens: int) -> tuple[str, list[int]]:
    """``(text, ids)`` of the first of ``candidates`` (the env's prompt, then its
    ``prompt_variants``: fewer past steps, longest first) whose ``encode_prompt`` ids number at
    most ``max_prompt_tokens``; when none does, the last candidate with all its ids (the caller
    cuts them from the left). Candidates after the first are encoded only while the ones before
    are too long."""
    for text in candidates:
        ids = encode_prompt(text)
        if len(ids) <= max_prompt_tokens:
            return text, ids
    return text, ids


def run_rollouts(backend: EnvBackend, model, tokenizer, tasks: Sequence[dict], settings: RolloutSettings, *,
                 params=None, seed: int = 0, encode_prompt: Callable[[str], list[int]] | None = None,
                 tag: str = "", progress: bool = True, group_offset: int = 0, slot_offset: int = 0,
                 task_skills: Sequence[str | None] | None = None,
                 group_size: int | None = None) -> list[Trajectory]:
    """Run ``len(tasks) x group_size`` episodes to the end; returns their trajectories.

    ``params`` overrides the model's parameters (the current policy). ``tag`` prefixes the
    trajectory ids (e.g. the update index). Sampling seeds are ``seed + turn``.
    ``task_skills[g]`` (Skill-Prompt / Skill-GRPO baselines) is inserted into every prompt of
    task ``g`` with `seed_jax.skills.insert_skill`; the recorded ``prompt_text`` is then the
    augmented one, since that is what the policy saw. Episode ``k`` (task ``k // group_size``) runs
    in env slot ``slot_offset + k`` and samples from row stream ``slot_offset + k``; with
    ``group_offset`` a share of a larger task list reproduces that list's episodes
    (`seed_jax.pipeline.multihost.host_rollouts`).
    """

    def shown(slot_prompt: str, g: int) -> str:
        skill = task_skills[g] if task_skills is not None else None
        return insert_skill(slot_prompt, skill) if skill else slot_prompt

    encode_prompt = encode_prompt or make_prompt_encoder(tokenizer)
    N = group_size or settings.group_size
    episodes = {slot_offset + g * N + n: (g, n, task) for g, task in enumerate(tasks) for n in range(N)}
    beat("rollout", f"{tag}env resets of {len(episodes)} episodes")
    resets = backend.reset({slot: task for slot, (_, _, task) in episodes.items()})
    trajs: dict[int, Trajectory] = {}
    candidates, last_obs, live = {}, {}, []  # candidates: the prompt, then its shorter variants
    for slot, (g, n, task) in episodes.items():
        r = resets[slot]
        tid = str(task.get("task_id", group_offset + g)) if isinstance(task, dict) else str(group_offset + g)
        trajs[slot] = Trajectory(task_id=tid, group_id=group_offset + g, traj_id=f"{tag}{tid}#{n}",
                                 task_description=r.task_description, steps=[], episode_reward=0.0,
                                 won=False, env_error=r.env_error,
                                 info={"task_type": r.info.get("task_type", ""),
                                       "data_source": r.info.get("data_source", "")})
        if not r.env_error:
            candidates[slot] = [shown(v, g) for v in (r.prompt, *r.prompt_variants)]
            last_obs[slot] = r.info.get("raw_observation", r.observation)
            live.append(slot)
    bar = tqdm(total=len(episodes), desc=f"rollout {tag}".strip(), disable=not progress_enabled(progress), leave=False)
    finished = len(episodes) - len(live)
    bar.update(finished)
    wins = 0
    turn = 0
    while live and turn < settings.max_steps:
        fitted = {s: fit_prompt(candidates[s], encode_prompt, settings.max_prompt_tokens) for s in live}
        full = {s: ids for s, (_, ids) in fitted.items()}
        ids = {s: full[s][-settings.max_prompt_tokens:] for s in live}
        gen = {}
        cut = waves(live, settings.wave_rows)
        steps = _EnvSteps(backend, overlap=len(cut) > 1)
        try:
            for w, wave in enumerate(cut):
                beat("rollout", f"{tag}turn {turn}: generating wave {w + 1}/{len(cut)} ({len(wave)} episodes)")
                out = generate(model, tokenizer, [ids[s] for s in wave], params=params, seed=seed + turn,
                               stop_strings=settings.stop_strings, think_tags=settings.think_tags,
                               prompt_buckets=settings.prompt_buckets, sampler=settings.sampler, row_ids=wave,
                               **dataclasses.asdict(settings.sampling))
                gen.update({s: (out.token_ids[i], out.logprobs[i], out.texts[i]) for i, s in enumerate(wave)})
                steps.submit({s: gen[s][2] for s in wave})
            beat("rollout", f"{tag}turn {turn}: env steps of {len(live)} episodes")
            results = steps.results()
        finally:
            steps.close()
        still = []
        for s in live:
            res = results[s]
            t = trajs[s]
            if res.env_error:
                t.env_error = True
                t.info["error"] = res.error[-500:]
                finished += 1
                bar.update(1)
                continue
            valid = bool(res.info["valid"])
            penalty = 0.0 if valid else settings.invalid_penalty
            t.steps.append(StepSample(
                prompt_ids=ids[s], response_ids=gen[s][0], response_logprobs=gen[s][1],
                response_text=gen[s][2], prompt_text=fitted[s][0], raw_observation=last_obs[s],
                valid=valid, reward=float(res.reward) + penalty, penalty=penalty,
                action=str(res.info["action_text"]), prompt_tokens=len(full[s])))
            last_obs[s] = res.info.get("raw_observation", res.observation)
            if res.done or turn + 1 >= settings.max_steps:
                t.won = bool(res.info["won"])
                t.episode_reward = float(sum(st.reward for st in t.steps))
                t.final_observation = last_obs[s]
                for key in ("score", "task_type"):
                    if key in res.info:
                        t.info[key] = res.info[key]
                wins += int(t.won)
                finished += 1
                bar.update(1)
            else:
                candidates[s] = [shown(v, episodes[s][0]) for v in (res.prompt, *res.prompt_variants)]
                still.append(s)
        live = still
        turn += 1
        bar.set_postfix(turn=turn, live=len(live), success=f"{wins / max(finished, 1):.2f}")
    bar.close()
    return list(trajs.values())
