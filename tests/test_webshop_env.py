"""WebShop environment: data loading, original reward formula, pages, actions, prompt.

Everything runs on a catalog generated in the official items_shuffle schema from the real
items_ins_v2_1000.json (the official product catalog is not available). Expected scores are
computed by hand from the original formula
``(n_att + n_opt + r_price) / (|attrs| + |options| + 1) * r_type``.
"""

from __future__ import annotations

import functools
import itertools
import json
import math
import os
import pickle
import random
import re

import numpy as np
import pytest

from seed_jax.envs.webshop.catalog import CatalogError, load_catalog, load_products, read_json
from seed_jax.envs.webshop.env import WEBSHOP_SPEC, default_goals_path, load_goals, make_webshop_env
from seed_jax.envs.webshop.generate import extract_query, write_catalog
from seed_jax.envs.webshop.reward import get_reward, get_type_reward
from seed_jax.envs.webshop.search import BM25Index, analyze, stem
from seed_jax.envs.webshop.textmatch import normalize_color, token_set_ratio

# $SEED_WEBSHOP_DATA/items_ins_v2_1000.json when present, else the vendored .json.gz (same content)
ATTR_PATH = os.fspath(default_goals_path())
RAW_KEYS = {"asin", "name", "category", "query", "product_category", "full_description",
            "small_description", "pricing", "customization_options", "images", "brand",
            "product_information"}


def act(text: str) -> str:
    return f"<think>step</think><action>{text}</action>"


@pytest.fixture(scope="module")
def catalog_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("webshop") / "items_shuffle_generated.json"
    write_catalog(ATTR_PATH, path)
    return os.fspath(path)


@pytest.fixture(scope="module")
def raw_products(catalog_file):
    with open(catalog_file) as f:
        return {p["asin"]: p for p in json.load(f)}


@pytest.fixture()
def env(catalog_file):
    return make_webshop_env(catalog_path=catalog_file, goals_path=ATTR_PATH)


def product_text(p) -> str:
    return " ".join([p.Title, " ".join(p.BulletPoints), p.Description]).lower()


def find_goal(env, pred):
    for i, g in enumerate(env.catalog.goals):
        if pred(g):
            return i, g
    raise AssertionError("no goal satisfies the predicate")


def open_item(env, asin: str) -> None:
    """Search the product's own query and click it (paging forward if needed)."""
    product = env.catalog.by_asin[asin]
    env.step(act(f"search[{product.Title}]"))
    for _ in range(6):
        if asin.lower() in env.engine.clickables():
            _, r, _, info = env.step(act(f"click[{asin.lower()}]"))
            assert info["valid"] and r == 0.0
            assert env.engine.page_type == "item"
            return
        env.step(act("click[next >]"))
    raise AssertionError(f"{asin} not found in search results")


# ------------------------------------------------------------------ data files


def test_generated_catalog_uses_official_schema_and_real_asins(raw_products):
    ins = read_json(ATTR_PATH, "attributes")
    assert set(raw_products) == set(ins)  # one product per real asin
    for p in raw_products.values():
        assert set(p) == RAW_KEYS
        assert re.fullmatch(r"\$\d+\.\d\d( - \$\d+\.\d\d)?", p["pricing"])
        for contents in p["customization_options"].values():
            assert all(set(c) == {"value", "image"} for c in contents)
    # product types parsed from real instructions (hand-read)
    assert raw_products["B07HRFSNL4"]["query"] == "men's dress shirts"
    assert raw_products["B094Q7B3SS"]["query"] == "women's tops, tees & blouses"
    assert raw_products["B09R4RJSFP"]["query"] == "hair masks"
    assert extract_query("Find me floor lamps for living room, dining room",
                         ["living room", "dining room"]) == "floor lamps"


