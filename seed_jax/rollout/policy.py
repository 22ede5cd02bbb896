"""The acting policy of a stage as one typed value, and its scoped sampler copy.

A `Policy` holds what sampling from the model needs: the decoder config, the tokenizer, the prompt
encoder (chat template + token ids) and the parameters with their version (0 = as loaded; the RL
stage counts updates). ``params`` may be sharded over the run's mesh (the master weights of a
train state): the sampler's compute-dtype copy is made from the shards by `Policy.sampling`::

    with policy.sampling(settings.sampler):
        trajs = run_rollouts(pool, policy.model, policy.tokenizer, tasks, settings, ...)
    # the copy is released here: its memory is free for the train step

Every host enters ``sampling`` together when the parameters are sharded over hosts (the copy is
gathered by a collective), `seed_jax.sampling.sampler_scope`.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

from seed_jax.models import Model, ModelConfig
from seed_jax.rollout.loop import make_prompt_encoder
from seed_jax.sampling import SamplerSpec, sampler_scope


@dataclasses.dataclass(frozen=True)
class Policy:
    """Decoder config, tokenizer, prompt encoder and parameters of the policy a stage samples.

    ``version``: which parameters these are (0: as loaded; RL: the number of updates applied);
    ``source``: where they came from (a path, ``"random"``, ``"sft"``, ``"rl"``);
    ``generation_config``: the source's ``generation_config.json`` (kept for `save_policy`).
    """

    config: ModelConfig
    tokenizer: Any
    params: Any
    encode_prompt: Callable[[str], list[int]]
    version: int = 0
    source: str = ""
    generation_config: dict | None = None

    @classmethod
    def of(cls, model: Model, tokenizer, version: int = 0) -> Policy:
        """The policy of a loaded `Model` and its tokenizer (prompts encoded with its chat template)."""
        return cls(model.config, tokenizer, model.params, make_prompt_encoder(tokenizer), version, model.source,
                   model.generation_config)

    @property
    def model(self) -> Model:
        """The `Model` view (config + params) that generation and export take."""
        return Model(self.config, self.params, self.source, self.generation_config)

    @property
    def pad_id(self) -> int:
        return self.tokenizer.pad_token_id or 0

    def with_params(self, params, version: int | None = None, source: str | None = None) -> Policy:
        """The same policy with other parameters (``version`` / ``source`` kept unless given)."""
        return dataclasses.replace(self, params=params, version=self.version if version is None else version,
                                   source=self.source if source is None else source)

    @contextlib.contextmanager
    def sampling(self, sampler: SamplerSpec | None = None) -> Iterator[Policy]:
        """A block in which `generate` on these parameters uses one sampler copy (made on entry,
        released on exit; `seed_jax.sampling.sampler_scope`). Yields the policy itself."""
        if self.params is None:
            raise ValueError("Policy.sampling: the policy holds no parameters")
        with sampler_scope(self.params, self.config, sampler):
            yield self
