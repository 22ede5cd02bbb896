"""Projection of a raw model response to an action (docs/METHOD.md §5).

A response is expected as ``<think>...</think>`` followed by one action block such as
``<action>go to desk 1</action>``, ``<search>query</search>`` or ``<answer>text</answer>``.
It is an *invalid action* when the block is missing, duplicated (two blocks), mixed (blocks
of two different accepted kinds), unclosed, or when the response contains CJK characters
anywhere (thinking included, as in the authors' projection functions: the penalty targets
language switching). Text inside ``<think>...</think>`` is ignored when looking for action
blocks, so a model that mentions ``<action>`` while thinking is not penalised for it.

Thinking (`think_spans`), scanning left to right: from a ``<think>`` to the end of the first
``</think>`` after it; a ``<think>`` that is never closed makes the rest of the response
thinking (the model had not finished thinking, so nothing after it is an action). The
sampler's stop strings follow the same rule (`find_stop`): a ``</action>`` written while
thinking does not end the response, so the response the sampler returns holds the action the
parser reads.

Classification, first rule that applies (tags are case-sensitive; an *opening* is any
``<kind>`` outside think, closed or not):

1. opening tags of two or more accepted kinds -> ``mixed``;
2. two or more opening tags of one kind -> ``duplicated``;
3. no opening tag -> ``missing``;
4. the one opening tag has no later ``</kind>`` -> ``unclosed``;
5. a CJK character anywhere in the response -> ``cjk``;
6. the block text is blank -> ``empty``; else valid, text stripped (and lower-cased on request).
"""

from __future__ import annotations

import dataclasses
import re

# Unicode blocks: Hangul Jamo; CJK radicals, Kangxi radicals, ideographic description; CJK
# symbols and punctuation; hiragana, katakana; bopomofo, Hangul compatibility jamo, kanbun,
# strokes, katakana extensions; enclosed CJK and compatibility; CJK ext. A; unified
# ideographs; Hangul Jamo ext. A; Hangul syllables and Jamo ext. B; compatibility ideographs;
# CJK compatibility forms; half-/full-width forms; kana supplements; ideographs of planes 2-3.
_CJK = re.compile(
    "[\u1100-\u11ff\u2e80-\u2fff\u3000-\u303f\u3040-\u30ff\u3100-\u31ff\u3200-\u33ff"
    "\u3400-\u4dbf\u4e00-\u9fff\ua960-\ua97f\uac00-\ud7ff\uf900-\ufaff\ufe30-\ufe4f"
    "\uff00-\uffef\U0001aff0-\U0001b16f\U00020000-\U0003ffff]"
)
THINK_TAGS = ("<think>", "</think>")  # opening and closing tag of the thinking text


@dataclasses.dataclass(frozen=True)
class ParsedAction:
    """Result of parsing one response: ``kind`` is the tag name ('' when invalid)."""

    kind: str
    text: str
    valid: bool
    reason: str = ""


def contains_cjk(text: str) -> bool:
    """True when `text` holds any Chinese, Japanese or Korean character."""
    return _CJK.search(text) is not None


def think_spans(text: str, tags: tuple[str, str] = THINK_TAGS) -> list[tuple[int, int]]:
    """The thinking parts of `text` as ``[start, end)`` offsets, left to right: each runs from an
    opening tag to the end of the first closing tag after it, or to the end of the text when no
    closing tag follows."""
    open_tag, close_tag = tags
    if not open_tag or not close_tag:
        raise ValueError(f"think tags must be non-empty, got {tags!r}")
    spans, i = [], 0
    while (start := text.find(open_tag, i)) >= 0:
        close = text.find(close_tag, start + len(open_tag))
        i = len(text) if close < 0 else close + len(close_tag)
        spans.append((start, i))
    return spans


def outside_think(text: str, tags: tuple[str, str] = THINK_TAGS) -> str:
    """`text` with each thinking span (`think_spans`) replaced by one space: the text in which
    action tags count."""
    out, i = [], 0
    for start, end in think_spans(text, tags):
        out += [text[i:start], " "]
        i = end
    out.append(text[i:])
    return "".join(out)


def find_stop(text: str, stop_strings, tags: tuple[str, str] | None = THINK_TAGS) -> int | None:
    """End offset of the first stop string in `text` that starts outside thinking: the length
    of the shortest prefix of `text` that holds one; None when there is none. ``tags=None``
    counts stop strings anywhere. Empty stop strings are ignored."""
    spans = think_spans(text, tags) if tags is not None else []
    best = None
    for stop in stop_strings:
        if not stop:
            continue
        i = text.find(stop)
        while i >= 0 and any(a <= i < b for a, b in spans):
            i = text.find(stop, i + 1)
        if i >= 0 and (best is None or i + len(stop) < best):
            best = i + len(stop)
    return best


def parse_action(response: str, kinds: tuple[str, ...], lowercase: bool = False) -> ParsedAction:
    """Extract the single action block of one of `kinds` from `response`.

    Never raises. Returns ``ParsedAction(kind, text, valid, reason)``; when invalid, ``kind``
    and ``text`` are empty and ``reason`` is one of ``missing``, ``duplicated``, ``mixed``,
    ``unclosed``, ``cjk`` or ``empty``.
    """
    if not isinstance(response, str):
        return ParsedAction("", "", False, "missing")
    body = outside_think(response)
    opened = {kind: body.count(f"<{kind}>") for kind in kinds}
    if sum(1 for n in opened.values() if n) > 1:
        return ParsedAction("", "", False, "mixed")
    total = sum(opened.values())
    if total > 1:
        return ParsedAction("", "", False, "duplicated")
    if total == 0:
        return ParsedAction("", "", False, "missing")
    kind = next(k for k, n in opened.items() if n)
    match = re.search(rf"<{re.escape(kind)}>(.*?)</{re.escape(kind)}>", body, re.DOTALL)
    if match is None:
        return ParsedAction("", "", False, "unclosed")
    if contains_cjk(response):
        return ParsedAction("", "", False, "cjk")
    text = match.group(1).strip()
    if not text:
        return ParsedAction("", "", False, "empty")
    return ParsedAction(kind, text.lower() if lowercase else text, True)
