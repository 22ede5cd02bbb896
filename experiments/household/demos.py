"""Noisy expert demonstrations of the household environment (the stage-0 behaviour-cloning data).

One demonstration plays a task with `envs.household.HouseholdEnv`. At every step, with
probabilities ``invalid``, ``noise``, ``nothing`` and the rest, the demonstrator sends

- an invalid response (no action block, or two blocks): the env charges the penalty;
- a random admissible command that is *not* one of the expert's optimal commands (a detour);
- (probability ``nothing``) a well-formed command that is not admissible ('Nothing happens.');
- a uniformly drawn optimal command of the exact expert (`envs.household.expert`).

Every response reads ``<think>{task sentence} {subgoal}</think><action>{command}</action>``
(without the task sentence when ``restate_task`` is False), the subgoal being what the agent
can know from its own view (`subgoal_text`): 'find the apple', 'take the apple', 'heat the
apple', 'put the apple in countertop', 'put down the mug'. The expert is
omniscient (it knows where hidden objects are), so a policy cloned from it must guess where to
search: the cloned policy sits at a middling success rate.

With ``search`` the demonstrator is not omniscient while it looks for the task object: until
it has seen the object (stood at its receptacle with the receptacle open, or held it), its
intended command is `search_command` (open the closed container it stands at if it has not
looked inside, else go to a uniformly drawn receptacle it has not looked into, never one of the
target kind, where tasks never hide the object). Those search steps are detours by the
expert's standard (``consistent`` False) unless the draw happens to hit the object's place, as
an agent's own search would be; the noise draws above still apply on top.

Each step also records the expert's response at that state (``expert_response``), which the
skill-reading examples of stage 0 use (see `experiments.household.bc`). A `Demo` converts to the
pipeline's `Trajectory` (for x_tau) and to the scripted annotator's `EpisodeRecord`.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Sequence

from seed_jax.envs.household import EpisodeRecord, HouseholdEnv, annotate_episode
from seed_jax.envs.household.tasks import load_task
from seed_jax.envs.household.world import APPLIANCE, Layout, WorldState, accessible, kind_of
from seed_jax.rollout.trajectory import StepSample, Trajectory

_VERB = {"clean": "clean", "heat": "heat", "cool": "cool"}


def respond(think: str, action: str) -> str:
    """The response format of docs/METHOD.md §5: ``<think>t</think><action>a</action>``."""
    return f"<think>{think}</think><action>{action}</action>"


def invalid_response(think: str, action: str, rng: random.Random) -> str:
    """An invalid response: the action block missing, or duplicated."""
    if rng.random() < 0.5:
        return f"<think>{think}</think>{action}"
    return f"<think>{think}</think><action>{action}</action><action>{action}</action>"


def subgoal_text(layout: Layout, state: WorldState) -> str:
    """The agent-visible subgoal of `state` (the thinking text of a response).

    holding the task object: '<verb> the X' until it has the required property, then
    'put the X in <target kind>'; holding something else: 'put down the Y'; the task object
    in sight (the agent stands at its receptacle and can reach in): 'take the X'; else
    'find the X'.
    """
    obj = layout.target_object
    name = kind_of(obj)
    if state.holding == obj:
        prop = layout.required_property
        if prop and (obj, prop) not in state.props:
            return f"{_VERB[layout.task_type]} the {name}"
        return f"put the {name} in {layout.target_kind}"
    if state.holding:
        return f"put down the {kind_of(state.holding)}"
    where = state.where(obj)
    if where and state.location == where and accessible(state, where):
        return f"take the {name}"
    return f"find the {name}"


def subgoal_verb(response: str) -> str:
    """The first word of the response's subgoal ('find', 'take', 'put', 'heat', ...): the word
    after the task sentence in ``<think>{task sentence} {subgoal}</think>`` ('' if none)."""
    if "<think>" not in response:
        return ""
    think = response.split("<think>", 1)[1].split("</think>", 1)[0]
    words = think.rsplit(".", 1)[-1].split()
    return words[0] if words else ""


def search_command(layout: Layout, state: WorldState, inspected: set[str], rng: random.Random) -> str:
    """The searching demonstrator's command while it has not seen the task object: 'open R' at
    a closed container R it has not looked into, else 'go to R' for a uniformly drawn receptacle
    R it has not looked into, not of the target kind and not where it stands ('' when none is
    left: the caller falls back to the expert)."""
    here = state.location
    if here and here not in inspected and not accessible(state, here):
        return f"open {here}"
    left = [r for r in layout.receptacles
            if r not in inspected and r != here and kind_of(r) != layout.target_kind]
    return f"go to {rng.choice(left)}" if left else ""


def subgoal_texts() -> list[str]:
    """Every subgoal sentence pattern's words (tokenizer corpus)."""
    return ["find the take the put down the put the in", *(f"{v} the" for v in _VERB.values()),
            *APPLIANCE.values()]


