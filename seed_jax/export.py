"""Export an RL checkpoint as a Hugging Face model directory, ready for transformers and vLLM.

``python -m seed_jax.export --workdir=runs/s [--step=N] --out=DIR [--dtype=auto] [--force]``

Reads the run's ``config.json`` and its orbax checkpoints ``<workdir>/rl/ckpt/<step>/``
(`seed_jax.pipeline.run` documents the layout; checkpoint n is saved after RL update n, counted
from 1, the newest when ``--step`` is not given) and writes to ``DIR``:

- ``model.safetensors`` (or shards) and ``config.json`` in ``--dtype``: ``auto`` is the base
  model's own dtype (``torch_dtype`` of ``model.path``'s config.json, so a bfloat16 model is
  written in bfloat16), else the run's ``model.param_dtype``;
- ``generation_config.json``: the base model's (EOS ids, sampling defaults; for a GGUF model
  the ids in its metadata), carried through stage-1 SFT unchanged;
- the tokenizer and chat template, loadable by transformers 4.50 and later.

Serve it with ``vllm serve DIR`` or try it with ``python -m seed_jax.chat DIR``. Restoring reads
the whole train state (parameters and optimizer moments). A missing run directory, config or
checkpoint exits with code 2 and one line saying what is wrong.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import jax
import ml_collections
from etils import epath

from seed_jax.paths import run_path
from seed_jax.pipeline.methods import switches
from seed_jax.pipeline.runtime import load_policy, save_policy, train_config
from seed_jax.train.checkpoint import Checkpointer
from seed_jax.train.mesh import make_mesh
from seed_jax.train.state import abstract_train_state, state_shardings

DTYPES = ("auto", "float32", "bfloat16", "float16")


class ExportError(ValueError):
    """The run directory, checkpoint or output directory cannot be used (exit code 2)."""


def run_config(workdir: epath.Path) -> ml_collections.ConfigDict:
    """The resolved config a run directory was launched with (its ``config.json``)."""
    f = workdir / "config.json"
    if not workdir.is_dir():
        raise ExportError(f"--workdir {workdir}: no such directory")
    if not f.exists():
        raise ExportError(f"{f}: missing (not a seed_jax run directory)")
    try:
        return ml_collections.ConfigDict(json.loads(f.read_text()))
    except ValueError as e:
        raise ExportError(f"{f}: invalid JSON: {e}") from None


def stored_dtype(config) -> str:
    """``auto``'s dtype: the ``torch_dtype`` (or ``dtype``) of ``model.path``'s config.json when it
    names one of `DTYPES`, else the run's ``model.param_dtype``."""
    path = config.model.path
    if path and not config.model.random_init:
        f = Path(path).expanduser() / "config.json"
        if f.is_file():
            hf = json.loads(f.read_text())
            name = hf.get("torch_dtype") or hf.get("dtype")
            if name in DTYPES[1:]:
                return name
    return config.model.param_dtype


def export_checkpoint(workdir, out, step: int | None = None, dtype: str = "auto", force: bool = False) -> epath.Path:
    """Write checkpoint ``step`` (None: the newest) of run ``workdir`` as a HF directory ``out``."""
    workdir, out = run_path(workdir), run_path(out)  # either may be a gs:// URL
    if dtype not in DTYPES:
        raise ExportError(f"--dtype {dtype!r}: expected one of {', '.join(DTYPES)}")
    config = run_config(workdir)
    ckpt_dir = workdir / "rl" / "ckpt"
    if not ckpt_dir.is_dir():
        raise ExportError(f"{ckpt_dir}: no RL checkpoints (the rl stage has not saved one yet)")
    if out.exists() and any(out.iterdir()) and not force:
        raise ExportError(f"--out {out} exists and is not empty; pick a new directory or pass --force")
    if workdir.is_relative_to(out):
        raise ExportError(f"--out {out} would replace the run directory")
    with Checkpointer(ckpt_dir, max_to_keep=None) as ckpt:
        steps = ckpt.all_steps()
        if not steps:
            raise ExportError(f"{ckpt_dir}: no RL checkpoints (the rl stage has not saved one yet)")
        step = steps[-1] if step is None else step
        if step not in steps:
            raise ExportError(f"--step {step}: no such checkpoint in {ckpt_dir}; there are {steps}")
        policy, state = _restore(config, workdir, ckpt, step)
    policy = policy.with_params(state.params, version=step, source=f"{ckpt_dir / str(step)}")
    del state
    save_policy(policy, out, stored_dtype(config) if dtype == "auto" else dtype)
    return out


def _restore(config, workdir: epath.Path, ckpt: Checkpointer, step: int):
    """(policy without parameters, train state of checkpoint ``step``)."""
    # the policy the RL stage started from: its config, tokenizer and generation_config
    start = workdir / "sft" / "model" if switches(config).sft else None
    mesh = make_mesh()
    policy = load_policy(config, start, mesh=mesh).with_params(None)  # the checkpoint's parameters replace these
    tc = train_config(config)
    abstract = abstract_train_state(policy.config, tc)
    target = jax.tree_util.tree_map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
                                    abstract, state_shardings(abstract, mesh))
    state, _ = ckpt.restore(step, target)
    return policy, state


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m seed_jax.export",
                                 description="Write an RL checkpoint of a run as a Hugging Face model directory.")
    ap.add_argument("--workdir", required=True, help="the run directory (holds config.json and rl/ckpt/)")
    ap.add_argument("--step", type=int, default=None, help="checkpoint step (default: the newest)")
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--dtype", default="auto", choices=DTYPES,
                    help="weights dtype (auto: the base model's own, else the run's model.param_dtype)")
    ap.add_argument("--force", action="store_true", help="replace a non-empty --out")
    args = ap.parse_args(argv)
    try:
        out = export_checkpoint(args.workdir, args.out, args.step, args.dtype, args.force)
    except (ExportError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {out}\n  serve: vllm serve {out}\n  chat:  python -m seed_jax.chat {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
