"""WebShop (docs/METHOD.md §5): `python -m seed_jax.launch --config=configs/webshop.py[:preset]`.

Without the official catalog (``env.catalog_path``) the environment runs on a catalog
generated in the official schema from the real ``items_ins_v2_1000.json``.
"""

from __future__ import annotations

from seed_jax.configs.base import base_config, with_preset


def get_config(preset: str = "local"):
    c = base_config()
    c.env.name = "webshop"
    c.env.catalog_path = ""
    c.env.goals_path = ""
    c.rollout.max_steps = 15
    c.rollout.max_prompt_tokens = 4096
    c.rollout.max_teacher_prompt_tokens = 4608
    c.rl.mini_batch_size = 64
    return with_preset(
        c, preset,
        local=dict(stage1_tasks=6, max_steps=5, prompt_tokens=768, analysis_prompt_tokens=1024, eval_tasks=6),
        # x_tau of a 15-step episode with product pages (Qwen2.5: 32k context, 4k new tokens)
        paper={"eval.num_tasks": 128, "analysis.max_prompt_tokens": 24576})  # as ALFWorld's