def test_loader_cleans_as_original(catalog_file, raw_products):
    products = {p.asin: p for p in load_products(catalog_file, ATTR_PATH)}
    ins = read_json(ATTR_PATH, "attributes")
    for asin, raw in raw_products.items():
        p = products[asin]
        assert p.Title == raw["name"] and p.Description == raw["full_description"]
        assert p.Attributes == ins[asin]["attributes"]
        dollars = [float(x) for x in re.findall(r"\$([\d.]+)", raw["pricing"])]
        assert p.pricing == dollars
        assert p.Price == ("$" + " to $".join(str(x) for x in dollars))
        assert p.options == {k.lower(): [c["value"].lower() for c in v]
                             for k, v in raw["customization_options"].items()}
        # no option value can be rescued by the text match of the reward
        assert not any(v in product_text(p) for vals in p.options.values() for v in vals)


def test_synthetic_goals_follow_original_rules(catalog_file, raw_products):
    cat = load_catalog(catalog_file, ATTR_PATH)
    ins = read_json(ATTR_PATH, "attributes")
    expected = sum(math.prod(len(v) for v in raw_products[a]["customization_options"].values())
                   for a, e in ins.items() if "instruction" in e)
    assert len(cat.goals) == expected
    # original order: products in file order, option combinations (names sorted), then
    # random.seed(233); random.shuffle(goals)
    unshuffled = []
    for asin, raw in raw_products.items():
        if "instruction" not in ins[asin]:
            continue
        opts = {k.lower(): [c["value"].lower() for c in v] for k, v in raw["customization_options"].items()}
        names = sorted(opts)
        unshuffled += [(asin, dict(zip(names, combo))) for combo in itertools.product(*(opts[n] for n in names))]
    random.Random(233).shuffle(unshuffled)
    assert [(g.asin, g.goal_options) for g in cat.goals] == unshuffled
    for g in cat.goals[:300]:
        opts = ", and ".join(f"{k}: {v}" for k, v in sorted(g.goal_options.items()))
        price = cat.prices[g.asin]
        tens = [10.0 * i for i in range(1, 100) if 10.0 * i > price][:4]
        assert g.price_upper in tens[1:]  # larger of two distinct draws from the first four
        text = ins[g.asin]["instruction"] + (" with " + opts if opts else "")
        assert g.instruction_text == text + f", and price lower than {g.price_upper:.2f} dollars"
        assert g.attributes == ins[g.asin]["instruction_attributes"]
        lo_hi = cat.by_asin[g.asin].pricing
        assert lo_hi[0] <= price <= lo_hi[-1]


def test_human_goals_loader(tmp_path, catalog_file, raw_products):
    asin = "B07HRFSNL4"
    human = {asin: [
        {"asin": asin, "instruction": "i want a classic fit dress shirt.", "instruction_attributes":
         ["classic fit"], "instruction_options": ["white", "large"]},
        {"asin": asin, "instruction": "no attributes here", "instruction_attributes": [],
         "instruction_options": []}]}
    path = tmp_path / "items_human_ins.json"
    path.write_text(json.dumps(human))
    cat = load_catalog(catalog_file, ATTR_PATH, human_path=path, human_goals=True)
    assert len(cat.goals) == 1  # the instruction without attributes is skipped
    g = cat.goals[0]
    assert g.instruction_text.startswith("i want a classic fit dress shirt, and price lower than ")
    assert g.goal_options == ["white", "large"] and g.name == raw_products[asin]["name"]


@pytest.mark.parametrize("content, needle", [
    ("{not json", "not valid JSON"),
    (json.dumps({"asin": "B0"}), "expected a JSON list"),
    (json.dumps([{"asin": "B000000001", "category": "c", "query": "q", "product_category": "a",
                  "full_description": "", "small_description": [], "customization_options": {}}]),
     "'name'"),
    (json.dumps([{"asin": "B000000001", "name": "n", "category": "c", "query": "q",
                  "product_category": "a", "full_description": "", "small_description": [],
                  "customization_options": {}, "pricing": "$abc"}]), "'pricing'"),
    (json.dumps([{"asin": "B000000001", "name": "n", "category": "c", "query": "q",
                  "product_category": "a", "full_description": "", "small_description": [],
                  "customization_options": {"Color": [{"image": None}]}}]), "'value'"),
])
def test_malformed_products_file_raises_clear_error(tmp_path, content, needle):
    path = tmp_path / "items_shuffle_bad.json"
    path.write_text(content)
    with pytest.raises(CatalogError) as e:
        load_products(path, ATTR_PATH)
    assert needle in str(e.value) and str(path) in str(e.value)


