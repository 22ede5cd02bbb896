"""Where WebShop's data files come from (standard library only).

A directory in the official layout (princeton-nlp/WebShop ``data/``, what its ``setup.sh`` downloads):

    <dir>/items_shuffle_1000.json   products (1000; or the full items_shuffle.json)
    <dir>/items_ins_v2_1000.json    asin -> attributes and synthetic instruction (or items_ins_v2.json)
    <dir>/items_human_ins.json      asin -> human instructions (the paper's goals)

is named by ``env.data_dir``, else ``$SEED_WEBSHOP_DATA``. ``env.catalog_path`` / ``env.goals_path``
name single files and win over the directory. Without a products file the environment runs on a
catalog GENERATED in the official schema (`envs.webshop.generate`: real asins and attributes,
invented names, prices and options) -- allowed only with ``env.vendored_data`` (local, tiny,
tests), and named as generated wherever a run reports its data (`WebShopData.describe`). Without
an attributes file, ``vendored_data`` reads the copy vendored in ``envs/webshop/data/``
(``items_ins_v2_1000.json.gz``, byte-identical to the official file once unpacked).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path

DATA_ENV_VAR = "SEED_WEBSHOP_DATA"
VENDORED_ATTRIBUTES = Path(__file__).resolve().parent / "data" / "items_ins_v2_1000.json.gz"
CATALOG_FILES = ("items_shuffle_1000.json", "items_shuffle.json")
ATTRIBUTE_FILES = ("items_ins_v2_1000.json", "items_ins_v2.json")
HUMAN_FILE = "items_human_ins.json"
LAYOUT = (f"expected <dir>/{CATALOG_FILES[0]} (or {CATALOG_FILES[1]}), <dir>/{ATTRIBUTE_FILES[0]} (or "
          f"{ATTRIBUTE_FILES[1]}), <dir>/{HUMAN_FILE} (princeton-nlp/WebShop's data/, see envs/webshop/README.md) "
          f"with <dir> = env.data_dir or ${DATA_ENV_VAR}")


@dataclasses.dataclass(frozen=True)
class WebShopData:
    """The files one WebShop configuration reads; ``catalog_path`` None = the generated catalog."""

    catalog_path: str | None
    goals_path: str
    human_goals_path: str | None = None
    human_goals: bool = False

    @property
    def generated(self) -> bool:
        return self.catalog_path is None

    def env_kwargs(self) -> dict:
        """Keyword arguments of `envs.webshop.env.make_webshop_env` / `load_goals`."""
        return {"catalog_path": self.catalog_path, "goals_path": self.goals_path,
                "human_goals_path": self.human_goals_path, "human_goals": self.human_goals}

    def describe(self) -> str:
        """One line for logs, run summaries and reports."""
        goals = f"human goals {self.human_goals_path}" if self.human_goals else "synthetic goals"
        if self.generated:
            return (f"WebShop GENERATED catalog (invented products in the official schema, envs/webshop/generate.py; "
                    f"not the official items_shuffle), attributes {self.goals_path}, {goals}")
        return f"WebShop official catalog {self.catalog_path}, attributes {self.goals_path}, {goals}"


def _first(folder: Path | None, names: tuple[str, ...]) -> str | None:
    if folder is None:
        return None
    return next((os.fspath(folder / n) for n in names if (folder / n).is_file()), None)


def find_webshop_data(data_dir: str = "", catalog_path: str = "", goals_path: str = "", human_goals: bool = False,
                      vendored: bool = True, environ: Mapping[str, str] | None = None
                      ) -> tuple[WebShopData | None, str | None]:
    """``(data, None)`` when the configuration has its files, else ``(None, one-line reason)``.

    ``vendored`` False (the paper preset) needs the official products, attributes and human
    instructions; True lets the generated catalog and the vendored attributes stand in."""
    env = os.environ if environ is None else environ
    folder_s, where = (data_dir, "env.data_dir") if data_dir else (env.get(DATA_ENV_VAR, ""), f"${DATA_ENV_VAR}")
    folder = Path(folder_s).expanduser() if folder_s else None
    if folder is not None and not folder.is_dir():
        return None, f"WebShop data directory {folder} ({where}) does not exist; {LAYOUT}"
    catalog = catalog_path or _first(folder, CATALOG_FILES)
    goals = goals_path or _first(folder, ATTRIBUTE_FILES) or (
        os.fspath(VENDORED_ATTRIBUTES) if vendored else None)
    human = _first(folder, (HUMAN_FILE,))
    need = {"products (items_shuffle)": catalog or vendored, "attributes (items_ins_v2)": goals,
            "human instructions (items_human_ins)": human or not (human_goals or not vendored)}
    missing = [what for what, ok in need.items() if not ok]
    if missing:
        looked = f"{folder} ({where})" if folder is not None else f"no directory (neither env.data_dir nor ${DATA_ENV_VAR} set)"
        why = "" if vendored else " (env.vendored_data=False: the paper preset needs the official files)"
        return None, f"WebShop data missing{why}: {', '.join(missing)}; looked in {looked}; {LAYOUT}"
    return WebShopData(catalog or None, goals, human, bool(human_goals)), None
