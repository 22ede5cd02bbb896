"""Stage 1 of a run rehearsed on a real accelerator: collect, annotate and SFT of a randomly
initialised model of a ``config.json`` shape (default Qwen2.5-1.5B, no download; the vocabulary is
the embedded tokenizer's), with each phase's measured device memory printed beside the residency
plan of the same config (`seed_jax.pipeline.residency`)::

    python bench/gpu_rehearsal.py [--model=tests/data/plan_models/qwen2.5-1.5b] [--out=/tmp/rehearsal]

Per phase: the live bytes of the fullest device (``jax.live_arrays``), the planned resident
bytes per device, and the device's peak so far (``memory_stats()['peak_bytes_in_use']``, which
adds the phase's program temporaries). The weights load straight into the mesh's layout
(``mesh.fsdp = -1``: every device of this machine), float32 master, bfloat16 compute.

Needs an accelerator; on CPU it refuses unless ``--allow_cpu`` with a small shape
(``--layers=2 --hidden=64``: the smoke test that keeps it working).
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

from absl import app, flags

_MODEL = flags.DEFINE_string("model", "tests/data/plan_models/qwen2.5-1.5b", "Directory with a config.json")
_OUT = flags.DEFINE_string("out", "/tmp/seed_jax_rehearsal", "Run directory (made anew)")
_LAYERS = flags.DEFINE_integer("layers", 0, "Override the layer count (0: the config's)")
_HIDDEN = flags.DEFINE_integer("hidden", 0, "Override the width (0: the config's; heads scale with it)")
_ALLOW_CPU = flags.DEFINE_bool("allow_cpu", False, "Run on CPU (smoke test only)")


def main(argv):
    import shutil

    import jax

    from seed_jax.configs.search import get_config
    from seed_jax.launch import run_pipeline
    from seed_jax.models import ModelConfig
    from seed_jax.pipeline import runtime
    from seed_jax.pipeline.residency import RESIDENCY_FILE

    if jax.default_backend() == "cpu" and not _ALLOW_CPU.value:
        print("error: no accelerator (pass --allow_cpu for a smoke run)", file=sys.stderr)
        return 2
    shape = ModelConfig.from_hf(json.loads((Path(_MODEL.value) / "config.json").read_text()))
    if _HIDDEN.value:
        shape = dataclasses.replace(shape, hidden_size=_HIDDEN.value, intermediate_size=2 * _HIDDEN.value,
                                    num_heads=4, num_kv_heads=2, head_dim=_HIDDEN.value // 4)
    if _LAYERS.value:
        shape = dataclasses.replace(shape, num_layers=_LAYERS.value)

    def model_config(config, tokenizer) -> ModelConfig:  # the shape, over the embedded tokenizer's vocabulary
        eos = tuple(sorted({tokenizer.eos_token_id} - {None}))
        m = config.model
        return dataclasses.replace(shape, vocab_size=len(tokenizer), eos_token_ids=eos,
                                   bos_token_id=tokenizer.bos_token_id, dtype=m.dtype, param_dtype=m.param_dtype,
                                   remat=m.remat, attention=m.attention)

    runtime.random_model_config = model_config
    config = get_config("tiny")
    config.method = "seed"
    config.model.dtype, config.model.param_dtype = "bfloat16", "float32"
    config.mesh.data, config.mesh.fsdp = 1, -1
    config.stage1.sft_micro_batch_size = config.stage1.sft_batch_size
    workdir = Path(_OUT.value)
    shutil.rmtree(workdir, ignore_errors=True)
    run_pipeline(config, workdir, stages="collect,annotate,sft")
    lines = [json.loads(x) for x in (workdir / RESIDENCY_FILE).read_text().splitlines()]
    print(f"devices: {len(jax.devices())} x {jax.devices()[0].device_kind}; model {shape.num_layers} layers x "
          f"{shape.hidden_size}")
    print(f"{'phase':12s} {'measured MB':>12s} {'planned MB':>12s} {'ratio':>6s} {'device peak MB':>15s}")
    for line in lines:
        measured = max(line["measured"].values())
        peak = max(line.get("device_peak", {}).values(), default=float("nan"))
        print(f"{line['phase']:12s} {measured / 2**20:12.1f} {line['planned'] / 2**20:12.1f} "
              f"{measured / max(line['planned'], 1):6.2f} {peak / 2**20:15.1f}")
    return 0


if __name__ == "__main__":
    app.run(lambda argv: sys.exit(main(argv)))
