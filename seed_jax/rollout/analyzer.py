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
from seed_jax.sampling import generate
from seed_jax.skills import SkillParse, build_analyzer_prompt, parse_skill


def analyze_trajectories(model, tokenizer, trajectories: Sequence[Trajectory], *,
                         encode_prompt: Callable[[str], list[int]], success_threshold: float,
                         params=None, max_new_tokens: int = 512, max_prompt_tokens: int = 4096,
                         batch_size: int = 32, progress: bool = True) -> tuple[dict[str, SkillParse], dict[str, str]]:
    """Greedy skills for every trajectory without env_error.

    Returns ``(parses, prompts)`` keyed by traj_id; ``prompts`` holds x_tau (the SFT input).
    The character budget of x_tau is ~3 characters per prompt token; the token ids are also
    left-truncated to ``max_prompt_tokens`` as a last resort.
    """
    todo = [t for t in trajectories if not t.env_error and t.steps]
    prompts = {t.traj_id: build_analyzer_prompt(t, success_threshold, max_chars=3 * max_prompt_tokens)
               for t in todo}
    parses: dict[str, SkillParse] = {}
    bar = tqdm(total=len(todo), desc="analysis", disable=not progress_enabled(progress), leave=False)
    for start in range(0, len(todo), batch_size):
        chunk = todo[start:start + batch_size]
        ids = [encode_prompt(prompts[t.traj_id])[-max_prompt_tokens:] for t in chunk]
        res = generate(model, tokenizer, ids, params=params, max_new_tokens=max_new_tokens,
                       temperature=0.0)
        for t, text in zip(chunk, res.texts):
            parses[t.traj_id] = parse_skill(text)
        bar.update(len(chunk))
        bar.set_postfix(parse_rate=f"{sum(p.ok for p in parses.values()) / len(parses):.2f}")
    bar.close()
    return parses, prompts
