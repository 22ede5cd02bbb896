"""Loading the official WebShop data files into products and goals.

Files (schemas of princeton-nlp/WebShop ``web_agent_site/engine/engine.py::load_products``):

- products, ``items_shuffle*.json``: a JSON list of raw products with ``asin``, ``name``,
  ``category``, ``query``, ``product_category``, ``full_description``, ``small_description``
  (list or string), ``pricing`` (``"$12.99"`` or ``"$10.99 - $15.99"``, may be empty),
  ``customization_options`` (``{name: [{"value": str, "image": url}, ...]}`` or null) and
  ``images``. An already cleaned product (``Title``, ``Description``, ``BulletPoints``,
  ``options``, ``pricing`` as a list of floats) is accepted as well.
- attributes, ``items_ins_v2*.json``: ``{asin: {"attributes": [...], "instruction": str,
  "instruction_attributes": [...]}}`` (instruction fields only for goal products).
- human instructions, ``items_human_ins.json``: ``{asin: [{"instruction": str,
  "instruction_attributes": [...], "instruction_options": [...]}, ...]}``.
- reviews (optional), ``reviews.json``: ``[{"asin", "reviews": [...], "average_rating"}]``.

Cleaning (as the original): skip asins equal to ``"nan"`` or longer than 10 characters and
repeated asins; ``Title = name``; ``pricing`` string -> list of floats (``"$a - $b"`` ->
``[a, b]``, price tag ``"$a to $b"``; missing -> ``[100.0]``, ``"$100.0"``); option names and
values lower-cased, ``"/"`` in values -> ``" | "``; ``Attributes`` from the attributes file
(``["DUMMY_ATTR"]`` when absent); ``query`` lower-cased and stripped.

Goals (``goal.py``): a hidden price per product (its single price, or uniform in
``[low, high]`` for a range); ``price_upper`` = the larger of two values drawn from the first
four multiples of 10 above that price (1e6 and no price text when fewer than two exist);
synthetic goals = one goal per combination of the product's option values (option names
sorted), text ``"{instruction}{ with name: value, and ...}{, and price lower than X.00
dollars}"``; human goals = one per human instruction with at least one attribute, text
``instruction.strip('.') + price text``. Goals are then shuffled with ``random.Random(233)``
like the original ``random.seed(233); random.shuffle(goals)``.

Deviations: the original draws prices from the unseeded global RNG; here a
``random.Random(seed)`` is used so goals are reproducible. An asin missing from the
attributes file gets ``DUMMY_ATTR`` and no synthetic goal (the original raises KeyError).
"""

from __future__ import annotations

import dataclasses
import gzip
import itertools
import json
import os
import random
import re
from collections import defaultdict
from decimal import Decimal, InvalidOperation
from typing import Any

PRICE_RANGE: tuple[float, ...] = tuple(10.0 * i for i in range(1, 100))
GOAL_SHUFFLE_SEED = 233
NO_PRICE_LIMIT = 1000000


class CatalogError(ValueError):
    """A WebShop data file is missing or malformed (the message names the file and field)."""


@dataclasses.dataclass
class Product:
    """A cleaned product, with the field names the original pages and reward use."""

    asin: str
    name: str
    Title: str
    category: str
    query: str
    product_category: str
    Description: str
    BulletPoints: list[str]
    Attributes: list[str]
    options: dict[str, list[str]]
    option_to_image: dict[str, Any]
    pricing: list[float]
    Price: str
    Rating: Any = "N.A."
    Reviews: list[dict] = dataclasses.field(default_factory=list)
    MainImage: Any = None
    instruction_text: str | None = None
    instruction_attributes: list[str] | None = None
    instructions: list[dict] | None = None  # human instructions


