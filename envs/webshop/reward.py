"""The original WebShop task score (princeton-nlp/WebShop ``web_agent_site/engine/goal.py``).

For a purchased product ``P`` (with chosen options ``O``, hidden price ``p``) and a goal ``G``:

- ``r_type`` (type match): ``query_match = P.query == G.query``; ``category_match`` = at least
  two ``›``-separated segments of ``product_category`` shared; ``title_score = |N(P.name) &
  N(G.name)| / |N(G.name)|`` (0.2 when ``N(G.name)`` is empty) where ``N`` = the set of noun
  tokens. ``r_type = 1``; ``0.5`` if not (query_match or category_match or title_score > 0.2);
  then ``0.1`` if ``title_score < 0.1``; then ``0`` if ``title_score == 0``.
- attributes: goal attribute ``g`` matches when ``token_set_ratio(a, g) > 85`` for some product
  attribute ``a``, or ``g`` is a substring of the lower-cased title, bullet points or
  description; ``n_att`` matches of ``|G.attributes|``.
- options: colours normalised with ``normalize_color``; a chosen option ``(k, v)`` matches when
  (``k == "size"``: ``v`` is one of the goal option values exactly; otherwise
  ``token_set_ratio(g, v) > 85`` for some goal value ``g``) or ``v`` is a substring of the
  lower-cased title, bullet points or description; ``n_opt`` matches of ``|G.goal_options|``.
- price: ``r_price = p <= G.price_upper`` (when ``price_upper > 0``).

``score = (n_att + n_opt + r_price) / (|G.attributes| + |G.goal_options| + 1) * r_type``.
Success iff ``score == 1``.

Deviation: the original takes noun tokens (POS NOUN/PROPN) from spaCy ``en_core_web_lg``,
which cannot be installed here (model weights). `noun_tokens` approximates them by the
lower-cased alphabetic tokens of two or more letters that are not English stop words; pass
another callable as ``noun_fn`` to `get_type_reward` / `get_reward` to use a real tagger.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping, Sequence

from seed_jax.envs.webshop.catalog import Goal, Product
from seed_jax.envs.webshop.textmatch import normalize_color, token_set_ratio

EXACT_MATCH_OPTS = ("size",)
FUZZY_THRESHOLD = 85

_WORD = re.compile(r"[a-z]+")
# Common English function words and adjectives-of-degree; none of them is a noun.
STOP_WORDS = frozenset("""
a about above after again against all also am an and any are as at be because been before
being below between both but by can could did do does doing down during each either every
few for from further had has have having he her here hers herself him himself his how i if
in into is it its itself just least less many may me might more most much must my myself
neither no nor not of off on once only or other our ours ourselves out over own per same
she should so some such than that the their theirs them themselves then there these they
this those through to too under until up upon us very via was we were what when where
which while who whom why will with within without would you your yours yourself
yourselves
""".split())


def noun_tokens(text: str) -> list[str]:
    """Approximate noun tokens: lower-cased alphabetic words (>= 2 letters), not stop words."""
    return [w for w in _WORD.findall(text.lower()) if len(w) >= 2 and w not in STOP_WORDS]


@dataclasses.dataclass(frozen=True)
class TypeReward:
    r_type: float
    query_match: bool
    category_match: bool
    title_score: float


@dataclasses.dataclass(frozen=True)
class RewardBreakdown:
    """The score and its parts (as the original `get_reward(..., verbose=True)`)."""

    score: float
    r_type: float
    r_att: float
    num_attr_matches: int
    r_option: float | None
    num_option_matches: int
    r_price: bool | None
    query_match: bool
    category_match: bool
    title_score: float

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def _get(obj, key):
    return obj[key] if isinstance(obj, Mapping) else getattr(obj, key)


def get_type_reward(purchased: Product | Mapping, goal: Goal | Mapping,
                    noun_fn: Callable[[str], Sequence[str]] = noun_tokens) -> TypeReward:
    """r_type from query, category and title-noun matching (formula in module docstring)."""
    query_match = _get(purchased, "query") == _get(goal, "query")
    p_cat = {x.strip() for x in _get(purchased, "product_category").split("›")}
    g_cat = {x.strip() for x in _get(goal, "product_category").split("›")}
    category_match = len(p_cat & g_cat) >= 2
    p_nouns = list(noun_fn(_get(purchased, "name")))
    g_nouns = list(noun_fn(_get(goal, "name")))
    title_score = 0.2 if not g_nouns else len(set(p_nouns) & set(g_nouns)) / len(g_nouns)
    r_type = 1.0
    if not (query_match or category_match or title_score > 0.2):
        r_type = 0.5
    if title_score < 0.1:
        r_type = 0.1
    if title_score == 0.0:
        r_type = 0.0
    return TypeReward(r_type, query_match, category_match, title_score)


def _in_text(value: str, product) -> bool:
    return (value in _get(product, "Title").lower()
            or value in " ".join(_get(product, "BulletPoints")).lower()
            or value in _get(product, "Description").lower())


def get_attribute_reward(purchased: Product | Mapping, goal: Goal | Mapping) -> tuple[float, int]:
    """(r_att, n_att): goal attributes found fuzzily in the product attributes or in its text."""
    goal_attrs = list(_get(goal, "attributes"))
    matches = 0
    for g_attr in goal_attrs:
        if any(token_set_ratio(p_attr, g_attr) > FUZZY_THRESHOLD for p_attr in _get(purchased, "Attributes")):
            matches += 1
        elif _in_text(g_attr, purchased):
            matches += 1
    return matches / len(goal_attrs), matches


def get_option_reward(purchased: Product | Mapping, goal_options: Sequence[str],
                      purchased_options: Mapping[str, str]) -> tuple[float | None, int]:
    """(r_option, n_opt): chosen options matched against the goal option values."""
    chosen = {k: normalize_color(v) for k, v in purchased_options.items()}
    goals = [normalize_color(o) for o in goal_options]
    matches = 0
    for key, value in chosen.items():
        if key.lower() in EXACT_MATCH_OPTS:
            matched = value in goals
        else:
            matched = any(token_set_ratio(g, value) > FUZZY_THRESHOLD for g in goals)
        if matched or _in_text(value, purchased):
            matches += 1
    return (matches / len(goals) if goals else None), matches


def get_reward(purchased: Product | Mapping, goal: Goal | Mapping, price: float,
               options: Mapping[str, str],
               noun_fn: Callable[[str], Sequence[str]] = noun_tokens) -> RewardBreakdown:
    """Total task score in [0, 1] with its parts (formula in module docstring)."""
    t = get_type_reward(purchased, goal, noun_fn)
    upper = _get(goal, "price_upper")
    r_price = (price <= upper) if upper > 0 else None
    r_att, n_att = get_attribute_reward(purchased, goal)
    goal_options = _get(goal, "goal_options")
    goal_values = list(goal_options.values()) if isinstance(goal_options, Mapping) else list(goal_options)
    r_option, n_opt = get_option_reward(purchased, goal_values, options)
    denom = len(_get(goal, "attributes")) + len(goal_options) + 1
    score = (n_att + n_opt + bool(r_price)) / denom * t.r_type
    return RewardBreakdown(score=score, r_type=t.r_type, r_att=r_att, num_attr_matches=n_att,
                           r_option=r_option, num_option_matches=n_opt, r_price=r_price,
                           query_match=t.query_match, category_match=t.category_match,
                           title_score=t.title_score)
