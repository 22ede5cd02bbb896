"""Find JSON objects in model output: strict `json` first, a lenient reader as fallback.

`json_objects(text)` yields the dicts found in ``text``, in this order: the regions inside
Markdown code fences (three backticks, optionally followed by ``json``, ``JSON`` or ``json5``)
in order, then the whole text; within a region, one candidate per '{' in order of position
(nested objects included, so one object may be yielded more than once). Each candidate is
read with ``json.JSONDecoder.raw_decode`` and, failing that, with `read_lenient`; candidates
that fail both are read once more with ``read_lenient(..., truncated=True)`` (an answer cut
off by the token limit); candidates that fail all three, or are not objects, are skipped. At
most ``max_attempts`` (64) '{' positions are tried in all. Never raises on any ``str``.

`read_lenient(text, start, truncated=False)` -> ``(value, end)`` reads one value at
``text[start:]`` (leading white space skipped) and raises `LenientJSONError` (a
``ValueError``) when there is none.
Grammar (white space allowed between all tokens; nesting deeper than 40 fails)::

    value   := object | array | string | number | literal
    object  := '{' [ member (',' member)* [','] ] '}'      -- trailing comma allowed
    member  := (string | bare_key) ':' value                -- a repeated key keeps the last value
    array   := '[' [ value (',' value)* [','] ] ']'
    bare_key:= [A-Za-z_][A-Za-z0-9_-]*
    number  := -?[0-9]+ ('.' [0-9]+)? ([eE] [+-]? [0-9]+)?  -- float if it has '.', 'e' or 'E', else int
    literal := true | false | null | True | False | None    -- matched as a prefix

    string  := q char* c   with q one of  " ' “ ” ‘ ’ „  and c a closer of q:
               " -> "   ' -> '   “ -> ” or “   ” -> ”   ‘ -> ’   ’ -> ’   „ -> “ or ”

A closer ends the string only when the next non-space character is one of ``, : } ]`` or the
end of the text; otherwise it is kept as text (so apostrophes and stray quotes stay inside).
Raw newlines are kept. Escapes: ``\\xHH``, ``\\uHHHH``, ``\\UHHHHHHHH`` (hex, code point <=
0x10FFFF) give that character; ``\\n \\t \\r \\b \\f`` the control characters; any other
``\\c`` gives ``c`` (so ``\\" \\' \\\\ \\/`` give the character itself). UTF-16 surrogate
pairs written as two escapes are joined into one character; a lone surrogate becomes U+FFFD.

Truncation (``truncated=True``): the end of the text closes whatever is open. A string open at
the end ends there (its text kept); an object or array open at the end is closed there; a
member or element that the end cuts before its value is complete (a bare or half-written key,
a key without ':' or value, a dangling ',') is dropped. So ``{"a": "x", "b": "y z`` reads as
``{"a": "x", "b": "y z"}`` and ``{"a": "x", "b`` as ``{"a": "x"}``. Without it, such text
raises.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["LenientJSONError", "json_objects", "read_lenient"]

MAX_DEPTH = 40
MAX_ATTEMPTS = 64

_CLOSERS = {'"': '"', "'": "'", "\u201c": "\u201d\u201c", "\u201d": "\u201d",
            "\u2018": "\u2019", "\u2019": "\u2019", "\u201e": "\u201c\u201d"}
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f", "/": "/", "\\": "\\",
            '"': '"', "'": "'"}
# \xHH, \uHHHH (JSON and Python) and \UHHHHHHHH (Python repr of non-BMP characters)
_HEX_ESCAPE_WIDTH = {"x": 2, "u": 4, "U": 8}
_HEX = re.compile(r"[0-9a-fA-F]+")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?")
_BARE_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_\-]*")
_LITERALS = {"true": True, "false": False, "null": None, "True": True, "False": False,
             "None": None}
_FENCE = re.compile(r"```[ \t]*(?:json|JSON|json5)?[ \t]*\n?(.*?)```", re.DOTALL)


class LenientJSONError(ValueError):
    """`read_lenient` found no value of the grammar at the given position."""


class _EndOfText(LenientJSONError):
    """The text ended inside a value (what ``truncated=True`` forgives)."""


class _Reader:
    """Recursive-descent reader of the grammar in the module docstring."""

    def __init__(self, text: str, truncated: bool = False) -> None:
        self.s, self.truncated = text, truncated

    def ws(self, i: int) -> int:
        while i < len(self.s) and self.s[i].isspace():
            i += 1
        return i

    def value(self, i: int, depth: int) -> tuple[Any, int]:
        if depth > MAX_DEPTH:
            raise LenientJSONError("too deep")
        i = self.ws(i)
        if i >= len(self.s):
            raise _EndOfText("end of text")
        c = self.s[i]
        if c == "{":
            return self.obj(i, depth)
        if c == "[":
            return self.arr(i, depth)
        if c in _CLOSERS:
            return self.string(i)
        m = _NUMBER.match(self.s, i)
        if m:
            txt = m.group(0)
            return (float(txt) if any(ch in txt for ch in ".eE") else int(txt)), m.end()
        for word, val in _LITERALS.items():
            if self.s.startswith(word, i):
                return val, i + len(word)
        raise LenientJSONError(f"unexpected {c!r}")

    def at(self, i: int) -> str:
        """The character at ``i``, '' past the end."""
        return self.s[i] if i < len(self.s) else ""

    def items(self, i: int, depth: int, close: str, item: Callable[[int, int], int]) -> int:
        """Comma-separated items after the opening bracket at ``i`` (trailing comma allowed),
        each read by ``item(index, depth + 1) -> end``; returns the index past ``close``."""
        i += 1
        while True:
            i = self.ws(i)
            if self.at(i) == close:
                return i + 1
            if i >= len(self.s):
                if self.truncated:
                    return i
                raise _EndOfText(f"end of text before '{close}'")
            try:
                i = self.ws(item(i, depth + 1))
            except _EndOfText:
                if self.truncated:  # the end cut this item: drop it, close the container
                    return len(self.s)
                raise
            if self.at(i) == ",":
                i += 1
            elif self.at(i) == close:
                return i + 1
            elif i >= len(self.s):
                if self.truncated:
                    return i
                raise _EndOfText(f"end of text before '{close}'")
            else:
                raise LenientJSONError(f"expected ',' or '{close}'")

    def obj(self, i: int, depth: int) -> tuple[dict, int]:
        out: dict[str, Any] = {}

        def member(j: int, d: int) -> int:
            if self.at(j) in _CLOSERS:
                key, j = self.string(j)
            else:
                m = _BARE_KEY.match(self.s, j)
                if not m:
                    raise LenientJSONError("expected a key")
                key, j = m.group(0), m.end()
            j = self.ws(j)
            if j >= len(self.s):
                raise _EndOfText("end of text before ':'")
            if self.at(j) != ":":
                raise LenientJSONError("expected ':'")
            value, j = self.value(j + 1, d)
            out[key] = value
            return j

        return out, self.items(i, depth, "}", member)

    def arr(self, i: int, depth: int) -> tuple[list, int]:
        out: list[Any] = []

        def element(j: int, d: int) -> int:
            val, j = self.value(j, d)
            out.append(val)
            return j

        return out, self.items(i, depth, "]", element)

    def string(self, i: int) -> tuple[str, int]:
        closers = _CLOSERS[self.s[i]]
        i += 1
        buf: list[str] = []
        while i < len(self.s):
            c = self.s[i]
            if c == "\\" and i + 1 < len(self.s):
                nxt = self.s[i + 1]
                width = _HEX_ESCAPE_WIDTH.get(nxt, 0)
                digits = self.s[i + 2 : i + 2 + width]
                if width and len(digits) == width and _HEX.fullmatch(digits) \
                        and int(digits, 16) <= 0x10FFFF:
                    buf.append(chr(int(digits, 16)))
                    i += 2 + width
                    continue
                buf.append(_ESCAPES.get(nxt, nxt))
                i += 2
                continue
            if c in closers:
                j = self.ws(i + 1)
                if j >= len(self.s) or self.s[j] in ",:}]":
                    text = "".join(buf)
                    # join \\uD8xx\\uDCxx escape pairs into one character
                    text = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
                    return text, i + 1
            buf.append(c)
            i += 1
        if self.truncated:
            return "".join(buf).encode("utf-16", "surrogatepass").decode("utf-16", "replace"), i
        raise _EndOfText("unterminated string")


def read_lenient(text: str, start: int = 0, truncated: bool = False) -> tuple[Any, int]:
    """The value of the module's grammar at ``text[start:]`` and the index just after it;
    ``truncated``: the end of the text closes what is open (module docstring).

    Raises `LenientJSONError` when there is none (also ``ValueError`` for an integer too long
    to convert)."""
    return _Reader(text, truncated).value(start, 0)


def json_objects(text: str, max_attempts: int = MAX_ATTEMPTS) -> Iterator[dict]:
    """The dicts found in ``text`` (order and rules in the module docstring); never raises."""
    regions = [m.group(1) for m in _FENCE.finditer(text)] + [text]
    attempts = 0
    decoder = json.JSONDecoder()
    for region in regions:
        for m in re.finditer(r"\{", region):
            attempts += 1
            if attempts > max_attempts:
                return
            try:
                obj, _ = decoder.raw_decode(region, m.start())
            except (ValueError, RecursionError):
                try:
                    obj, _ = read_lenient(region, m.start())
                except (ValueError, OverflowError, RecursionError):
                    try:
                        obj, _ = read_lenient(region, m.start(), truncated=True)
                    except (ValueError, OverflowError, RecursionError):
                        continue
            if isinstance(obj, dict):
                yield obj
