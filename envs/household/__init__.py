"""A small procedurally generated household environment in ALFWorld's style (pure Python).

- `make_tasks(split, n, seed, config)` -> JSON task dicts (`tasks`); splits 'seen' / 'unseen'
  hold out (task type, object, target) combinations;
- `HouseholdEnv` / `make_household_env` (`env`): the `envs.base.Environment` contract, with
  the exact expert's optimal next actions in every step's info (`expert`);
- `annotate_episode` / `annotate_json` / `annotate_trajectory` (`annotator`): the scripted
  analyzer writing {"episode_summary", "episode_skill"} from the expert's view;
- `household_spec` / `household_splits` / `household_scripted_answer` (`splits`): the
  benchmark read from an env config: spec, train / seen / unseen task splits, and the expert's
  analysis of a trajectory as JSON text.
"""

from seed_jax.envs.household.annotator import (
                                      EpisodeRecord,
                                      StepAudit,
                                      annotate_episode,
                                      annotate_json,
                                      annotate_trajectory,
                                      first_deviation,
                                      replay,
                                      start_place_seen,
)
from seed_jax.envs.household.env import HOUSEHOLD_SPEC, HouseholdEnv, make_household_env
from seed_jax.envs.household.expert import ExpertResult, solve
from seed_jax.envs.household.splits import (
                                      BENCHMARK_SPLITS,
                                      household_scripted_answer,
                                      household_spec,
                                      household_splits,
                                      household_task_config,
)
from seed_jax.envs.household.tasks import (
                                      SPLITS,
                                      HouseholdConfig,
                                      all_combinations,
                                      combinations,
                                      generate_task,
                                      load_task,
                                      make_tasks,
                                      split_of,
)
from seed_jax.envs.household.world import TASK_TYPES

__all__ = [
    "EpisodeRecord", "StepAudit", "annotate_episode", "annotate_json", "annotate_trajectory", "first_deviation",
    "replay", "start_place_seen", "HOUSEHOLD_SPEC", "HouseholdEnv", "make_household_env", "ExpertResult", "solve", "SPLITS",
    "HouseholdConfig", "all_combinations", "combinations", "generate_task", "load_task", "make_tasks", "split_of",
    "TASK_TYPES", "BENCHMARK_SPLITS", "household_scripted_answer", "household_spec", "household_splits",
    "household_task_config",
]
