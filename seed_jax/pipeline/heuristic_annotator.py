"""A model-free stage-1 analyzer: template skills from the trajectory itself.

For smoke tests and tiny models that cannot write JSON yet. A success gives a workflow that
lists the valid actions in order; a failure gives an avoidance rule naming the first invalid
response (or, if all were valid, the action repeated most). The answer is the same JSON as a
real analyzer's, so the SFT path is exercised unchanged.
"""

from __future__ import annotations

from collections import Counter

from seed_jax.skills import SkillParse, is_success


def heuristic_skill(traj, success_threshold: float) -> SkillParse:
    actions = [s.action or s.response_text.strip()[-60:] for s in traj.steps if s.valid]
    if is_success(traj, success_threshold):
        order = " -> ".join(a for a in actions[:8]) or "answer directly"
        return SkillParse(f"Solved '{traj.task_description[:80]}' in {len(traj.steps)} steps.",
                          f"Follow this order of actions for such tasks: {order}.", True, "")
    bad = next((i for i, s in enumerate(traj.steps) if not s.valid), None)
    if bad is not None:
        skill = (f"Avoid malformed responses: at step {bad + 1} the reply had no single valid action block; "
                 "always end with exactly one well-formed action tag.")
    else:
        common = Counter(actions).most_common(1)
        what = common[0][0] if common else "the same action"
        skill = f"Avoid repeating '{what}' without progress; try a different action when nothing changes."
    return SkillParse(f"Failed '{traj.task_description[:80]}' after {len(traj.steps)} steps.", skill, True, "")