@dataclasses.dataclass(frozen=True)
class DemoStep:
    prompt: str  # the env's prompt text h_t (user message, before chat templating)
    response: str  # what the demonstrator sent
    expert_response: str  # an optimal response at this state (same subgoal text)
    action: str  # parsed command ('' when invalid)
    valid: bool
    consistent: bool  # the command was one of the expert's optimal commands
    raw_observation: str  # observation shown at this step
    penalty: float


@dataclasses.dataclass(frozen=True)
class Demo:
    task: dict
    steps: tuple[DemoStep, ...]
    won: bool
    final_observation: str

    def record(self) -> EpisodeRecord:
        return EpisodeRecord(task=self.task, actions=tuple(s.action for s in self.steps), won=self.won)

    def skill(self, include_plan: bool = False) -> str:
        """The scripted analyzer's hindsight skill of this demonstration."""
        return annotate_episode(self.record(), include_plan)["episode_skill"]

    def to_trajectory(self, traj_id: str = "") -> Trajectory:
        """A `Trajectory` (no token ids) for `seed_jax.skills.build_analyzer_prompt`."""
        steps = [StepSample(prompt_ids=[], response_ids=[], response_logprobs=[], response_text=s.response,
                            prompt_text=s.prompt, raw_observation=s.raw_observation, valid=s.valid,
                            reward=10.0 if (self.won and i == len(self.steps) - 1) else 0.0,
                            penalty=s.penalty, action=s.action)
                 for i, s in enumerate(self.steps)]
        return Trajectory(task_id=self.task["task_id"], group_id=0, traj_id=traj_id or self.task["task_id"],
                          task_description=self.task["task_description"], steps=steps,
                          episode_reward=10.0 if self.won else 0.0, won=self.won,
                          final_observation=self.final_observation, info={"task_type": self.task["task_type"]})


def non_admissible_commands(layout: Layout, state: WorldState, admissible: Sequence[str]) -> list[str]:
    """Well-formed commands that are not admissible at `state` (each answered 'Nothing happens.'):
    going where the agent stands, taking any object from any receptacle, opening / closing any
    receptacle, minus the admissible ones."""
    cands = [f"go to {state.location}"] if state.location else []
    for r in layout.receptacles:
        cands += [f"open {r}", f"close {r}"] + [f"take {o} from {r}" for o in layout.objects]
    adm = set(admissible)
    return sorted(c for c in set(cands) if c not in adm)


def noisy_episode(task: dict, rng: random.Random, noise: float, invalid: float, max_steps: int,
                  history_window: int, restate_task: bool = True, nothing: float = 0.0,
                  search: bool = False) -> Demo:
    """One demonstration of `task` (see the module docstring); deterministic given `rng`'s state.

    ``nothing``: probability of a well-formed but non-admissible command
    (`non_admissible_commands`), so the clone also sees recoveries from 'Nothing happens.'.
    ``search``: the demonstrator searches for the task object (`search_command`) instead of
    going straight to it."""
    if not (0 <= noise and 0 <= invalid and 0 <= nothing and noise + invalid + nothing <= 1):
        raise ValueError(f"need noise, invalid, nothing >= 0 with a sum <= 1; got {noise}, {invalid}, {nothing}")
    layout, _ = load_task(task)
    env = HouseholdEnv(max_steps=max_steps, history_window=history_window)
    obs, info = env.reset(task)
    steps: list[DemoStep] = []
    raw = info["raw_observation"]
    done = False
    inspected: set[str] = set()  # receptacles the demonstrator has looked into
    seen = False  # it has seen the task object
    while not done:
        prompt = env.build_prompt()
        state = env.state
        if state.location and accessible(state, state.location):
            inspected.add(state.location)
        seen = seen or state.holding == layout.target_object or state.where(layout.target_object) in inspected
        think = subgoal_text(layout, state)
        if restate_task:
            think = f"{task['task_description']} {think}"
        optimal = env.expert_actions()
        best = rng.choice(optimal)
        intended = best
        if search and not seen and not state.holding:
            intended = search_command(layout, state, inspected, rng) or best
        r = rng.random()
        if r < invalid:
            response = invalid_response(think, best, rng)
        elif r < invalid + noise:
            detours = [a for a in env.admissible_commands if a not in optimal]
            response = respond(think, rng.choice(detours) if detours else best)
        elif r < invalid + noise + nothing:
            response = respond(think, rng.choice(non_admissible_commands(layout, state, env.admissible_commands)))
        else:
            response = respond(think, intended)
        obs, reward, done, info = env.step(response)
        steps.append(DemoStep(prompt=prompt, response=response, expert_response=respond(think, best),
                              action=info["action_text"], valid=info["valid"], consistent=info["expert_consistent"],
                              raw_observation=raw, penalty=0.0 if info["valid"] else env.spec.invalid_penalty))
        raw = info["raw_observation"]
    return Demo(task=dict(task), steps=tuple(steps), won=bool(info["won"]), final_observation=raw)
