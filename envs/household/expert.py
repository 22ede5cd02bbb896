"""Exact expert planner: breadth-first search over the symbolic state.

`solve(layout, state)` returns the goal distance d(s) (fewest commands to win), the set of
optimal next commands {a : 1 + d(next(s, a)) = d(s)} and one optimal plan.

The search runs on an exact abstraction of `WorldState`:
``(location, holding, where the task object is, its properties, open containers)``;
distractor positions are dropped. It leaves out commands that can never start or lie on a
shortest plan, each by a removal argument (deleting the command, plus its matching undo,
from any plan gives a valid plan that is shorter, so no shortest plan contains it):

- ``look`` / ``inventory`` (no effect) and ``close R`` (only removes options; a later
  ``open R`` is then deleted with it);
- ``take D`` of a distractor D (its matching ``put D`` goes too; nothing needs D) and
  processing a distractor (the goal never depends on it);
- ``put O`` of the task object anywhere but where it completes the goal (the later
  ``take O`` that undoes it goes too);
- ``open R`` of a container that neither holds the task object nor is of the target kind,
  unless a distractor is held (then every container may serve to put it down).

Since distractors never enter a shortest plan, d(s) does not depend on where they lie, so
the abstraction is exact. The tests check this against a brute-force search over full states
with every admissible command.

Optimal first commands are collected in one BFS: each state of layer k carries the set of
first commands of the shortest paths reaching it; the union over the goal states of the first
layer holding one is the answer.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

from seed_jax.envs.household.world import VERB_OF_APPLIANCE_KIND, Layout, WorldState, is_openable, kind_of

# abstract state: (location, holding, task-object receptacle ('' when held), props, opened)
_Abstract = tuple[str, str, str, frozenset, frozenset]


@dataclasses.dataclass(frozen=True)
class ExpertResult:
    distance: int  # fewest commands to win (0 when already won)
    actions: tuple[str, ...]  # every optimal next command, sorted
    plan: tuple[str, ...]  # one optimal plan (starts with one of `actions`)


def _abstract(layout: Layout, state: WorldState) -> _Abstract:
    obj = layout.target_object
    props = frozenset(p for o, p in state.props if o == obj)
    return (state.location, state.holding, state.where(obj), props, state.opened)


def _goal(layout: Layout, s: _Abstract) -> bool:
    _, _, where, props, _ = s
    prop = layout.required_property
    return bool(where) and kind_of(where) == layout.target_kind and (not prop or prop in props)


def _processed(props: frozenset, verb: str) -> frozenset:
    if verb == "clean":
        return props | {"clean"}
    if verb == "heat":
        return (props - {"cool"}) | {"hot"}
    return (props - {"hot"}) | {"cool"}


def _successors(layout: Layout, s: _Abstract) -> Iterator[tuple[str, _Abstract]]:
    loc, held, where, props, opened = s
    obj = layout.target_object
    holds_other = bool(held) and held != obj
    for r in layout.receptacles:
        if r != loc:
            yield f"go to {r}", (r, held, where, props, opened)
    if not loc:
        return
    if is_openable(loc) and loc not in opened and (
            holds_other or where == loc or kind_of(loc) == layout.target_kind):
        yield f"open {loc}", (loc, held, where, props, opened | {loc})
    if not is_openable(loc) or loc in opened:
        if not held and where == loc:
            yield f"take {obj} from {loc}", (loc, obj, "", props, opened)
        elif held == obj:
            nxt = (loc, "", loc, props, opened)
            if _goal(layout, nxt):
                yield f"put {obj} in/on {loc}", nxt
        elif holds_other:
            yield f"put {held} in/on {loc}", (loc, "", where, props, opened)
    verb = VERB_OF_APPLIANCE_KIND.get(kind_of(loc))
    if verb and held == obj:
        yield f"{verb} {obj} with {loc}", (loc, held, where, _processed(props, verb), opened)


def solve(layout: Layout, state: WorldState, max_depth: int = 64) -> ExpertResult:
    """Goal distance, all optimal next commands and one optimal plan from `state` (see module doc)."""
    start = _abstract(layout, state)
    if _goal(layout, start):
        return ExpertResult(0, (), ())
    seen = {start}
    layer: dict[_Abstract, set[str]] = {start: set()}
    parent: dict[_Abstract, tuple[_Abstract, str]] = {}
    for depth in range(1, max_depth + 1):
        nxt: dict[_Abstract, set[str]] = {}
        for s, firsts in layer.items():
            for cmd, s2 in _successors(layout, s):
                if s2 in seen:
                    continue
                if s2 not in nxt:
                    nxt[s2] = set()
                    parent[s2] = (s, cmd)
                nxt[s2].update(firsts or {cmd})
        goals = [s for s in nxt if _goal(layout, s)]
        if goals:
            actions = set().union(*(nxt[g] for g in goals))
            plan = []
            s = goals[0]
            while s != start:
                s, cmd = parent[s]
                plan.append(cmd)
            return ExpertResult(depth, tuple(sorted(actions)), tuple(reversed(plan)))
        if not nxt:
            break
        seen.update(nxt)
        layer = nxt
    raise RuntimeError(f"no plan within {max_depth} steps for {layout.target_object} -> {layout.target_kind} "
                       f"from {state.fingerprint()}")


class ExpertCache:
    """Memoised `solve` for one layout (keyed by the abstract state)."""

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self._memo: dict[_Abstract, ExpertResult] = {}

    def __call__(self, state: WorldState) -> ExpertResult:
        key = _abstract(self.layout, state)
        res = self._memo.get(key)
        if res is None:
            res = self._memo[key] = solve(self.layout, state)
        return res
