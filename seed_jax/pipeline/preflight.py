"""Preflight: the inputs a run reads, checked from the file system before any model loads.

Each check returns None or one line naming the config key and what is wrong; `preflight_problems`
runs them all (data, model, URLs) (`seed_jax.pipeline.validate.check_inputs` raises the first as a `ConfigValueError`,
which the launcher prints as one line and exits 2):

- ``model.path``: a Hugging Face directory needs ``config.json``, weights (``*.safetensors``,
  or the shards its ``model.safetensors.index.json`` lists) and tokenizer files (``tokenizer.json``,
  ``tokenizer.model`` or ``tokenizer_config.json``; in ``model.tokenizer`` when that is set);
  a ``.gguf`` file carries all three;
- URLs (``env.retriever_url`` of an http retriever, ``stage1.openai_base_url``): an
  ``http(s)://host[:port]`` form, no request made (`validate.check_retriever` asks the retriever);
- the benchmark's data (`seed_jax.pipeline.environments.missing_data`): Search-R1's files, the
  ALFWorld games, the WebShop files, for every preset; the WebShop ``paper`` preset also needs
  ``env.human_goals`` (the paper's goals are the human instructions).

Standard library and the environments' data look-ups only: no JAX, no model code.
"""

from __future__ import annotations

import urllib.parse
from pathlib import Path

from seed_jax.models.weights import WeightLoadError, safetensors_files
from seed_jax.pipeline.environments import missing_data

TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "tokenizer_config.json")
URL_KEYS = ("env.retriever_url", "stage1.openai_base_url")


def _get(config, dotted: str, default=None):
    node = config
    try:
        for part in dotted.split("."):
            node = node[part]
    except (KeyError, AttributeError, TypeError):
        return default
    return node


def missing_weights(model_dir: Path) -> str | None:
    """What a Hugging Face model directory lacks for its weights, or None (the loader's own
    lookup, `seed_jax.models.weights.safetensors_files`)."""
    if not (model_dir / "config.json").is_file():
        return "no config.json"
    try:
        safetensors_files(model_dir)
    except WeightLoadError as e:
        return str(e)
    return None


def check_model(config) -> str | None:
    """``model.path`` / ``model.tokenizer``: weights and tokenizer files present (None: fine, or the
    embedded model). A path that does not exist is `validate.check_inputs`'s own message."""
    path, tok = _get(config, "model.path"), _get(config, "model.tokenizer")
    if path:
        p = Path(str(path)).expanduser()
        if p.is_dir():
            why = missing_weights(p)
            if why:
                return f"config.model.path: {p} is not a usable model directory: {why}"
        elif p.is_file() and p.suffix != ".gguf":
            return f"config.model.path: {p} is a file; expected a Hugging Face model directory or a .gguf file"
    tok_dir = Path(str(tok)).expanduser() if tok else (Path(str(path)).expanduser() if path else None)
    if tok_dir is not None and tok_dir.is_dir() and not any((tok_dir / f).is_file() for f in TOKENIZER_FILES):
        key = "model.tokenizer" if tok else "model.path"
        return f"config.{key}: {tok_dir} has no tokenizer files ({' / '.join(TOKENIZER_FILES)})"
    return None


def url_problem(url: str) -> str | None:
    """Why ``url`` is not an ``http(s)://host[:port][/path]`` URL, or None."""
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 (raises ValueError for a port that is not a number in range)
    except ValueError as e:
        return f"malformed URL ({e})"
    if parts.scheme not in ("http", "https"):
        return f"expected an http:// or https:// URL (scheme {parts.scheme or 'missing'!r})"
    if not parts.hostname:
        return "no host name"
    if any(c.isspace() for c in url):
        return "contains white space"
    return None


def check_urls(config) -> str | None:
    """The URL-valued keys that a run will use, checked for form (no request)."""
    for key in URL_KEYS:
        url = _get(config, key)
        if key == "env.retriever_url" and _get(config, "env.retriever") == "http" and not url:
            return "config.env.retriever_url: env.retriever=http needs a URL, e.g. http://127.0.0.1:8000/retrieve"
        if url:
            why = url_problem(str(url))
            if why:
                return f"config.{key}: {url!r}: {why}"
    return None


def check_data(config, preset: str | None = None) -> str | None:
    """The benchmark's data files for every preset (`environments.missing_data`)."""
    env = config.env
    if env.name == "webshop" and preset == "paper" and not _get(config, "env.human_goals", False):
        return ("config.env.human_goals: the WebShop paper preset evaluates on the human instructions "
                "(items_human_ins.json); set it True")
    missing = missing_data(env)
    return f"config.env.data_dir: {missing}" if missing else None


def preflight_problems(config, preset: str | None = None) -> list[str]:
    """Every problem the checks above find, one line each (empty: the run may start)."""
    return [p for p in (check_data(config, preset), check_model(config), check_urls(config)) if p]
