"""Tokenizer and chat template through `transformers` (the model's own template)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

from seed_jax.models.model import resolve_model_path


def load_tokenizer(path=None):
    """A `transformers` tokenizer for a HF directory, a ``.gguf`` file, or (None) the embedded model.

    Left padding is set, as batched generation needs; a missing pad token falls back to EOS.
    """
    from transformers import AutoTokenizer  # deferred: importing it takes seconds

    path = resolve_model_path(path)
    if path.is_file() and path.suffix == ".gguf":
        tok = _gguf_tokenizer(path)
    else:
        if not any((path / f).exists() for f in ("tokenizer.json", "tokenizer.model", "tokenizer_config.json")):
            raise FileNotFoundError(f"{path}: no tokenizer files (tokenizer.json / tokenizer.model)")
        tok = AutoTokenizer.from_pretrained(str(path), trust_remote_code=False)
    tok.padding_side = "left"
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return tok


def _cache_dir() -> Path:
    return Path(os.environ.get("SEED_JAX_CACHE", Path.home() / ".cache" / "seed_jax"))


def _gguf_tokenizer(path: Path):
    """Convert a GGUF's tokenizer once, then reuse the converted copy (keyed by file identity)."""
    from transformers import AutoTokenizer  # deferred: importing it takes seconds

    st = path.stat()
    key = hashlib.sha256(f"{path.resolve()}:{st.st_size}:{st.st_mtime_ns}".encode()).hexdigest()[:16]
    cached = _cache_dir() / "tokenizers" / key
    if (cached / "tokenizer_config.json").exists():
        try:
            return AutoTokenizer.from_pretrained(str(cached))
        except Exception:  # a damaged cache entry is rebuilt below
            pass
    tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    try:
        tmp = cached.with_name(cached.name + f".tmp{os.getpid()}")
        tok.save_pretrained(str(tmp))
        if cached.exists():
            shutil.rmtree(cached)
        os.replace(tmp, cached)
    except OSError:
        pass  # read-only home: fine, just slower next time
    return tok


# the class name transformers >= 5 writes for any tokenizer backed by tokenizer.json, which
# transformers 4.x does not know; its 4.x name loads the same tokenizer.json under both
_PORTABLE_CLASS = {"TokenizersBackend": "PreTrainedTokenizerFast"}


def save_tokenizer(tok, out_dir) -> Path:
    """``tok.save_pretrained(out_dir)``, written so that transformers 4.50 and later load it too.

    ``tokenizer_config.json`` names a tokenizer class every version knows (transformers 5's
    generic ``TokenizersBackend`` becomes ``PreTrainedTokenizerFast``) and carries the chat
    template inline as well (versions before ``chat_template.jinja`` files read it there).
    """
    out_dir = Path(out_dir)
    tok.save_pretrained(str(out_dir))
    f = out_dir / "tokenizer_config.json"
    if not f.exists():
        return out_dir
    cfg = json.loads(f.read_text())
    cfg["tokenizer_class"] = _PORTABLE_CLASS.get(cfg.get("tokenizer_class"), cfg.get("tokenizer_class"))
    template = out_dir / "chat_template.jinja"
    if "chat_template" not in cfg and template.exists():
        cfg["chat_template"] = template.read_text()
    f.write_text(json.dumps(cfg, indent=2, ensure_ascii=False))
    return out_dir


def apply_chat(tok, user_text: str, system: str | None = None) -> str:
    """The chat-templated prompt string for one user message, ready for generation."""
    messages = ([{"role": "system", "content": system}] if system else []) + [
        {"role": "user", "content": user_text}]
    return tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