def test_malformed_or_missing_attributes_file(tmp_path, catalog_file):
    bad = tmp_path / "items_ins_bad.json"
    bad.write_text(json.dumps({"B07HRFSNL4": {"attributes": [], "instruction": "Find me x"}}))
    with pytest.raises(CatalogError, match="instruction_attributes") as e:
        load_products(catalog_file, bad)
    assert str(bad) in str(e.value)
    with pytest.raises(CatalogError, match="not found"):
        load_products(catalog_file, tmp_path / "missing.json")


# ------------------------------------------------------------------ reward pieces


def test_token_set_ratio_and_color_normalisation_hand_values():
    assert token_set_ratio("black", "block") == 80  # LCS 4: 2*4/10
    assert token_set_ratio("rose gold", "Gold") == 100  # subset
    assert token_set_ratio("high quality", "quality, high") == 100
    assert token_set_ratio("machine wash", "hand wash") == 67  # LCS("wash machine","wash hand")=7: 14/21
    assert token_set_ratio("natural ingredient", "natural ingredients") == 97  # 36/37
    assert token_set_ratio("", "x") == 0
    for s, want in [("", ""), ("black forest", "black"), ("violet lavender", "lavender"),
                    ("steelivy fuchsia", "fuchsia"), ("123alabaster", "alabaster"),
                    ("webshop", "webshop"), ("navy blue", "blue"), ("light blue", "blue")]:
        assert normalize_color(s) == want


def _hand_product(**kw):
    base = {"asin": "B000000001", "name": "Acme Cotton Dress Shirt", "Title": "Acme Cotton Dress Shirt",
            "query": "men's dress shirts", "product_category": "Clothing › Men › Shirts",
            "Attributes": ["tea tree oil", "natural ingredient"], "BulletPoints": ["soft"],
            "Description": "a gluten free shirt"}
    base.update(kw)
    return base


def test_reward_formula_hand_computed():
    goal = {"asin": "B000000001", "name": "Acme Cotton Dress Shirt", "query": "men's dress shirts",
            "product_category": "Clothing › Men › Shirts", "price_upper": 30.0,
            "attributes": ["tea tree", "natural ingredients", "gluten free"],
            "goal_options": {"color": "navy blue", "size": "large"}}
    # attrs: subset (100), 97 > 85, text match -> 3/3; color light blue ~ navy blue (both
    # normalise to "blue") -> match; size exact: "x-large" != "large" -> miss; price ok.
    r = get_reward(_hand_product(), goal, 20.0, {"color": "light blue", "size": "x-large"})
    assert (r.num_attr_matches, r.num_option_matches, r.r_price) == (3, 1, True)
    assert r.score == pytest.approx((3 + 1 + 1) / (3 + 2 + 1))
    r = get_reward(_hand_product(), goal, 31.0, {"color": "navy", "size": "large"})
    assert r.score == pytest.approx((3 + 1 + 0) / 6)  # navy != blue (fuzzy 0), size ok, price over


def test_type_reward_rules_hand_computed():
    goal = {"name": "Bamboo Towel Rack Holder Stand Shelf Hook Bar Rod Mount",  # 10 nouns
            "query": "towel racks", "product_category": "Home › Bath › Towel Racks"}
    def t(name, query="other", cat="Garden › Tools"):
        return get_type_reward({"name": name, "query": query, "product_category": cat}, goal)
    assert t("Bamboo Towel Cabinet").r_type == 0.5  # title 2/10 = 0.2, not > 0.2
    assert t("Bamboo Towel Rack Cabinet").r_type == 1.0  # 3/10 > 0.2
    assert t("Bamboo Lamp").r_type == 0.5  # 1/10 = 0.1: no match (0.5), and not < 0.1
    assert t("Bamboo Lamp").title_score == pytest.approx(0.1)
    assert t("Garden Lamp").r_type == 0.0  # no shared noun
    assert t("Garden Lamp", query="towel racks").r_type == 0.0  # title 0 overrides a query match
    assert t("Bamboo Towel Cabinet", cat="Home › Bath › Mats").category_match is True
    assert t("Bamboo Towel Cabinet", cat="Home › Bath › Mats").r_type == 1.0
    goal11 = dict(goal, name=goal["name"] + " Hanger")  # 11 nouns
    assert get_type_reward({"name": "Bamboo Lamp", "query": "x", "product_category": "y"},
                           goal11).r_type == pytest.approx(0.1)  # 1/11 < 0.1


