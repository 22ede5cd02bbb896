"""ALFWorld on the real TextWorld engine (``alfworld`` + ``textworld[pddl]``).

Game listing (`games`) needs only the standard library; the engine (`engine`, `env`) imports
``textworld`` and ``alfworld`` when the first game is loaded.
"""

from seed_jax.envs.alfworld.env import ALFWORLD_SPEC, AlfWorldEnv, make_alfworld_env
from seed_jax.envs.alfworld.games import (
    SPLITS,
    TASK_TYPES,
    extract_split,
    list_games,
    load_walkthrough,
    resolve_data_dir,
    task_type_of,
)

__all__ = [
    "ALFWORLD_SPEC",
    "AlfWorldEnv",
    "make_alfworld_env",
    "SPLITS",
    "TASK_TYPES",
    "extract_split",
    "list_games",
    "load_walkthrough",
    "resolve_data_dir",
    "task_type_of",
]
