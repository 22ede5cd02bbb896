"""The household world: catalogue, symbolic state, admissible commands and their effects.

Pure functions over an immutable `WorldState`; the environment (`env.py`) and the expert
planner (`expert.py`) share them. Rules (ALFWorld's, simplified):

- the agent starts in the middle of the room (``location == ''``) and can ``go to R`` any
  receptacle other than the one it stands at; arriving shows what is on an open surface, or
  whether a container (fridge, microwave, cabinet, drawer) is open and, if so, what is in it;
- ``open R`` / ``close R`` at a closed / open container; ``take O from R`` when the hands are
  empty, the agent is at R and R is a surface or an open container holding O; ``put O in/on R``
  likewise for the held object (one object at a time);
- at sinkbasin / microwave / fridge the held object can be cleaned / heated / cooled (no need
  to open the appliance): clean sets `clean`; heat sets `hot` and clears `cool`; cool sets
  `cool` and clears `hot`;
- ``look`` and ``inventory`` are always admissible and change nothing.

Any other command is not admissible: the environment answers 'Nothing happens.' and the state
does not change. Observation sentences follow ALFWorld's grammar ('You arrive at fridge 1.
The fridge 1 is closed.'); lists read 'a apple 1, a egg 1, and a mug 1' (ALFWorld's article).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

TASK_TYPES: tuple[str, ...] = ("pick", "clean", "heat", "cool")

# receptacle kinds
OPENABLE_KINDS = frozenset({"fridge", "microwave", "cabinet", "drawer"})
SURFACE_KINDS = frozenset({"countertop", "diningtable", "shelf", "sidetable", "sinkbasin", "garbagecan"})
RECEPTACLE_KINDS = tuple(sorted(OPENABLE_KINDS | SURFACE_KINDS))
# appliance receptacle (instance name) and the verb of each processing task type
APPLIANCE = {"clean": "sinkbasin 1", "heat": "microwave 1", "cool": "fridge 1"}
VERB_OF_APPLIANCE_KIND = {"sinkbasin": "clean", "microwave": "heat", "fridge": "cool"}
PROPERTY_OF_TYPE = {"clean": "clean", "heat": "hot", "cool": "cool"}  # adjective in the task sentence
# object kinds and the task types they can appear in ('pick' for all)
OBJECT_TASKS: dict[str, tuple[str, ...]] = {
    "apple": ("pick", "clean", "heat", "cool"),
    "tomato": ("pick", "clean", "heat", "cool"),
    "potato": ("pick", "clean", "heat", "cool"),
    "egg": ("pick", "heat", "cool"),
    "lettuce": ("pick", "clean", "cool"),
    "bread": ("pick", "heat", "cool"),
    "mug": ("pick", "clean", "heat", "cool"),
    "cup": ("pick", "clean", "heat", "cool"),
    "plate": ("pick", "clean", "heat", "cool"),
    "bowl": ("pick", "clean", "heat", "cool"),
    "pan": ("pick", "clean", "cool"),
    "pot": ("pick", "clean", "cool"),
    "knife": ("pick", "clean"),
    "fork": ("pick", "clean"),
    "spoon": ("pick", "clean"),
    "spatula": ("pick", "clean"),
    "winebottle": ("pick", "cool"),
    "soapbar": ("pick", "clean"),
    "sponge": ("pick",),
    "kettle": ("pick", "clean"),
}
OBJECT_KINDS = tuple(OBJECT_TASKS)
# receptacle kinds a task may name as its target
TARGET_KINDS = ("cabinet", "countertop", "diningtable", "drawer", "fridge", "microwave", "shelf", "sidetable")

NOTHING_HAPPENS = "Nothing happens."
MIDDLE = "You are in the middle of a room."


def kind_of(name: str) -> str:
    """'cabinet 2' -> 'cabinet'."""
    return name.rsplit(" ", 1)[0]


def is_openable(receptacle: str) -> bool:
    return kind_of(receptacle) in OPENABLE_KINDS


def task_sentence(task_type: str, obj_kind: str, target_kind: str) -> str:
    """'put a hot apple in countertop.' (pick: 'put a apple in countertop.')."""
    adjective = PROPERTY_OF_TYPE.get(task_type)
    what = f"{adjective} {obj_kind}" if adjective else obj_kind
    return f"put a {what} in {target_kind}."


def join_items(names: Sequence[str]) -> str:
    """ALFWorld list: [] -> 'nothing'; ['x'] -> 'a x'; ['x','y'] -> 'a x, and a y'; 3+ -> 'a x, a y, and a z'."""
    items = [f"a {n}" for n in names]
    if not items:
        return "nothing"
    if len(items) == 1:
        return items[0]
    return ", ".join(items[:-1]) + ", and " + items[-1]


@dataclasses.dataclass(frozen=True)
class Layout:
    """Static facts of one episode: receptacles (sorted), object names, the task."""

    receptacles: tuple[str, ...]
    objects: tuple[str, ...]
    task_type: str
    target_object: str  # e.g. 'apple 1'
    target_kind: str  # receptacle kind of the goal, e.g. 'countertop'

    @property
    def required_property(self) -> str:
        """'' for pick, else 'clean' / 'hot' / 'cool'."""
        return PROPERTY_OF_TYPE.get(self.task_type, "")


@dataclasses.dataclass(frozen=True)
class WorldState:
    """Dynamic state. `positions` maps every object not held to its receptacle (sorted pairs);
    `props` lists (object, property) pairs that hold; `opened` the open containers."""

    location: str
    holding: str
    positions: tuple[tuple[str, str], ...]
    opened: frozenset[str]
    props: frozenset[tuple[str, str]]

    @staticmethod
    def initial(objects: Mapping[str, str], opened: Sequence[str] = ()) -> WorldState:
        return WorldState("", "", tuple(sorted(objects.items())), frozenset(opened), frozenset())

    def where(self, obj: str) -> str:
        """Receptacle of `obj` ('' when held or unknown)."""
        for o, r in self.positions:
            if o == obj:
                return r
        return ""

    def contents(self, receptacle: str) -> list[str]:
        return sorted(o for o, r in self.positions if r == receptacle)

    def fingerprint(self) -> str:
        """A canonical string of the whole state (for equality checks in tests and logs)."""
        return repr((self.location, self.holding, self.positions, tuple(sorted(self.opened)),
                     tuple(sorted(self.props))))


def accessible(state: WorldState, receptacle: str) -> bool:
    """Objects can be taken from / put into `receptacle`: a surface, or an open container."""
    return not is_openable(receptacle) or receptacle in state.opened


def describe_receptacle(state: WorldState, receptacle: str) -> str:
    """ALFWorld's examineReceptacle sentence for `receptacle`."""
    if is_openable(receptacle):
        if receptacle not in state.opened:
            return f"The {receptacle} is closed."
        return f"The {receptacle} is open. In it, you see {join_items(state.contents(receptacle))}."
    return f"On the {receptacle}, you see {join_items(state.contents(receptacle))}."


