"""Property tests of the action-block parser `envs.actions.parse_action` (docs/METHOD.md §5).

Two independent references are used:

* a *composition oracle*: responses are built from known parts (think text, action blocks of
  accepted / unaccepted kinds, closed or not, filler text), and the expected classification
  is read off the parts themselves, without parsing any text;
* a *scanner oracle* for arbitrary text: a hand-written `str.find` scanner (no regex) that
  implements the documented rules; the text is drawn so that its CJK characters are known.

The CJK primitive `contains_cjk` is checked on its own against Unicode character names. The
sampler's stop rule `find_stop` is held to the same thinking rule as the parser: the shortest
prefix whose text outside thinking (the scanner oracle's) holds a stop string.
"""

from __future__ import annotations

import dataclasses
import sys
import unicodedata

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from seed_jax.envs.actions import ParsedAction, contains_cjk, find_stop, parse_action, think_spans

REASONS = {"missing", "duplicated", "mixed", "unclosed", "cjk", "empty"}
KIND_SETS = [("action",), ("search", "answer")]

# ---------------------------------------------------------------------------------------------
# contains_cjk against Unicode names


_CJK_NAME_PREFIXES = (
    "CJK UNIFIED IDEOGRAPH",
    "CJK COMPATIBILITY IDEOGRAPH",
    "CJK RADICAL",
    "CJK STROKE",
    "KANGXI RADICAL",
    "HIRAGANA",
    "KATAKANA",
    "HANGUL",
    "BOPOMOFO",
    "IDEOGRAPHIC",
)
_NON_CJK_NAME_PREFIXES = (
    "LATIN",
    "GREEK",
    "CYRILLIC",
    "ARABIC",
    "HEBREW",
    "DEVANAGARI",
    "THAI",
    "DIGIT",
    "ARMENIAN",
    "GEORGIAN",
)


def test_contains_cjk_matches_unicode_names():
    """Every Han / kana / Hangul / bopomofo character is CJK; Latin, Greek, ... are not."""
    missed, false_hits = [], []
    for cp in range(sys.maxunicode + 1):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        ch = chr(cp)
        name = unicodedata.name(ch, "")
        if name.startswith("IDEOGRAPHIC TALLY MARK"):  # counting-rod symbols, not text
            continue
        if name.startswith(_CJK_NAME_PREFIXES):
            if not contains_cjk(ch):
                missed.append(f"U+{cp:04X} {name}")
        elif name.startswith(_NON_CJK_NAME_PREFIXES) or cp < 0x80:
            if contains_cjk(ch):
                false_hits.append(f"U+{cp:04X} {name}")
    assert not missed, f"{len(missed)} CJK characters not detected, e.g. {missed[:5]}"
    assert not false_hits, f"{len(false_hits)} non-CJK characters flagged, e.g. {false_hits[:5]}"


def test_contains_cjk_examples():
    assert contains_cjk("go to 桌子 1")
    assert contains_cjk("ひらがな") and contains_cjk("カタカナ") and contains_cjk("한국어")
    assert contains_cjk("ㄱ")  # Hangul compatibility jamo
    assert contains_cjk("\U00020000")  # CJK extension B
    assert not contains_cjk("café naïve Ωmega Привет 123 <>[]")


# ---------------------------------------------------------------------------------------------
# composition oracle


@dataclasses.dataclass(frozen=True)
class Block:
    kind: str
    text: str
    closed: bool

    def render(self) -> str:
        return f"<{self.kind}>{self.text}" + (f"</{self.kind}>" if self.closed else "")


# Text without '<' / '>' so that no tag can appear by accident; includes CJK, accents,
# whitespace of several kinds (the ideographic space U+3000 is CJK *and* whitespace).
_PLAIN = st.text(
    alphabet=st.one_of(
        st.sampled_from(list("abcXYZ019 .,;:[]()'\"!?/\\-_\n\t")),
        st.sampled_from(list("éßΩЖ")),
        st.sampled_from(list("桌子ひカ한\u3000")),
    ),
    max_size=12,
)
_ASCII_PLAIN = st.text(alphabet=st.sampled_from(list("abc XYZ 019.,[]\n")), max_size=12)
_MOSTLY_PLAIN = st.one_of(*([_ASCII_PLAIN] * 6), _PLAIN)  # CJK now and then


