"""Search-augmented QA (docs/METHOD.md §5): `python -m seed_jax.launch --config=configs/search.py[:preset]`."""

from __future__ import annotations

from seed_jax.configs.base import base_config, with_preset
from seed_jax.envs.search import SEARCH_R1_EVAL_SPLITS


def get_config(preset: str = "local"):
    c = base_config()
    c.env.name = "search"
    c.env.retriever = "bm25"  # bm25 (embedded) | http (Search-R1 retrieval server)
    c.env.corpus = ""  # jsonl corpus for bm25; '' = vendored HotpotQA + wiki sample
    c.env.retriever_url = ""  # e.g. http://127.0.0.1:8000/retrieve
    c.env.datasets = {}  # split name -> data file (Search-R1 parquet, HotpotQA json, jsonl)
    c.env.data_dir = ""  # Search-R1's layout: <data_dir>/nq_hotpotqa_train/train.parquet, <data_dir>/nq/test.parquet ...
    c.env.vendored_data = True  # train / hotpotqa use the vendored 80/20 HotpotQA sample when no file is set
    c.env.eval_splits = ("hotpotqa",)
    c.env.default_eval_size = 20
    c.rollout.max_steps = 4
    c.rollout.max_prompt_tokens = 4096
    c.rollout.max_teacher_prompt_tokens = 4608
    c.train.c_kl = 0.001
    c.train.c_ent = 0.0
    return with_preset(
        c, preset,
        # the 135M policy needs the format warm-up (docs/METHOD.md §2.4) and room for a <think> and a
        # question-long query; two turns (search, then answer) as the warm-up shows; the answer
        # turn's prompt (question + 3 HotpotQA passages) is 372-905 SmolLM2 tokens: a 1024 cap keeps
        # the question in it (512 cut it from 80% of them); evaluation takes the whole vendored
        # held-out split (20 questions)
        local=dict(stage1_tasks=8, max_steps=2, prompt_tokens=1024, analysis_prompt_tokens=512, eval_tasks=20,
                   response_tokens=64, format_warmup_tasks=16),
        # the paper trains on Search-R1's NQ + HotpotQA data and evaluates on seven QA test sets:
        # their files are required (env.data_dir), never the vendored sample
        paper={"env.retriever": "http", "env.retriever_url": "http://127.0.0.1:8000/retrieve",
               "env.vendored_data": False, "env.eval_splits": SEARCH_R1_EVAL_SPLITS,
               "stage1.num_tasks": 180, "rl.tasks_per_update": 128, "rl.mini_batch_size": 512,
               "train.schedule": "warmup_constant", "train.warmup_updates": 15,  # warm-up: 10% of 150 updates
               # micro-batches, analyzer calls and the 128 x 8 rollouts' waves are the plan's choice
               # (-1 from the paper settings); on v5e-8 that was 8-row micro-batches, 16 analyzer
               # prompts per call and 32 rollout rows per host (README plans)
               },
        tiny={"rollout.max_steps": 2, "stage1.format_warmup_tasks": 2})
