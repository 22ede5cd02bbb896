"""ALFWorld (docs/METHOD.md §5): `python -m seed_jax.launch --config=configs/alfworld.py[:preset]`.

The ``paper`` preset is `base_config` as it stands: 30 steps, 2048 prompt tokens, 16 tasks per
update, mini-batches of 256 step-samples, on the full ALFWorld release (``$ALFWORLD_DATA`` or
``env.data_dir``, envs/alfworld/README.md). ``local`` and ``tiny`` run on the subset vendored in
envs/alfworld/data (18 games per split) when neither names a directory.
"""

from __future__ import annotations

from seed_jax.configs.base import base_config, with_preset


def get_config(preset: str = "local"):
    c = base_config()
    c.env.name = "alfworld"
    c.env.data_dir = ""  # '' = $ALFWORLD_DATA (<dir>/json_2.1.1/<split>/<task>/<trial>/game.tw-pddl)
    c.env.vendored_data = True  # neither set: the vendored subset (3 games per task type and split)
    return with_preset(
        c, preset,
        # the 135M policy needs the format warm-up (docs/METHOD.md §2.4: 12 training games played by
        # their expert walkthroughs); 1024-token prompts hold every walkthrough turn's prompt with the
        # past steps that fit (fewest 510, most 1015 SmolLM2 tokens over the vendored training games)
        local=dict(stage1_tasks=6, max_steps=6, prompt_tokens=1024, analysis_prompt_tokens=1024, eval_tasks=6,
                   format_warmup_tasks=12),
        # x_tau of a 30-step episode (~600 tokens a step; Qwen2.5: 32k context, 4k new tokens)
        # 24,576-token analyzer prompts, as many per self-analysis call as the plan finds room for
        # (-1 from the paper settings; each host samples on its own devices: 8 on a 4-chip v5e host,
        # 2 rows per chip, 32 needed 25.7 GB; README plans)
        # the full release is required (3553 / 140 / 134 games), never the vendored subset
        paper={"analysis.max_prompt_tokens": 24576, "env.vendored_data": False})
