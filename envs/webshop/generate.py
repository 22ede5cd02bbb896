"""Generate a small WebShop product catalog in exactly the official ``items_shuffle*.json`` schema.

Only ``items_ins_v2_1000.json`` (asin -> attributes, synthetic instruction, instruction
attributes) is real; the official product catalog ``items_shuffle_1000.json`` (scraped Amazon
products) and ``items_human_ins.json`` are not available here. This module writes a
stand-in catalog so that the environment, its tests and the default run work without them.

What is real and what is made up, per product:

- ``asin``: the real asins of the attributes file, one product each; the product's
  ``Attributes`` (joined at load time from the attributes file) are therefore real.
- ``query``: for the 415 asins with an instruction, the product type parsed from the real
  instruction (``"Find me <attrs> <type> [with|for <attrs>]"`` -> ``<type>``, e.g.
  ``"men's dress shirts"``), so goals name the product's own type. An asin without an
  instruction (a distractor) borrows the type of the instruction asin whose attributes
  overlap its own most (round robin when none overlap).
- made up: ``name`` (a fictitious brand + the type + the attributes), ``category`` (one of
  WebShop's five, from keywords of the type), ``product_category`` (``"<department> ›
  <Type>"``), ``full_description``, ``small_description``, ``pricing``,
  ``customization_options`` (colour / size / flavour values), ``images`` (placeholders).
  No option value occurs as a substring of the product's own text, so a wrong option
  cannot be rescued by the reward's text match.

Usage: ``python -m seed_jax.envs.webshop.generate --attributes items_ins_v2_1000.json --out
items_shuffle_generated.json``. Deterministic for a given seed.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
from typing import Any

from seed_jax.envs.webshop.catalog import CatalogError, load_attributes

BRANDS = ("Norvane", "Kestrel", "Altamira", "Velmont", "Lumio", "Zephra", "Quorra", "Ostrava",
          "Brisco", "Calder", "Maribel", "Tovani", "Evanth", "Solvig", "Padrino", "Winsome")
COLORS = ("Black", "White", "Navy", "Grey", "Pink", "Purple", "Brown", "Beige", "Olive",
          "Teal", "Khaki", "Ivory")
APPAREL_SIZES = ("Small", "Medium", "Large", "X-Large", "XX-Large")
GENERIC_SIZES = ("Pack of 1", "Pack of 2", "Pack of 4", "Pack of 6")
FLAVORS = ("Original", "Spicy", "Honey", "Smoky", "Vanilla", "Mango")

CATEGORY_KEYWORDS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("fashion", "Clothing, Shoes & Jewelry", ("men's", "women's")),
    ("food", "Grocery & Gourmet Food", (
        "applesauce", "beverage", "breakfast", "candy", "chees", "deli", "dried fruit", "food",
        "meal kit", "frozen", "granola", "meat", "milks", "pantry", "snack", "wasabi")),
    ("furniture", "Home & Kitchen", (
        "plants", "rack", "stool", "bases", "bed", "bookcase", "cabinet", "candle", "table",
        "armoire", "decorative", "desk", "dining", "furniture", "hall tree", "home office",
        "kitchen island", "living room", "mattress", "mirror", "nightstand", "ottoman",
        "chandelier", "sconce", "lamp", "blanket", "tv stand", "vanities", "wall art",
        "window covering")),
    ("electronics", "Electronics", (
        "receiver", "amplifier", "bags & cases", "binocular", "blu-ray", "bluetooth",
        "car accessories", "cd player", "charger", "camera", "flash", "hdmi", "headphone",
        "iphone", "lens", "mac", "mount", "multiroom", "game", "power protection", "printer",
        "projector", "screen protector", "signal booster", "soundbar", "streaming",
        "surround", "television", "tripod", "turntable", "photography", "vcr", "video",
        "virtual reality", "wearable")),
)
DEFAULT_CATEGORY = ("beauty", "Beauty & Personal Care")


def extract_query(instruction: str, attributes: list[str]) -> str:
    """Product type of a synthetic instruction ``"Find me <attrs> <type> [with|for <attrs>]"``."""
    rest = instruction[len("Find me "):] if instruction.startswith("Find me ") else instruction
    changed = True
    while changed:  # leading attributes, separated by ", " or " "
        changed = False
        for attr in attributes:
            for sep in (", ", " "):
                if rest.startswith(attr + sep):
                    rest, changed = rest[len(attr) + len(sep):], True
                    break
            if changed:
                break
    for m in re.finditer(r" (with|for) ", rest):  # first split whose tail is only attributes
        tail = re.split(r", | with | for ", rest[m.end():])
        if all(t in attributes for t in tail):
            return rest[:m.start()].strip()
    return rest.strip()


def category_of(query: str) -> tuple[str, str]:
    """(WebShop category, department label) from keywords of the product type."""
    for category, department, keys in CATEGORY_KEYWORDS:
        if any(k in query for k in keys):
            return category, department
    return DEFAULT_CATEGORY


def title_case(text: str) -> str:
    return " ".join(w[:1].upper() + w[1:] for w in text.split(" "))


def _texts(brand: str, query: str, attrs: list[str]) -> tuple[str, str, list[str]]:
    shown = [title_case(a) for a in attrs[:6]]
    name = f"{brand} {title_case(query)}"
    if shown:
        name += " - " + ", ".join(shown)
    desc = f"{brand} {query}. "
    desc += (f"This item offers {', '.join(attrs)}." if attrs else "A dependable everyday choice.")
    bullets = [f"{title_case(a)}: verified by the {brand} team" for a in attrs[:5]]
    bullets = bullets or [f"{brand} quality {query}"]
    return name, desc, bullets


def _options(category: str, asin: str, rng: random.Random, text: str) -> dict[str, list[dict]]:
    kinds: list[tuple[str, tuple[str, ...]]] = []
    roll = rng.random()
    if category == "fashion":
        if roll < 0.85:
            kinds = [("Color", COLORS), ("Size", APPAREL_SIZES)]
        elif roll < 0.95:
            kinds = [("Size", APPAREL_SIZES)]
    elif category == "food":
        if roll < 0.5:
            kinds = [("Flavor Name", FLAVORS), ("Size", GENERIC_SIZES)]
        elif roll < 0.8:
            kinds = [("Size", GENERIC_SIZES)]
    elif roll < 0.45:
        kinds = [("Color", COLORS)]
    elif roll < 0.75:
        kinds = [("Color", COLORS), ("Size", GENERIC_SIZES)]
    out: dict[str, list[dict]] = {}
    for name, pool in kinds:
        values = [v for v in pool if v.lower() not in text]
        if len(values) < 2:
            continue
        k = rng.randint(2, min(4, len(values)))
        chosen = sorted(rng.sample(values, k), key=pool.index)
        out[name] = [{"value": v, "image": f"generated://{asin}/{v.lower().replace(' ', '-')}.jpg"}
                     for v in chosen]
    return out


def _pricing(rng: random.Random) -> str:
    low = round(rng.uniform(4.0, 120.0), 2)
    if rng.random() < 0.25:
        return f"${low:.2f} - ${low + round(rng.uniform(2.0, 25.0), 2):.2f}"
    return f"${low:.2f}"


def generate_products(attributes: dict[str, dict], seed: int = 0,
                      num_products: int | None = None) -> list[dict[str, Any]]:
    """Raw products (official items_shuffle schema) for the asins of an attributes mapping."""
    rng = random.Random(seed)
    goal_asins = [a for a, e in attributes.items() if e.get("instruction")]
    if not goal_asins:
        raise CatalogError("attributes file has no asin with an 'instruction'; cannot derive product types")
    queries = {a: extract_query(attributes[a]["instruction"], attributes[a]["instruction_attributes"])
               for a in goal_asins}
    goal_attr_sets = [(a, set(attributes[a].get("attributes", []))) for a in goal_asins]
    products, rr = [], 0
    for asin, entry in attributes.items():
        attrs = list(entry.get("attributes", []))
        if asin in queries:
            query = queries[asin]
            attrs = list(dict.fromkeys(entry["instruction_attributes"] + attrs))
        else:
            own = set(attrs)
            best = max(goal_attr_sets, key=lambda t: len(own & t[1]) / (len(own | t[1]) or 1))
            if not own or not (own & best[1]):
                best = goal_attr_sets[rr % len(goal_attr_sets)]
                rr += 1
            query = queries[best[0]]
        category, department = category_of(query)
        brand = BRANDS[rng.randrange(len(BRANDS))]
        name, desc, bullets = _texts(brand, query, attrs)
        text = " ".join([name, desc, *bullets]).lower()
        products.append({
            "asin": asin,
            "name": name,
            "category": category,
            "query": query,
            "product_category": f"{department} › {title_case(query)}",
            "full_description": desc,
            "small_description": bullets,
            "pricing": _pricing(rng),
            "customization_options": _options(category, asin, rng, text),
            "images": [f"generated://{asin}/main.jpg"],
            "brand": brand,
            "product_information": {},
        })
    rng.shuffle(products)
    return products[:num_products] if num_products is not None else products


def write_catalog(attributes_path: str | os.PathLike, out_path: str | os.PathLike,
                  seed: int = 0, num_products: int | None = None) -> int:
    """Generate from `attributes_path` and write `out_path`; returns the number of products."""
    products = generate_products(load_attributes(attributes_path), seed, num_products)
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(products, f)
    return len(products)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--attributes", required=True, help="items_ins_v2*.json (real)")
    ap.add_argument("--out", required=True, help="output items_shuffle-format JSON")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--num-products", type=int, default=None)
    args = ap.parse_args(argv)
    n = write_catalog(args.attributes, args.out, args.seed, args.num_products)
    print(f"wrote {n} products to {args.out}")


if __name__ == "__main__":
    main()
