"""WebShop (docs/METHOD.md §5): `python -m seed_jax.launch --config=configs/webshop.py[:preset]`.

Data (envs/webshop/README.md): the official files in ``env.data_dir`` or ``$SEED_WEBSHOP_DATA``
(``items_shuffle_1000.json`` or ``items_shuffle.json``, ``items_ins_v2*.json``,
``items_human_ins.json``), or single files in ``env.catalog_path`` / ``env.goals_path``. The
``paper`` preset requires them and the human goals; ``local`` and ``tiny`` without them run on a
catalog GENERATED in the official schema from the vendored ``items_ins_v2_1000.json`` (named as
generated in the run's log, summary and report).
"""

from __future__ import annotations

from seed_jax.configs.base import base_config, with_preset


def get_config(preset: str = "local"):
    c = base_config()
    c.env.name = "webshop"
    c.env.data_dir = ""  # '' = $SEED_WEBSHOP_DATA: the official files (envs/webshop/data.py)
    c.env.catalog_path = ""  # items_shuffle file; '' = in data_dir, else the generated catalog
    c.env.goals_path = ""  # items_ins_v2 file; '' = in data_dir, else the vendored copy
    c.env.human_goals = False  # goals from items_human_ins.json (the paper's) instead of the synthetic ones
    c.env.vendored_data = True  # the generated catalog / vendored attributes may stand in
    c.rollout.max_steps = 15
    c.rollout.max_prompt_tokens = 4096
    c.rollout.max_teacher_prompt_tokens = 4608
    c.rl.mini_batch_size = 64
    return with_preset(
        c, preset,
        # the 135M policy needs the format warm-up (docs/METHOD.md §2.4: 24 training goals bought by
        # a script that searches the request, opens the product, picks its options); the search turn's
        # response is up to 67 tokens; 1024-token prompts: a results page of 10 products can be longer
        # even without past steps (4% of the warm-up's turns), then it is cut from the left
        local=dict(stage1_tasks=6, max_steps=5, prompt_tokens=1024, analysis_prompt_tokens=1024, eval_tasks=6,
                   response_tokens=72, format_warmup_tasks=24),
        # x_tau of a 15-step episode with product pages (Qwen2.5: 32k context, 4k new tokens)
        # the official files and human goals are required, never the generated catalog
        paper={"eval.num_tasks": 128, "analysis.max_prompt_tokens": 24576,  # as ALFWorld's
               "env.vendored_data": False, "env.human_goals": True})