def _block(kinds_pool):
    return st.builds(
        Block,
        kind=st.sampled_from(kinds_pool),
        text=_MOSTLY_PLAIN,
        closed=st.sampled_from([True, True, True, False]),
    )


@st.composite
def composed(draw):
    kinds = draw(st.sampled_from(KIND_SETS))
    other = [k for k in ("action", "search", "answer", "tool") if k not in kinds]
    n_accepted = draw(st.sampled_from([0, 1, 1, 1, 1, 2]))
    accepted_blocks = draw(st.lists(_block(list(kinds)), min_size=n_accepted, max_size=n_accepted))
    other_blocks = draw(st.lists(_block(other), max_size=1))
    blocks = draw(st.permutations(accepted_blocks + other_blocks))
    # An unclosed block swallows the text after it; keep every unclosed block last so that the
    # parts stay independent (what follows an unclosed block is covered by the scanner oracle).
    blocks = [b for b in blocks if b.closed] + [b for b in blocks if not b.closed][:1]
    fillers = draw(st.lists(_ASCII_PLAIN, min_size=len(blocks) + 1, max_size=len(blocks) + 1))
    # The think segment may mention complete or partial action tags: they must be ignored.
    think_tags = draw(st.lists(_block(list(kinds)), max_size=2))
    think = draw(_ASCII_PLAIN) + "".join(b.render() for b in think_tags) + draw(_MOSTLY_PLAIN)
    has_think = draw(st.booleans())
    lowercase = draw(st.booleans())
    body = fillers[0] + "".join(b.render() + f for b, f in zip(blocks, fillers[1:]))
    response = (f"<think>{think}</think>" if has_think else "") + body
    if not has_think:
        think_tags = []
    return response, kinds, blocks, lowercase


def _composition_expected(response, kinds, blocks, lowercase) -> ParsedAction:
    accepted = [b for b in blocks if b.kind in kinds]
    if len({b.kind for b in accepted}) > 1:
        return ParsedAction("", "", False, "mixed")
    if len(accepted) > 1:
        return ParsedAction("", "", False, "duplicated")
    if not accepted:
        return ParsedAction("", "", False, "missing")
    (block,) = accepted
    if not block.closed:
        return ParsedAction("", "", False, "unclosed")
    if any(ch in "桌子ひカ한\u3000" for ch in response):
        return ParsedAction("", "", False, "cjk")
    text = block.text.strip()
    if not text:
        return ParsedAction("", "", False, "empty")
    return ParsedAction(block.kind, text.lower() if lowercase else text, True)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(composed())
def test_parse_action_matches_composition_oracle(case):
    response, kinds, blocks, lowercase = case
    got = parse_action(response, kinds, lowercase=lowercase)
    assert got == _composition_expected(response, kinds, blocks, lowercase), response


@given(
    think=_ASCII_PLAIN,
    text=_ASCII_PLAIN.filter(lambda t: t.strip() != ""),
    kinds=st.sampled_from(KIND_SETS),
)
def test_well_formed_response_is_valid(think, text, kinds):
    for kind in kinds:
        got = parse_action(f"<think>{think}</think>\n<{kind}>{text}</{kind}>", kinds)
        assert got == ParsedAction(kind, text.strip(), True)


# ---------------------------------------------------------------------------------------------
# scanner oracle on arbitrary text


def _strip_think(text: str) -> str:
    """Replace each '<think>' ... first following '</think>' by one space (scan left to right);
    a '<think>' never closed: the rest of the text is thinking, replaced by one space."""
    out, i = [], 0
    while True:
        start = text.find("<think>", i)
        if start < 0:
            out.append(text[i:])
            return "".join(out)
        end = text.find("</think>", start + len("<think>"))
        if end < 0:
            out.append(text[i:start])
            out.append(" ")
            return "".join(out)
        out.append(text[i:start])
        out.append(" ")
        i = end + len("</think>")


def _closed_blocks(body: str, kind: str) -> list[str]:
    """Non-overlapping '<kind>' ... nearest '</kind>' contents, scanning left to right."""
    open_tag, close_tag = f"<{kind}>", f"</{kind}>"
    out, i = [], 0
    while True:
        start = body.find(open_tag, i)
        if start < 0:
            return out
        end = body.find(close_tag, start + len(open_tag))
        if end < 0:
            return out
        out.append(body[start + len(open_tag) : end])
        i = end + len(close_tag)


