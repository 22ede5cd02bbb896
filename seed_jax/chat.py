"""Chat with a policy in the terminal: ``python -m seed_jax.chat DIR [--temperature T] [--max_new_tokens N]``.

``DIR`` is a Hugging Face model directory (``python -m seed_jax.export``, a run's
``rl/final_model`` or ``sft/model``) or a ``.gguf`` file. Each line read from standard input is
one user message; the reply, generated with the project's own sampler (`seed_jax.sampling.generate`)
on the conversation so far in the model's chat template, is printed as one block followed by a
blank line. ``/reset`` starts a new conversation; ``/quit`` or end of input ends.

Sampling follows the directory's ``generation_config.json`` as transformers reads it: greedy
unless ``do_sample`` is true, then its ``temperature``, ``top_p`` and ``top_k`` (transformers'
defaults 1.0, 1.0, 50 where absent); generation stops at its ``eos_token_id`` too. Flags override.
A ``repetition_penalty`` is not applied (the sampler has none).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Sequence
from typing import TextIO

from seed_jax.models import Model, load_model, load_tokenizer
from seed_jax.sampling import SamplingParams, generate

DEFAULT_MAX_NEW_TOKENS = 256


def sampling_from_generation_config(gen: dict, max_new_tokens: int | None = None,
                                    temperature: float | None = None) -> SamplingParams:
    """The `SamplingParams` transformers' ``generate`` would use for ``gen`` (a generation_config
    dict): ``temperature = gen.temperature if gen.do_sample else 0`` (greedy), ``top_p``,
    ``top_k`` (0 disables it), ``max_new_tokens`` (default `DEFAULT_MAX_NEW_TOKENS`); the
    arguments given replace those values."""
    sample = bool(gen.get("do_sample", False))
    temp = float(gen.get("temperature") or 1.0) if sample else 0.0
    return SamplingParams(
        max_new_tokens=int(max_new_tokens or gen.get("max_new_tokens") or DEFAULT_MAX_NEW_TOKENS),
        temperature=temp if temperature is None else temperature,
        top_p=float(gen.get("top_p") or 1.0) if sample else 1.0,
        top_k=int(gen.get("top_k", 50) or 0) if sample else 0)


def with_generation_eos(model: Model, gen: dict) -> Model:
    """``model`` stopping at the generation config's EOS ids as well as its own."""
    eos = gen.get("eos_token_id")
    eos = [] if eos is None else (list(eos) if isinstance(eos, (list, tuple)) else [eos])
    ids = tuple(sorted(set(model.config.eos_token_ids) | {int(e) for e in eos}))
    return dataclasses.replace(model, config=model.config.replace(eos_token_ids=ids))


def chat(model: Model, tok, sp: SamplingParams, stdin: TextIO, stdout: TextIO, *, system: str | None = None,
         seed: int = 0, prompt: str = "") -> list[dict]:
    """The REPL loop; returns the conversation (``[{"role", "content"}, ...]``) at the end."""
    messages: list[dict] = []
    turn = 0
    while True:
        if prompt:
            stdout.write(prompt)
            stdout.flush()
        line = stdin.readline()
        if not line or line.strip() == "/quit":
            break
        text = line.rstrip("\n")
        if text.strip() == "/reset":
            messages = []
            stdout.write("(new conversation)\n\n")
            continue
        if not text.strip():
            continue
        messages.append({"role": "user", "content": text})
        head = [{"role": "system", "content": system}] if system else []
        ids = tok.apply_chat_template(head + messages, tokenize=True, add_generation_prompt=True)
        ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
        out = generate(model, tok, [list(ids)], seed=seed + turn, **dataclasses.asdict(sp))
        reply = out.texts[0]
        messages.append({"role": "assistant", "content": reply})
        stdout.write(reply + "\n\n")
        stdout.flush()
        turn += 1
    return messages


def main(argv: Sequence[str] | None = None, stdin: TextIO | None = None, stdout: TextIO | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m seed_jax.chat", description=__doc__.split("\n\n")[0])
    ap.add_argument("model", help="Hugging Face model directory or .gguf file")
    ap.add_argument("--temperature", type=float, default=None, help="0 = greedy (default: generation_config.json)")
    ap.add_argument("--max_new_tokens", type=int, default=None,
                    help=f"tokens per reply (default: generation_config.json, else {DEFAULT_MAX_NEW_TOKENS})")
    ap.add_argument("--system", default=None, help="a system message")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"), help="compute dtype")
    args = ap.parse_args(argv)
    stdin, stdout = stdin or sys.stdin, stdout or sys.stdout
    try:
        model = load_model(args.model, dtype=args.dtype, param_dtype=args.dtype)
        tok = load_tokenizer(args.model)
        gen = model.generation_config or {}
        sp = sampling_from_generation_config(gen, args.max_new_tokens, args.temperature)
    except (FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    chat(with_generation_eos(model, gen), tok, sp, stdin, stdout, system=args.system, seed=args.seed,
         prompt="> " if stdin.isatty() else "")
    return 0


if __name__ == "__main__":
    sys.exit(main())