@dataclasses.dataclass
class Goal:
    """One shopping goal (JSON-serialisable via `to_dict`)."""

    asin: str
    category: str
    query: str
    name: str
    product_category: str
    instruction_text: str
    attributes: list[str]
    price_upper: float
    goal_options: dict[str, str] | list[str]
    weight: float = 1.0

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> Goal:
        fields = {f.name for f in dataclasses.fields(cls)}
        missing = [k for k in fields - {"weight"} if k not in d]
        if missing:
            raise CatalogError(f"goal dict is missing field(s) {sorted(missing)}")
        return cls(**{k: d[k] for k in fields if k in d})


@dataclasses.dataclass
class Catalog:
    """Products, their hidden prices and the shuffled goals of one data configuration."""

    products: list[Product]
    by_asin: dict[str, Product]
    prices: dict[str, float]
    goals: list[Goal]
    attribute_to_asins: dict[str, set[str]]


# ----------------------------------------------------------------------------- reading


def read_json(path: str | os.PathLike, what: str) -> Any:
    """Parse a JSON file, raising CatalogError naming `what` and the path on failure."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise CatalogError(f"WebShop {what} file not found: {path}")
    try:
        with (gzip.open if path.endswith(".gz") else open)(path, "rt", encoding="utf-8") as f:
            return json.load(f)
    except json.JSONDecodeError as e:
        raise CatalogError(f"WebShop {what} file {path} is not valid JSON: {e}") from e


def _field(obj: dict, key: str, types: type | tuple, where: str, *, optional: bool = False):
    if key not in obj:
        if optional:
            return None
        raise CatalogError(f"{where}: missing required field '{key}'")
    val = obj[key]
    if val is None and optional:
        return None
    if not isinstance(val, types):
        tname = types.__name__ if isinstance(types, type) else "/".join(t.__name__ for t in types)
        raise CatalogError(f"{where}: field '{key}' must be {tname}, got {type(val).__name__}")
    return val


def parse_pricing(raw: Any, where: str) -> tuple[list[float], str]:
    """Original price parsing: ``"$a - $b"`` -> ([a, b], "$a to $b"); empty -> ([100.0], "$100.0")."""
    if raw is None or not raw:
        return [100.0], "$100.0"
    if isinstance(raw, list):  # already cleaned
        if not all(isinstance(x, (int, float)) for x in raw):
            raise CatalogError(f"{where}: field 'pricing' list must hold numbers, got {raw!r}")
        pricing = [float(x) for x in raw[:2]]
    elif isinstance(raw, str):
        try:
            pricing = [float(Decimal(re.sub(r"[^\d.]", "", p))) for p in raw.split("$")[1:]]
        except InvalidOperation as e:
            raise CatalogError(f"{where}: field 'pricing' cannot be parsed: {raw!r}") from e
        if not pricing:
            raise CatalogError(f"{where}: field 'pricing' has no '$' amount: {raw!r}")
        pricing = pricing[:2]
    else:
        raise CatalogError(f"{where}: field 'pricing' must be str or list, got {type(raw).__name__}")
    tag = f"${pricing[0]}" if len(pricing) == 1 else f"${pricing[0]} to ${pricing[1]}"
    return pricing, tag


def clean_options(raw: Any, where: str) -> tuple[dict[str, list[str]], dict[str, Any]]:
    """``customization_options`` -> ({name.lower(): [value.strip().replace('/', ' | ').lower()]}, images)."""
    options: dict[str, list[str]] = {}
    option_to_image: dict[str, Any] = {}
    if not raw:
        return options, option_to_image
    if not isinstance(raw, dict):
        raise CatalogError(f"{where}: field 'customization_options' must be an object")
    for name, contents in raw.items():
        if contents is None:
            continue
        if not isinstance(contents, list):
            raise CatalogError(f"{where}: customization_options['{name}'] must be a list")
        values = []
        for j, content in enumerate(contents):
            if not isinstance(content, dict) or not isinstance(content.get("value"), str):
                raise CatalogError(
                    f"{where}: customization_options['{name}'][{j}] needs a string 'value'")
            value = content["value"].strip().replace("/", " | ").lower()
            values.append(value)
            option_to_image[value] = content.get("image")
        options[name.lower()] = values
    return options, option_to_image


def load_attributes(path: str | os.PathLike) -> dict[str, dict]:
    """Read and validate an ``items_ins_v2*.json`` file (asin -> attributes/instruction)."""
    data = read_json(path, "attributes (items_ins_v2)")
    if not isinstance(data, dict):
        raise CatalogError(f"{path}: expected an object mapping asin -> entry, got {type(data).__name__}")
    for asin, entry in data.items():
        where = f"{path}: asin {asin!r}"
        if not isinstance(entry, dict):
            raise CatalogError(f"{where}: entry must be an object")
        attrs = _field(entry, "attributes", list, where, optional=True)
        if attrs is not None and not all(isinstance(a, str) for a in attrs):
            raise CatalogError(f"{where}: field 'attributes' must be a list of strings")
        if entry.get("instruction") is not None:
            _field(entry, "instruction", str, where)
            ins_attrs = _field(entry, "instruction_attributes", list, where)
            if not ins_attrs or not all(isinstance(a, str) for a in ins_attrs):
                raise CatalogError(
                    f"{where}: field 'instruction_attributes' must be a non-empty list of strings")
    return data


def load_human_instructions(path: str | os.PathLike) -> dict[str, list[dict]]:
    """Read and validate ``items_human_ins.json`` (asin -> list of human instructions)."""
    data = read_json(path, "human instructions (items_human_ins)")
    if not isinstance(data, dict):
        raise CatalogError(f"{path}: expected an object mapping asin -> list of instructions")
    for asin, items in data.items():
        if not isinstance(items, list):
            raise CatalogError(f"{path}: asin {asin!r}: value must be a list of instructions")
        for j, ins in enumerate(items):
            where = f"{path}: asin {asin!r} instruction[{j}]"
            if not isinstance(ins, dict):
                raise CatalogError(f"{where}: must be an object")
            _field(ins, "instruction", str, where)
            _field(ins, "instruction_attributes", list, where)
            _field(ins, "instruction_options", (list, dict), where)
    return data


def load_reviews(path: str | os.PathLike) -> tuple[dict[str, list[dict]], dict[str, Any]]:
    """Read ``reviews.json`` -> (asin -> reviews with title/score/body, asin -> average rating)."""
    data = read_json(path, "reviews")
    if not isinstance(data, list):
        raise CatalogError(f"{path}: expected a list of {{asin, reviews, average_rating}}")
    reviews, ratings = {}, {}
    for i, r in enumerate(data):
        where = f"{path}: entry[{i}]"
        if not isinstance(r, dict):
            raise CatalogError(f"{where}: must be an object")
        asin = _field(r, "asin", str, where)
        items = []
        for rev in _field(r, "reviews", list, where):
            score = rev.get("score", rev.get("stars", 0))
            items.append({"title": rev.get("title", ""), "score": score,
                          "body": rev.get("review", rev.get("body", ""))})
        reviews[asin] = items
        ratings[asin] = r.get("average_rating", "N.A.")
    return reviews, ratings


# ----------------------------------------------------------------------------- products


def clean_product(p: Any, i: int, path: str, attributes: dict[str, dict],
                  human: dict[str, list[dict]] | None, reviews: dict, ratings: dict) -> Product:
    """One raw (or already cleaned) product -> Product, as the original `load_products`."""
    where = f"{path}: product[{i}]"
    if not isinstance(p, dict):
        raise CatalogError(f"{where}: must be an object")
    asin = _field(p, "asin", str, where)
    where = f"{where} (asin {asin!r})"
    title = p.get("Title", p.get("name"))
    if not isinstance(title, str):
        raise CatalogError(f"{where}: missing required field 'name' (or 'Title')")
    name = p.get("name", title)
    category = _field(p, "category", str, where)
    query = _field(p, "query", str, where)
    product_category = _field(p, "product_category", str, where)
    desc = p.get("Description", p.get("full_description"))
    if desc is None:
        if "Description" not in p and "full_description" not in p:
            raise CatalogError(f"{where}: missing required field 'full_description'")
        desc = ""
    if not isinstance(desc, str):
        raise CatalogError(f"{where}: field 'full_description' must be str")
    if "BulletPoints" in p:
        bullets = p["BulletPoints"]
    elif "small_description" in p:
        bullets = p["small_description"]
    else:
        raise CatalogError(f"{where}: missing required field 'small_description'")
    bullets = bullets if isinstance(bullets, list) else [bullets]
    bullets = ["" if b is None else str(b) for b in bullets]
    if "options" in p and isinstance(p["options"], dict) and "customization_options" not in p:
        options = {k.lower(): [str(v) for v in vals] for k, vals in p["options"].items()}
        option_to_image = dict(p.get("option_to_image") or {})
    elif "customization_options" in p:
        options, option_to_image = clean_options(p["customization_options"], where)
    else:
        raise CatalogError(f"{where}: missing required field 'customization_options'")
    pricing, price_tag = parse_pricing(p.get("pricing"), where)
    images = p.get("images")
    main_image = p.get("MainImage", images[0] if isinstance(images, list) and images else None)
    entry = attributes.get(asin, {})
    product = Product(
        asin=asin, name=name, Title=title, category=category, query=query.lower().strip(),
        product_category=product_category, Description=desc, BulletPoints=bullets,
        Attributes=list(entry["attributes"]) if "attributes" in entry else ["DUMMY_ATTR"],
        options=options, option_to_image=option_to_image, pricing=pricing, Price=price_tag,
        Rating=ratings.get(asin, "N.A."), Reviews=reviews.get(asin, []), MainImage=main_image,
    )
    if human is not None:
        if asin in human:
            product.instructions = human[asin]
    else:
        product.instruction_text = entry.get("instruction")
        product.instruction_attributes = entry.get("instruction_attributes")
    return product


def load_products(products_path: str | os.PathLike, attributes_path: str | os.PathLike,
                  human_path: str | os.PathLike | None = None, human_goals: bool = False,
                  num_products: int | None = None,
                  reviews_path: str | os.PathLike | None = None) -> list[Product]:
    """Read and clean the product list of an items_shuffle file (see module docstring)."""
    raw = read_json(products_path, "products (items_shuffle)")
    return clean_products(raw, os.fspath(products_path), attributes_path, human_path,
                          human_goals, num_products, reviews_path)


def clean_products(raw: Any, source: str, attributes_path: str | os.PathLike,
                   human_path: str | os.PathLike | None = None, human_goals: bool = False,
                   num_products: int | None = None,
                   reviews_path: str | os.PathLike | None = None) -> list[Product]:
    """Clean a raw product list (`source` names it in errors) as the original `load_products`."""
    if not isinstance(raw, list):
        raise CatalogError(f"{source}: expected a JSON list of products, got {type(raw).__name__}")
    attributes = load_attributes(attributes_path)
    human = None
    if human_goals:
        if human_path is None:
            raise CatalogError("human goals requested but no items_human_ins.json path given")
        human = load_human_instructions(human_path)
    reviews, ratings = load_reviews(reviews_path) if reviews_path else ({}, {})
    if num_products is not None:
        raw = raw[:num_products]
    products, seen = [], set()
    for i, p in enumerate(raw):
        asin = p.get("asin") if isinstance(p, dict) else None
        if isinstance(asin, str) and (asin == "nan" or len(asin) > 10 or asin in seen):
            continue
        product = clean_product(p, i, source, attributes, human, reviews, ratings)
        seen.add(product.asin)
        products.append(product)
    if not products:
        raise CatalogError(f"{source}: no usable products")
    return products


# ----------------------------------------------------------------------------- goals


def product_prices(products: list[Product], rng: random.Random) -> dict[str, float]:
    """Hidden price per asin: its price, or uniform in [low, high] for a price range."""
    prices = {}
    for p in products:
        if not p.pricing:
            prices[p.asin] = 100.0
        elif len(p.pricing) == 1:
            prices[p.asin] = p.pricing[0]
        else:
            prices[p.asin] = rng.uniform(*p.pricing[:2])
    return prices


def price_limit(price: float, rng: random.Random) -> tuple[float, str]:
    """(price_upper, price text) for a product of hidden price `price` (original rule)."""
    price_range = [p for p in PRICE_RANGE if p > price][:4]
    if len(price_range) >= 2:
        _, upper = sorted(rng.sample(price_range, 2))
        return upper, f", and price lower than {upper:.2f} dollars"
    return NO_PRICE_LIMIT, ""


def synthetic_goals(products: list[Product], prices: dict[str, float], rng: random.Random) -> list[Goal]:
    """Original `get_synthetic_goals`: one goal per option combination of goal products."""
    goals: list[Goal] = []
    cnt_atts: dict[str, int] = defaultdict(int)
    for p in products:
        if p.instruction_text is None:
            continue
        attributes = list(p.instruction_attributes or [])
        upper, price_text = price_limit(prices[p.asin], rng)
        names = sorted(p.options)
        for combo in itertools.product(*(p.options[n] for n in names)):
            goal_options = dict(zip(names, combo))
            option_text = ", and ".join(f"{k}: {v}" for k, v in goal_options.items())
            option_text = " with " + option_text if option_text else ""
            goals.append(Goal(
                asin=p.asin, category=p.category, query=p.query, name=p.Title,
                product_category=p.product_category,
                instruction_text=f"{p.instruction_text}{option_text}{price_text}",
                attributes=attributes, price_upper=upper, goal_options=goal_options))
            for att in attributes:
                cnt_atts[att] += 1
    for g in goals:
        g.weight = sum(1.0 / cnt_atts[a] for a in g.attributes) / len(g.attributes)
    return goals


def human_goals(products: list[Product], prices: dict[str, float], rng: random.Random) -> list[Goal]:
    """Original `get_human_goals`: one goal per human instruction that has attributes."""
    goals: list[Goal] = []
    for p in products:
        for ins in p.instructions or []:
            attributes = list(ins["instruction_attributes"])
            if not attributes:
                continue
            upper, price_text = price_limit(prices[p.asin], rng)
            goals.append(Goal(
                asin=p.asin, category=p.category, query=p.query, name=p.name,
                product_category=p.product_category,
                instruction_text=ins["instruction"].strip(".") + price_text,
                attributes=attributes, price_upper=upper,
                goal_options=ins["instruction_options"]))
    return goals


def build_catalog(products: list[Product], use_human_goals: bool = False, seed: int = GOAL_SHUFFLE_SEED) -> Catalog:
    """Prices, goals (shuffled with Random(233)) and indexes for cleaned `products`."""
    rng = random.Random(seed)
    prices = product_prices(products, rng)
    goals = (human_goals if use_human_goals else synthetic_goals)(products, prices, rng)
    random.Random(GOAL_SHUFFLE_SEED).shuffle(goals)
    attribute_to_asins: dict[str, set[str]] = defaultdict(set)
    for p in products:
        for a in p.Attributes:
            attribute_to_asins[a].add(p.asin)
    return Catalog(products=products, by_asin={p.asin: p for p in products}, prices=prices,
                   goals=goals, attribute_to_asins=dict(attribute_to_asins))


def load_catalog(products_path: str | os.PathLike, attributes_path: str | os.PathLike,
                 human_path: str | os.PathLike | None = None, human_goals: bool = False,
                 num_products: int | None = None, reviews_path: str | os.PathLike | None = None,
                 seed: int = GOAL_SHUFFLE_SEED) -> Catalog:
    """`load_products` + `build_catalog`."""
    products = load_products(products_path, attributes_path, human_path, human_goals,
                             num_products, reviews_path)
    return build_catalog(products, use_human_goals=human_goals, seed=seed)