def scanner_oracle(response: str, kinds, lowercase: bool) -> ParsedAction:
    body = _strip_think(response)
    opened = {k: body.count(f"<{k}>") for k in kinds}
    if sum(1 for k in kinds if opened[k]) > 1:
        return ParsedAction("", "", False, "mixed")
    if sum(opened.values()) > 1:
        return ParsedAction("", "", False, "duplicated")
    if sum(opened.values()) == 0:
        return ParsedAction("", "", False, "missing")
    (kind,) = [k for k in kinds if opened[k]]
    blocks = _closed_blocks(body, kind)
    if not blocks:
        return ParsedAction("", "", False, "unclosed")
    if any(ch in CJK_CHARS for ch in response):  # CJK by construction of the generated text
        return ParsedAction("", "", False, "cjk")
    text = blocks[0].strip()
    if not text:
        return ParsedAction("", "", False, "empty")
    return ParsedAction(kind, text.lower() if lowercase else text, True)


_TAGS = [
    "<think>", "</think>", "<action>", "</action>", "<search>", "</search>", "<answer>",
    "</answer>", "<action", "action>", "</", "<", ">", "<ACTION>", "<tool>", "</tool>",
]
# One character of each documented CJK block family (Han, extension B, hiragana, katakana,
# Hangul syllables and compatibility jamo, CJK punctuation and the ideographic space, full-width
# forms); every other character of the generated text lies below U+1100, where no CJK block
# starts, so whether a response holds CJK is known from how it was built.
CJK_CHARS = "桌子\U00020000ひカ한ㄱ。\u3000Ａ"
_BELOW_CJK = st.text(alphabet=st.characters(max_codepoint=0x10FF, blacklist_categories=("Cs",)), max_size=6)
_ARBITRARY = st.lists(
    st.one_of(_BELOW_CJK, st.sampled_from(_TAGS), _PLAIN, st.sampled_from(list(CJK_CHARS))), max_size=14
).map("".join)


def _each_cjk_char(test):
    """Explicit examples: every character of `CJK_CHARS` in a well-formed response, in the
    action text and in the thinking (random text seldom builds a valid block around one)."""
    for ch in CJK_CHARS:
        test = example(response=f"<action>go to {ch} 1</action>", kinds=("action",), lowercase=False)(test)
        test = example(response=f"<think>{ch}</think><answer>Paris</answer>", kinds=("search", "answer"),
                       lowercase=True)(test)
    return test


@settings(max_examples=400, deadline=None)
@given(response=_ARBITRARY, kinds=st.sampled_from(KIND_SETS), lowercase=st.booleans())
@_each_cjk_char
def test_parse_action_matches_scanner_oracle(response, kinds, lowercase):
    """Reference: `scanner_oracle`, which knows the CJK characters of the text from how the text
    was generated (it does not call `contains_cjk`, the parser's own primitive)."""
    got = parse_action(response, kinds, lowercase=lowercase)
    assert got == scanner_oracle(response, kinds, lowercase), repr(response)


@settings(max_examples=300, deadline=None)
@given(response=st.text(), kinds=st.sampled_from(KIND_SETS))
def test_parse_action_never_raises_and_is_consistent(response, kinds):
    """Any text: the result has the documented shape, and a valid response holds no character
    whose Unicode name marks it as CJK (a reference independent of `contains_cjk`)."""
    got = parse_action(response, kinds)
    assert isinstance(got, ParsedAction)
    if got.valid:
        assert got.kind in kinds and got.text and got.text == got.text.strip() and not got.reason
        # no character named as CJK (an independent, name-based test of the CJK rule)
        assert not any(unicodedata.name(ch, "").startswith(_CJK_NAME_PREFIXES)
                       and not unicodedata.name(ch).startswith("IDEOGRAPHIC TALLY MARK") for ch in response)
    else:
        assert got.kind == "" and got.text == "" and got.reason in REASONS


def test_non_string_response_is_missing():
    for bad in (None, 3, b"<action>x</action>", ["<action>x</action>"]):
        assert parse_action(bad, ("action",)) == ParsedAction("", "", False, "missing")