# ------------------------------------------------------------------ episodes


def _two_option_goal(env):
    return find_goal(env, lambda g: len(g.goal_options) == 2 and "size" in g.goal_options
                     and "color" in g.goal_options)


def test_scripted_purchase_reaches_score_one(env):
    i, goal = _two_option_goal(env)
    obs, info = env.reset({"task_id": f"webshop/{i}", "goal_index": i})
    assert obs == f"WebShop [SEP] Instruction: [SEP] {goal.instruction_text} [SEP] Search"
    assert info["available_actions"] == ["search[<your query>]"]
    obs, r, done, info = env.step(act(f"search[{goal.query} {' '.join(goal.attributes)}]"))
    assert (r, done, info["valid"]) == (0.0, False, True)
    assert obs.startswith(f"Instruction: [SEP] {goal.instruction_text} [SEP] Back to Search [SEP] Page 1 (Total results: ")
    for _ in range(5):
        if goal.asin.lower() in info["clickables"]:
            break
        obs, r, done, info = env.step(act("click[next >]"))
    obs, r, done, info = env.step(act(f"click[{goal.asin}]"))  # upper case is lower-cased
    p = env.catalog.by_asin[goal.asin]
    opt_text = " [SEP] ".join(f"{k} [SEP] " + " [SEP] ".join(v) for k, v in p.options.items())
    assert obs == (f"Instruction: [SEP] {goal.instruction_text} [SEP] Back to Search [SEP] < Prev [SEP] "
                   f"{opt_text} [SEP] {p.Title} [SEP] Price: {p.Price} [SEP] Rating: N.A. [SEP] "
                   "Description [SEP] Features [SEP] Reviews [SEP] Buy Now")
    assert info["clickables"][:6] == ["back to search", "< prev", "description", "features", "reviews", "buy now"]
    obs, r, done, info = env.step(act("click[features]"))
    assert obs.endswith("Back to Search [SEP] < Prev [SEP] " + " [SEP] ".join(p.BulletPoints))
    env.step(act("click[< prev]"))
    for value in goal.goal_options.values():
        obs, r, done, info = env.step(act(f"click[{value}]"))
        assert info["valid"] and not done
    obs, r, done, info = env.step(act("click[Buy Now]"))
    assert (r, done, info["won"], info["score"]) == (10.0, True, True, 1.0)
    assert info["purchased_asin"] == goal.asin
    assert obs == "Thank you for shopping with us! [SEP] Your score (min 0.0, max 1.0) [SEP] 1.0"
    with pytest.raises(RuntimeError):
        env.step(act("click[buy now]"))


@pytest.mark.parametrize("mode", ["wrong_size", "wrong_color", "missing_color"])
def test_wrong_options_reduce_score_by_formula(env, mode):
    i, goal = _two_option_goal(env)
    p = env.catalog.by_asin[goal.asin]
    k = len(goal.attributes)
    env.reset(i)
    open_item(env, goal.asin)
    chosen = dict(goal.goal_options)
    if mode == "wrong_size":
        chosen["size"] = next(v for v in p.options["size"] if v != goal.goal_options["size"])
    elif mode == "wrong_color":
        chosen["color"] = next(v for v in p.options["color"] if v != goal.goal_options["color"])
    else:
        del chosen["color"]
    wrong = set(chosen.values()) - set(goal.goal_options.values())
    assert not any(w in product_text(p) for w in wrong)  # no rescue by text match
    for value in chosen.values():
        env.step(act(f"click[{value}]"))
    _, r, done, info = env.step(act("click[buy now]"))
    assert done and r == 0.0 and not info["won"]
    assert info["score"] == pytest.approx((k + 1 + 1) / (k + 2 + 1))


