"""External stage-1 analyzer: any OpenAI-compatible chat endpoint (temperature 0).

``POST {base_url}/chat/completions {"model", "messages", "temperature": 0}`` with the key from
an environment variable; bounded retries on transport errors; the repair turns of
docs/METHOD.md §2.2 are done by `seed_jax.skills.annotate`.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request


class AnnotatorError(RuntimeError):
    """The annotation endpoint could not be reached or answered nonsense."""


class OpenAIChat:
    def __init__(self, base_url: str, model: str, api_key_env: str = "OPENAI_API_KEY", timeout: float = 120.0,
                 max_retries: int = 3, max_tokens: int = 1024):
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model, self.timeout, self.max_retries, self.max_tokens = model, timeout, max_retries, max_tokens
        self.key = os.environ.get(api_key_env, "")

    def __call__(self, messages: list[dict]) -> str:
        body = json.dumps({"model": self.model, "messages": messages, "temperature": 0,
                           "max_tokens": self.max_tokens}).encode()
        headers = {"Content-Type": "application/json"}
        if self.key:
            headers["Authorization"] = f"Bearer {self.key}"
        last = None
        for attempt in range(self.max_retries + 1):
            try:
                req = urllib.request.Request(self.url, body, headers, method="POST")
                with urllib.request.urlopen(req, timeout=self.timeout) as r:
                    data = json.loads(r.read())
                return str(data["choices"][0]["message"]["content"] or "")
            except urllib.error.HTTPError as e:
                if e.code < 500 and e.code != 429:
                    raise AnnotatorError(f"{self.url}: HTTP {e.code}: {e.read()[:300]!r}") from None
                last = e
            except (urllib.error.URLError, TimeoutError, ConnectionError) as e:
                last = e
            except (KeyError, IndexError, ValueError) as e:
                raise AnnotatorError(f"{self.url}: unexpected response: {e}") from None
            time.sleep(min(8.0, 0.5 * 2 ** attempt))
        raise AnnotatorError(f"{self.url} unreachable after {self.max_retries + 1} attempts: {last}")