def test_spec_examples():
    k = ("search", "answer")
    assert parse_action("<think>t</think><answer>Paris</answer>", k).text == "Paris"
    assert parse_action("<think>t</think><search>a</search><answer>b</answer>", k).reason == "mixed"
    assert parse_action("<search>a</search> then <search>b</search>", k).reason == "duplicated"
    assert parse_action("I think the answer is Paris", k).reason == "missing"
    assert parse_action("<answer>巴黎</answer>", k).reason == "cjk"
    assert parse_action("<think>想一想</think><answer>Paris</answer>", k).reason == "cjk"
    assert parse_action("<answer>Paris", k).reason == "unclosed"
    assert parse_action("<answer>  </answer>", k).reason == "empty"
    # an unclosed block of the other kind is still two kinds
    assert parse_action("<answer>Paris</answer><search>x", k).reason == "mixed"
    # tags mentioned while thinking are ignored
    got = parse_action("<think>maybe <action>look</action>?</think><action>Go To Desk 1</action>",
                       ("action",), lowercase=True)
    assert got == ParsedAction("action", "go to desk 1", True)
    # a <think> never closed: the rest is still thinking, so it holds no action
    assert parse_action("<think>maybe <action>look</action>", ("action",)).reason == "missing"
    assert parse_action("<action>look</action><think>or not", ("action",)).text == "look"


# ---------------------------------------------------------------------------------------------
# stop strings follow the parser's thinking rule


_STOP_SETS = [("</action>",), ("</search>", "</answer>")]


@settings(max_examples=300, deadline=None)
@given(text=_ARBITRARY, stops=st.sampled_from(_STOP_SETS))
def test_find_stop_is_the_shortest_prefix_with_a_stop_string_outside_thinking(text, stops):
    """What the sampler sees as text grows: the first prefix whose text outside thinking (the
    scanner oracle's `_strip_think`) holds a stop string."""
    def holds(q):
        return any(s in _strip_think(text[:q]) for s in stops)

    want = next((q for q in range(len(text) + 1) if holds(q)), None)
    assert find_stop(text, stops) == want, repr(text)
    # the plain rule (no thinking) is the shortest prefix holding a stop string anywhere
    assert find_stop(text, stops, None) == next(
        (q for q in range(len(text) + 1) if any(s in text[:q] for s in stops)), None)


def test_think_spans_examples():
    assert think_spans("a<think>b</think>c<think>d") == [(1, 17), (18, 26)]
    assert think_spans("</think><think></think>") == [(8, 23)]
    assert think_spans("no thinking") == []
    assert think_spans("x[[y]]z", ("[[", "]]")) == [(1, 6)]


_ASCII_BLOCK_TEXT = st.text(alphabet=st.sampled_from(list("abc XYZ 019.,[]")), max_size=8)


@st.composite
def thought_then_action(draw):
    """<think>{text mentioning action blocks}</think>{filler}<kind>{text}</kind>{more}: the
    response up to the action block is what the sampler should return."""
    kinds = draw(st.sampled_from(KIND_SETS))
    kind = draw(st.sampled_from(kinds))
    blocks = st.builds(Block, kind=st.sampled_from(kinds), text=_ASCII_BLOCK_TEXT, closed=st.booleans())
    think_blocks = draw(st.lists(blocks, max_size=2))
    think = draw(_ASCII_PLAIN) + "".join(b.render() for b in think_blocks) + draw(_ASCII_PLAIN)
    text = draw(_ASCII_BLOCK_TEXT.filter(lambda t: t.strip()))
    head = f"<think>{think}</think>" + draw(_ASCII_PLAIN) + f"<{kind}>{text}</{kind}>"
    more = draw(_ASCII_PLAIN) + "".join(b.render() for b in draw(st.lists(blocks, max_size=2)))
    return kinds, kind, text, think_blocks, head, more


@settings(max_examples=200, deadline=None)
@given(thought_then_action())
def test_a_stop_string_inside_thinking_does_not_cut_the_action_off(case):
    kinds, kind, text, think_blocks, head, more = case
    stops = tuple(f"</{k}>" for k in kinds)
    response = head + more
    cut = find_stop(response, stops)
    assert cut == len(head)
    assert parse_action(response[:cut], kinds) == parse_action(head, kinds) == ParsedAction(kind, text.strip(), True)
    # the plain rule (first stop string anywhere) cuts inside thinking when a block closed there
    plain = min(response.find(s) + len(s) for s in stops if s in response)
    if any(b.closed for b in think_blocks):
        assert plain < len(head) and not parse_action(response[:plain], kinds).valid
    else:  # no stop string while thinking: both rules give the same response, the same action
        assert plain == cut
