"""The policy as its own analyzer: x_tau -> greedy JSON hindsight skill, batched.

docs/METHOD.md §2.2 and §3.1: after a trajectory ends, the current parameters write one skill for it
with greedy decoding and the same JSON prompt as stage 1; a skill that does not parse (or is
too short) gives that trajectory no OPD signal. An external OpenAI-compatible annotator for
stage 1 lives in `seed_jax.pipeline.annotator` and uses `seed_jax.skills.annotate`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from tqdm.auto import tqdm

from seed_jax.metrics import progress_enabled
from seed_jax.rollout.trajectory import Trajectory
from seed_jax.sampling import SamplerSpec, generate
from seed_jax.skills import SkillParse, parse_skill, render_analyzer_prompt
from seed_jax.watchdog import beat


def fit_analyzer_prompt(traj: Trajectory, encode_prompt: Callable[[str], list[int]], success_threshold: float,
                        max_prompt_tokens: int, tries: int = 4) -> tuple[str, list[int], bool]:
    """``(x_tau, token ids, cut)`` within ``max_prompt_tokens`` tokens.

    x_tau is rendered at ``3 * max_prompt_tokens`` characters (`render_analyzer_prompt`, which
    cuts from the middle of the trajectory); while its token ids are still too many, it is
    rendered again at ``budget * 0.95 * max_prompt_tokens / len(ids)`` characters (at most
    ``tries`` times), so the header and the first and last steps survive. Only if that fails
    are the ids cut from the left. ``cut``: the text or the ids were shortened.
    """
    budget = 3 * max_prompt_tokens
    text, cut = render_analyzer_prompt(traj, success_threshold, max_chars=budget)
    ids = encode_prompt(text)
    for _ in range(tries):
        if len(ids) <= max_prompt_tokens:
            break
        budget = int(budget * 0.95 * max_prompt_tokens / len(ids))
        text, _ = render_analyzer_prompt(traj, success_threshold, max_chars=budget)
        ids, cut = encode_prompt(text), True
    if len(ids) > max_prompt_tokens:
        ids, cut = ids[-max_prompt_tokens:], True
    return text, ids, cut


def analyze_trajectories(model, tokenizer, trajectories: Sequence[Trajectory], *,
                         encode_prompt: Callable[[str], list[int]], success_threshold: float,
                         params=None, max_new_tokens: int = 512, max_prompt_tokens: int = 4096,
                         batch_size: int = 32, progress: bool = True, sampler: SamplerSpec | None = None
                         ) -> tuple[dict[str, SkillParse], dict[str, str], set[str]]:
    """Greedy skills for every trajectory without env_error (``sampler``: `generate`'s layout).

    Returns ``(parses, prompts, cut)`` keyed by traj_id: ``prompts`` holds x_tau (the SFT
    input), fitted to ``max_prompt_tokens`` by `fit_analyzer_prompt`; ``cut`` the trajectories
    whose x_tau had to be shortened.
    """
    todo = [t for t in trajectories if not t.env_error and t.steps]
    fitted = {t.traj_id: fit_analyzer_prompt(t, encode_prompt, success_threshold, max_prompt_tokens) for t in todo}
    prompts = {k: v[0] for k, v in fitted.items()}
    cut = {k for k, v in fitted.items() if v[2]}
    parses: dict[str, SkillParse] = {}
    bar = tqdm(total=len(todo), desc="analysis", disable=not progress_enabled(progress), leave=False)
    for start in range(0, len(todo), batch_size):
        chunk = todo[start:start + batch_size]
        beat("analysis", f"generating skills {start}-{start + len(chunk)} of {len(todo)}")
        res = generate(model, tokenizer, [fitted[t.traj_id][1] for t in chunk], params=params,
                       max_new_tokens=max_new_tokens, temperature=0.0, sampler=sampler)
        for t, text in zip(chunk, res.texts):
            parses[t.traj_id] = parse_skill(text)
        bar.update(len(chunk))
        bar.set_postfix(parse_rate=f"{sum(p.ok for p in parses.values()) / len(parses):.2f}")
    bar.close()
    return parses, prompts, cut