def test_price_above_upper_loses_price_point(env):
    i, goal = _two_option_goal(env)
    price = env.catalog.prices[goal.asin]
    cheap = dict(goal.to_dict(), price_upper=math.floor(price) - 1.0)
    env.reset({"task_id": "custom", "goal": cheap})
    open_item(env, goal.asin)
    for value in goal.goal_options.values():
        env.step(act(f"click[{value}]"))
    _, r, done, info = env.step(act("click[buy now]"))
    k = len(goal.attributes)
    assert info["reward_info"]["r_price"] is False
    assert info["score"] == pytest.approx((k + 2 + 0) / (k + 2 + 1)) and r == 0.0


def test_wrong_product_type_gets_type_penalty(env):
    i, goal = _two_option_goal(env)
    words = lambda s: set(re.findall(r"[a-z]+", s.lower()))  # noqa: E731
    gp = env.catalog.by_asin[goal.asin]
    other = next(p for p in env.catalog.products if p.category != gp.category
                 and not words(p.name) & words(goal.name))
    env.reset(i)
    open_item(env, other.asin)
    _, r, done, info = env.step(act("click[buy now]"))
    ri = info["reward_info"]
    assert (ri["query_match"], ri["category_match"], ri["title_score"]) == (False, False, 0.0)
    assert ri["r_type"] == 0.0 and info["score"] == 0.0 and r == 0.0 and done


@pytest.mark.parametrize("response, reason", [
    ("search[shoes]", "missing"),
    ("<action>search[a]</action><action>search[b]</action>", "duplicated"),
    ("<action>buy[shoes]</action>", "malformed"),
    ("<action>search[ ]</action>", "malformed"),
    ("<action>click[back to search]</action>", "unavailable"),
    ("<action>click[buy now]</action>", "unavailable"),
])
def test_invalid_actions_on_search_page_are_penalised_no_ops(env, response, reason):
    obs0, _ = env.reset(0)
    obs, r, done, info = env.step(response)
    assert (r, done, info["valid"], info["reason"]) == (-WEBSHOP_SPEC.invalid_penalty, False, False, reason)
    assert obs == obs0 and info["page"] == "search" and info["step"] == 1


def test_invalid_actions_on_results_page_leave_page_unchanged(env):
    env.reset(0)
    obs0, _, _, info0 = env.step(act("search[men's shirts]"))
    state0 = (env.engine.page, list(env.engine.results), env.engine.page_type)
    for bad in [act("search[hats]"), act("click[b000000000]"), "no tags click[next >]",
                act("click[description]"), act("click[< prev]")]:
        obs, r, done, info = env.step(bad)
        assert r == -0.1 and not info["valid"] and obs == obs0
        assert (env.engine.page, list(env.engine.results), env.engine.page_type) == state0


def test_pagination(env):
    env.reset(0)
    obs, _, _, info = env.step(act("search[men]"))
    docs = [" ".join([p.Title, p.Description, p.BulletPoints[0]]).lower() for p in env.catalog.products]
    n_match = sum(1 for d in docs if re.search(r"\bmen\b", d))
    total = min(50, n_match)
    assert total > 20
    results = env.engine.results
    assert len(results) == total
    assert f"Page 1 (Total results: {total}) [SEP] Next > [SEP] {results[0]}" in obs
    assert info["clickables"] == ["back to search", "next >"] + [a.lower() for a in results[:10]]
    obs, _, _, info = env.step(act("click[next >]"))
    assert f"Page 2 (Total results: {total}) [SEP] < Prev [SEP] Next > [SEP] {results[10]}" in obs
    assert info["clickables"] == ["back to search", "< prev", "next >"] + [a.lower() for a in results[10:20]]
    obs, _, _, info = env.step(act("click[< prev]"))
    assert info["clickables"][2:] == [a.lower() for a in results[:10]]
    with_opts = next(a for a in results[:10] if env.catalog.by_asin[a].options)
    env.step(act(f"click[{with_opts}]"))  # item page: choose an option, then < Prev
    first_value = next(iter(env.catalog.by_asin[with_opts].options.values()))[0]
    env.step(act(f"click[{first_value}]"))
    assert env.engine.options != {}
    obs, _, _, info = env.step(act("click[< prev]"))  # back to results page 1, options cleared
    assert info["page"] == "results" and env.engine.page == 1 and env.engine.options == {}
    for _ in range(math.ceil(total / 10)):
        obs, _, _, info = env.step(act("click[next >]"))
    assert info["clickables"] == ["back to search", "< prev", "next >"]  # past the last result
    obs, _, _, info = env.step(act("click[back to search]"))
    assert info["page"] == "search" and info["available_actions"] == ["search[<your query>]"]