def room_description(layout: Layout) -> str:
    return f"{MIDDLE} Looking quickly around you, you see {join_items(layout.receptacles)}."


def goal_reached(layout: Layout, state: WorldState) -> bool:
    """The target object lies in a receptacle of the target kind and has the required property."""
    where = state.where(layout.target_object)
    if not where or kind_of(where) != layout.target_kind:
        return False
    prop = layout.required_property
    return not prop or (layout.target_object, prop) in state.props


def _with_prop(props: frozenset, obj: str, verb: str) -> frozenset:
    """clean: +clean; heat: +hot -cool; cool: +cool -hot."""
    out = set(props)
    if verb == "clean":
        out.add((obj, "clean"))
    elif verb == "heat":
        out.discard((obj, "cool"))
        out.add((obj, "hot"))
    elif verb == "cool":
        out.discard((obj, "hot"))
        out.add((obj, "cool"))
    return frozenset(out)


def transitions(layout: Layout, state: WorldState) -> dict[str, tuple[WorldState, str]]:
    """Every admissible command -> (next state, feedback text). Keys are the admissible commands."""
    out: dict[str, tuple[WorldState, str]] = {}
    here = state.location
    for r in layout.receptacles:
        if r != here:
            nxt = dataclasses.replace(state, location=r)
            out[f"go to {r}"] = (nxt, f"You arrive at {r}. {describe_receptacle(nxt, r)}")
    if here:
        if is_openable(here):
            if here in state.opened:
                out[f"close {here}"] = (dataclasses.replace(state, opened=state.opened - {here}),
                                        f"You close the {here}.")
            else:
                nxt = dataclasses.replace(state, opened=state.opened | {here})
                out[f"open {here}"] = (nxt, f"You open the {here}. {describe_receptacle(nxt, here)}")
        if accessible(state, here):
            if not state.holding:
                for obj in state.contents(here):
                    positions = tuple(p for p in state.positions if p[0] != obj)
                    out[f"take {obj} from {here}"] = (
                        dataclasses.replace(state, holding=obj, positions=positions),
                        f"You pick up the {obj} from the {here}.")
            else:
                obj = state.holding
                positions = tuple(sorted(state.positions + ((obj, here),)))
                out[f"put {obj} in/on {here}"] = (
                    dataclasses.replace(state, holding="", positions=positions),
                    f"You put the {obj} in/on the {here}.")
        verb = VERB_OF_APPLIANCE_KIND.get(kind_of(here))
        if verb and state.holding:
            obj = state.holding
            out[f"{verb} {obj} with {here}"] = (
                dataclasses.replace(state, props=_with_prop(state.props, obj, verb)),
                f"You {verb} the {obj} using the {here}.")
    if here:
        look = f"You are facing the {here}. Next to it, you see nothing."
    else:
        look = room_description(layout)
    out["look"] = (state, look)
    inv = f"You are carrying: a {state.holding}." if state.holding else "You are not carrying anything."
    out["inventory"] = (state, inv)
    return out


def admissible_commands(layout: Layout, state: WorldState) -> list[str]:
    """Sorted admissible commands of `state`."""
    return sorted(transitions(layout, state))
