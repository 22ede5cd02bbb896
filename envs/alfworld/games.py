"""Listing the ALFWorld games of a split (standard library only).

Layout (as `alfworld-download` leaves it, and as the xz archives unpack):

    <data_dir>/json_2.1.1/<split>/<task dir>/<trial>/game.tw-pddl

The task type is the prefix of ``<task dir>`` (e.g. ``pick_heat_then_place_in_recep-Mug-None-
SideTable-3`` -> ``heat``). A task is a JSON-serialisable dict
``{"task_id", "game_file", "task_type", "split"}`` with ``task_id = "<split>/<task dir>/<trial>"``
and ``game_file`` an absolute path.

Where the games come from (`find_data_dir`): a directory given (``env.data_dir``), else
``$ALFWORLD_DATA`` (alfworld's convention, filled by ``alfworld-download``), else -- when the
caller allows it (``env.vendored_data``) -- the subset vendored in ``envs/alfworld/data/`` (3 games
per task type and split, ``game.tw-pddl`` files only), unpacked once under the cache root
(`envs.cache.cache_root`, ``$SEED_JAX_CACHE``) by `vendored_data_dir`.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tarfile
import tempfile
from pathlib import Path

from seed_jax.envs.cache import cache_root

DATA_ENV_VAR = "ALFWORLD_DATA"
GAME_FILENAME = "game.tw-pddl"
JSON_DIR = "json_2.1.1"
VENDORED_ARCHIVE = Path(__file__).resolve().parent / "data" / f"alfworld_{JSON_DIR}_subset.tar.xz"
# games per split in the official ALFWorld release (what `alfworld-download` unpacks); the paper
# preset needs at least these many (the vendored subset has 18 per split)
FULL_COUNTS = {"train": 3553, "valid_seen": 140, "valid_unseen": 134}
# importing the `alfworld` package sets $ALFWORLD_DATA to this (created, empty) folder when unset
ALFWORLD_PACKAGE_DEFAULT = Path("~/.cache/alfworld").expanduser()

# Directory-name prefix (ALFRED task type) -> short task type used for per-type success.
TASK_TYPES: dict[str, str] = {
    "pick_and_place_simple": "pick",
    "look_at_obj_in_light": "look",
    "pick_clean_then_place_in_recep": "clean",
    "pick_heat_then_place_in_recep": "heat",
    "pick_cool_then_place_in_recep": "cool",
    "pick_two_obj_and_place": "pick_two",
}

# Split names on disk; `valid_seen` is the "seen" evaluation set, `valid_unseen` the "unseen" one.
SPLITS = ("train", "valid_seen", "valid_unseen", "valid_train")
SPLIT_ALIASES = {
    "seen": "valid_seen",
    "unseen": "valid_unseen",
    "eval_in_distribution": "valid_seen",
    "eval_out_of_distribution": "valid_unseen",
}


def resolve_data_dir(data_dir: str | os.PathLike | None = None) -> Path:
    """The ALFWorld data directory: `data_dir` if given, else ``$ALFWORLD_DATA``.

    Raises ValueError when neither is set and FileNotFoundError when the directory is missing.
    """
    if data_dir is None:
        data_dir = os.environ.get(DATA_ENV_VAR)
    if not data_dir:
        raise ValueError(
            f"no ALFWorld data directory: pass data_dir=... or set ${DATA_ENV_VAR} "
            f"(the folder that holds {JSON_DIR}/)"
        )
    path = Path(data_dir).expanduser().resolve()
    if not path.is_dir():
        raise FileNotFoundError(f"ALFWorld data directory {str(path)!r} does not exist")
    return path


def canonical_split(split: str) -> str:
    """Map a split name or alias ('seen', 'unseen', ...) to its directory name."""
    name = SPLIT_ALIASES.get(split, split)
    if name not in SPLITS:
        raise ValueError(f"unknown ALFWorld split {split!r}; expected one of {SPLITS} or {tuple(SPLIT_ALIASES)}")
    return name


def task_type_of(task_dir_name: str) -> str:
    """Short task type from a task directory name, e.g. 'pick_cool_then_place_in_recep-Egg-...' -> 'cool'."""
    prefix = task_dir_name.split("-", 1)[0]
    if prefix not in TASK_TYPES:
        raise ValueError(
            f"unknown ALFWorld task type {prefix!r} in directory {task_dir_name!r}; "
            f"expected one of {tuple(TASK_TYPES)}"
        )
    return TASK_TYPES[prefix]


def _unsupported(task_dir_name: str) -> bool:
    """ALFWorld drops movable-receptacle and sliced-object tasks (no TextWorld support)."""
    return "movable" in task_dir_name or "Sliced" in task_dir_name


def list_games(data_dir: str | os.PathLike | None, split: str, task_types: tuple[str, ...] | None = None) -> list[dict]:
    """All games of `split` as task dicts, sorted by task_id.

    `task_types` (short names, e.g. ("pick", "heat")) keeps only those types. Raises
    FileNotFoundError when the split directory is missing or holds no game.
    """
    split = canonical_split(split)
    root = resolve_data_dir(data_dir) / JSON_DIR / split
    if not root.is_dir():
        raise FileNotFoundError(
            f"ALFWorld split directory {str(root)!r} is missing (unpack the split with extract_split?)"
        )
    if task_types is not None:
        unknown = set(task_types) - set(TASK_TYPES.values())
        if unknown:
            raise ValueError(f"unknown task types {sorted(unknown)}; expected some of {tuple(TASK_TYPES.values())}")
    tasks = []
    for game in root.glob(f"*/*/{GAME_FILENAME}"):
        trial_dir = game.parent
        task_dir = trial_dir.parent.name
        if _unsupported(task_dir):
            continue
        task_type = task_type_of(task_dir)
        if task_types is not None and task_type not in task_types:
            continue
        tasks.append(
            {
                "task_id": f"{split}/{task_dir}/{trial_dir.name}",
                "game_file": str(game),
                "task_type": task_type,
                "split": split,
            }
        )
    if not tasks:
        raise FileNotFoundError(f"no {GAME_FILENAME} under {str(root)!r}")
    return sorted(tasks, key=lambda t: t["task_id"])


def load_walkthrough(game_file: str | os.PathLike) -> list[str] | None:
    """The expert command list stored in a game file (its ``walkthrough`` field), or None."""
    with open(game_file, encoding="utf-8") as f:
        data = json.load(f)
    walkthrough = data.get("walkthrough")
    return list(walkthrough) if walkthrough else None


def extract_split(data_dir: str | os.PathLike | None, split: str, dest: str | os.PathLike) -> Path:
    """Unpack ``<data_dir>/archives/alfworld_json_2.1.1_<split>.tar.xz`` into `dest`.

    Afterwards ``list_games(dest, split)`` lists the full split. Members must lie under
    ``json_2.1.1/<split>/`` (anything else raises). Already-present files are overwritten.
    Returns `dest` as a Path.
    """
    split = canonical_split(split)
    archive = resolve_data_dir(data_dir) / "archives" / f"alfworld_{JSON_DIR}_{split}.tar.xz"
    if not archive.is_file():
        raise FileNotFoundError(f"ALFWorld archive {str(archive)!r} is missing")
    dest = Path(dest).expanduser().resolve()
    dest.mkdir(parents=True, exist_ok=True)
    prefix = f"{JSON_DIR}/{split}"
    with tarfile.open(archive, "r:xz") as tar:
        members = tar.getmembers()
        for m in members:
            name = m.name.rstrip("/")
            if not (name == prefix or name.startswith(prefix + "/")) or ".." in Path(name).parts:
                raise ValueError(f"unexpected member {m.name!r} in {str(archive)!r}")
            if not (m.isfile() or m.isdir()):
                raise ValueError(f"member {m.name!r} of {str(archive)!r} is not a plain file or folder")
        tar.extractall(dest, members=members, filter="data")
    return dest


def count_games(data_dir: str | os.PathLike, split: str) -> int:
    """Number of ``game.tw-pddl`` files under ``<data_dir>/json_2.1.1/<split>/*/*/`` (0 when absent)."""
    root = Path(data_dir) / JSON_DIR / canonical_split(split)
    return sum(1 for _ in root.glob(f"*/*/{GAME_FILENAME}")) if root.is_dir() else 0


def _unpack(archive: Path, dest: Path) -> None:
    """Unpack `archive` (members under ``json_2.1.1/`` only, plain files and folders) into `dest`."""
    with tarfile.open(archive, "r:xz") as tar:
        members = tar.getmembers()
        for m in members:
            parts = Path(m.name).parts
            if not parts or parts[0] != JSON_DIR or ".." in parts or not (m.isfile() or m.isdir()):
                raise ValueError(f"unexpected member {m.name!r} in {str(archive)!r}")
        tar.extractall(dest, members=members, filter="data")


def vendored_data_dir(root: str | os.PathLike | None = None, archive: str | os.PathLike = VENDORED_ARCHIVE) -> Path:
    """The vendored subset as an ALFWorld data directory, unpacked on first use.

    It lands in ``<root>/alfworld/<archive stem>-<sha256[:12]>/`` (``root`` defaults to
    `envs.cache.cache_root`); a new archive gets a new folder. The unpacking goes to a temporary
    folder renamed into place, so a reader never sees half a subset.
    """
    archive = Path(archive)
    if not archive.is_file():
        raise FileNotFoundError(f"vendored ALFWorld subset {str(archive)!r} is missing (a broken install?)")
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()[:12]
    base = Path(root) if root is not None else cache_root()
    dest = base / "alfworld" / f"{archive.name.split('.')[0]}-{digest}"
    if (dest / JSON_DIR).is_dir():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".unpack-", dir=dest.parent))
    try:
        _unpack(archive, tmp)
        try:
            os.replace(tmp, dest)
        except OSError:  # another process put it in place first
            if not (dest / JSON_DIR).is_dir():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def find_data_dir(data_dir: str | os.PathLike | None = None, vendored: bool = True,
                  environ: dict | None = None) -> tuple[Path | None, str]:
    """``(directory, where it came from)``: `data_dir` ('env.data_dir'), else ``$ALFWORLD_DATA``,
    else (``vendored``) the vendored subset; ``(None, why)`` when none applies. A directory named
    but absent is returned as is (the caller reports it). ``$ALFWORLD_DATA`` naming alfworld's
    default folder without games counts as unset: ``import alfworld`` (the engine) sets it so."""
    env = os.environ if environ is None else environ
    if data_dir:
        return Path(data_dir).expanduser(), "env.data_dir"
    value = env.get(DATA_ENV_VAR)
    if value and Path(value).expanduser() == ALFWORLD_PACKAGE_DEFAULT and not (ALFWORLD_PACKAGE_DEFAULT / JSON_DIR).is_dir():
        value = None  # set by `import alfworld` in this process (the engine), not by the user
    if value:
        return Path(env[DATA_ENV_VAR]).expanduser(), f"${DATA_ENV_VAR}"
    if vendored:
        return vendored_data_dir(), f"the vendored subset ({VENDORED_ARCHIVE.name}, 18 games per split)"
    return None, f"neither env.data_dir nor ${DATA_ENV_VAR} is set"