def test_max_steps_and_prompt_history(env):
    i, goal = _two_option_goal(env)
    env.reset(i)
    prompt = env.build_prompt()
    task_lines = [l for l in prompt.splitlines() if l.startswith("Your task is to: ")]
    assert task_lines == [f"Your task is to: {goal.instruction_text}."]
    assert "<think> </think>" in prompt and "<action> </action>" in prompt
    assert "Your current observation is: 'Search'." in prompt
    env.step(act("search[lamp]"))
    env.step("garbage")
    env.step(act("click[next >]"))
    prompt = env.build_prompt()
    assert "already taken 3 step(s)" in prompt and "most recent 2 observations" in prompt
    assert "Action 1:" not in prompt and "Action 2: '<invalid: missing>'" in prompt
    assert "Action 3: 'click[next >]'" in prompt and "You are now at step 4" in prompt
    assert "'click[< prev]'," in prompt and "'search[<your query>]'" not in prompt
    done = False
    for _ in range(4, 16):
        assert not done
        _, r, done, info = env.step("no action")
    assert done and info["truncated"] and r == -0.1 and info["step"] == WEBSHOP_SPEC.max_steps


def test_factory_is_picklable_and_tasks_serialisable(catalog_file):
    factory = functools.partial(make_webshop_env, catalog_path=catalog_file, goals_path=ATTR_PATH)
    env = pickle.loads(pickle.dumps(factory))()
    tasks = load_goals(catalog_file, ATTR_PATH, split="test", limit=5)
    assert json.loads(json.dumps(tasks)) == tasks
    assert [t["goal_index"] for t in tasks] == [0, 1, 2, 3, 4]
    assert set(tasks[0]) == {"task_id", "goal_index", "asin", "instruction", "category", "split"}
    assert len(load_goals(catalog_file, ATTR_PATH, split="eval")) == 1000
    obs, info = env.reset(tasks[2])
    assert tasks[2]["instruction"] in obs and env.task_description == tasks[2]["instruction"]
    with pytest.raises(CatalogError):
        env.reset(dict(tasks[2], asin="B000000000"))


def test_default_env_generates_catalog_in_memory():
    env = make_webshop_env()
    tasks = load_goals(split="test", limit=2)
    obs, info = env.reset(tasks[0])
    assert obs.startswith("WebShop [SEP] Instruction: [SEP] Find me ")


# ------------------------------------------------------------------ search


def test_analyzer_and_bm25_against_numpy_reference():
    assert [stem(w) for w in ["shoes", "dresses", "accessories", "glass", "cactus", "boxes"]] == \
        ["shoe", "dress", "accessory", "glass", "cactus", "box"]
    assert analyze("The Shoes for a RUN") == ["shoe", "run"]
    docs = ["red shoe for run", "blue run shoe shoe shoe", "green hat", "run run run hat"]
    index = BM25Index((str(i), d) for i, d in enumerate(docs))
    terms = [d.replace(" for", "").split() for d in docs]
    vocab = sorted({t for ts in terms for t in ts})
    tf = np.array([[ts.count(v) for v in vocab] for ts in terms], dtype=float)
    dl = tf.sum(1)
    df = (tf > 0).sum(0)
    idf = np.log(1 + (len(docs) - df + 0.5) / (df + 0.5))
    q = np.array([1.0 if v in ("run", "shoe") else 0.0 for v in vocab])
    norm = 0.9 * (1 - 0.4 + 0.4 * dl / dl.mean())
    ref = ((tf / (tf + norm[:, None])) * idf * q).sum(1)
    np.testing.assert_allclose(index.scores("run shoes"), ref, rtol=1e-12)
    assert index.search("run shoes") == [str(i) for i in np.argsort(-ref, kind="stable") if ref[i] > 0]
