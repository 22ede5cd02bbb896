"""The lenient JSON reader: grammar cases written out by hand, and round trips through
independent serialisers (json.dumps, Python repr) as properties."""

from __future__ import annotations

import json

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from seed_jax.lenient_json import LenientJSONError, json_objects, read_lenient

# ----------------------------------------------------------------------------------------------
# read_lenient: the grammar


@pytest.mark.parametrize(
    "text, value",
    [
        ("{'a': 1, b: [1, 2.5, -3e2,], \"c\": None,}", {"a": 1, "b": [1, 2.5, -300.0], "c": None}),
        ("  {a_b-c: true, d: False, e: null}", {"a_b-c": True, "d": False, "e": None}),
        ("{}", {}),
        ("[]", []),
        ("{\u201cq\u201d: \u201csaid \u201chi\u201d to me\u201d}", {"q": "said \u201chi\u201d to me"}),
        ("{\u201eq\u201c: \u2018it\u2019s\u2019}", {"q": "it\u2019s"}),
        ("{'k': 'don't stop', 'n': 'line\none'}", {"k": "don't stop", "n": "line\none"}),
        (r"{'x': '\x41\u00e9\U0001F600\ud83d\ude00\n\t\'\"\\\/\q'}", {"x": "A\u00e9\U0001F600\U0001F600\n\t'\"\\/q"}),
        (r"{'x': '\ud800 lone'}", {"x": "\ufffd lone"}),
        (r"{'x': '\xZZ\u12'}", {"x": "xZZu12"}),
        ("{'a': 1, 'a': 2}", {"a": 2}),
        ("12", 12),
        ("trueish", True),
    ],
)
def test_read_lenient_values(text, value):
    got, end = read_lenient(text)
    assert got == value and type(got) is type(value)
    assert end <= len(text)


def test_read_lenient_end_index_and_start():
    text = "xx {'a': 'b'} tail"
    assert read_lenient(text, 3) == ({"a": "b"}, 13)
    assert read_lenient("[1, 2]", 0) == ([1, 2], 6)


@pytest.mark.parametrize(
    "text, value",
    [
        ('{"a": "x", "b": "y z', {"a": "x", "b": "y z"}),
        ('{"a": "x", "b', {"a": "x"}),
        ('{"a": "x", "b":', {"a": "x"}),
        ('{"a": "x",', {"a": "x"}),
        ('{"a": [1, 2', {"a": [1, 2]}),
        ('{"a": {"b": "c', {"a": {"b": "c"}}),
        ("{'a': 'it's", {"a": "it's"}),
        ("{", {}),
    ],
)
def test_read_lenient_truncated(text, value):
    assert read_lenient(text, truncated=True) == (value, len(text))
    with pytest.raises(LenientJSONError):
        read_lenient(text)  # without the flag the end of the text is an error


def test_truncated_still_rejects_what_is_not_cut():
    for text in ("{a 1}", "{'a': 1 'b': 2}", "{, }"):
        with pytest.raises(LenientJSONError):
            read_lenient(text, truncated=True)
    assert read_lenient('{"a": 1} tail', truncated=True) == ({"a": 1}, 8)


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "end of text"),
        ("{a 1}", "expected ':'"),
        ("{'a': 1 'b': 2}", "expected ',' or '}'"),
        ("[1 2]", "expected ',' or ']'"),
        ("{, }", "expected a key"),
        ("{'a': 'open", "unterminated string"),
        ("{'a': @}", "unexpected '@'"),
        ("[" * 50 + "]" * 50, "too deep"),
    ],
)
def test_read_lenient_failures(text, message):
    with pytest.raises(LenientJSONError, match=message):
        read_lenient(text)
    assert issubclass(LenientJSONError, ValueError)


# ----------------------------------------------------------------------------------------------
# json_objects: where objects are looked for


def test_fences_first_then_each_brace_in_order():
    text = 'pre {"z": 1} ```json\n{"a": {"b": 2}}\n``` post'
    assert list(json_objects(text)) == [{"a": {"b": 2}}, {"b": 2}, {"z": 1}, {"a": {"b": 2}}, {"b": 2}]


def test_non_objects_and_broken_candidates_are_skipped():
    assert list(json_objects("[1, 2] {broken 'x': } {'ok': 1,}")) == [{"ok": 1}]
    assert list(json_objects("no braces here")) == []


def test_attempts_are_capped():
    text = "{}" * 100
    assert len(list(json_objects(text))) == 64
    assert len(list(json_objects(text, max_attempts=5))) == 5


# ----------------------------------------------------------------------------------------------
# properties

_KEYS = st.text(max_size=10)
_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6),
                     st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=20))
_VALUES = st.recursive(_SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                         st.dictionaries(_KEYS, inner, max_size=4)),
                       max_leaves=12)
_DICTS = st.dictionaries(_KEYS, _VALUES, max_size=5)
_PROSE = st.text(alphabet=st.characters(blacklist_characters="{}`"), max_size=20)
_STRINGS = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=30)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_json_objects_never_raises_and_yields_dicts(text):
    assert all(isinstance(obj, dict) for obj in json_objects(text))


@settings(max_examples=200, deadline=None)
@given(before=_PROSE, after=_PROSE, obj=_DICTS, indent=st.sampled_from([None, 2]))
def test_first_object_is_the_json_dumps_payload(before, after, obj, indent):
    text = before + json.dumps(obj, indent=indent, ensure_ascii=False) + after
    assert next(json_objects(text)) == obj


@settings(max_examples=300, deadline=None)
@given(keys=st.lists(_STRINGS, min_size=1, max_size=3, unique=True),
       values=st.lists(_STRINGS, min_size=3, max_size=3))
# repr escapes characters it deems unprintable as \xHH, \uHHHH and \UHHHHHHHH
@example(keys=["k"], values=["\U00018cd6", "a\xa0b", "\U000e0001 x"])
@example(keys=["it's"], values=['say "hi"', "don't", "a\\b\n\x00"])
def test_read_lenient_reads_python_repr_of_string_dicts(keys, values):
    obj = dict(zip(keys, values))
    assert read_lenient(repr(obj)) == (obj, len(repr(obj)))
