"""The WebShop site as a text state machine (original ``SimServer`` + templates, 'text' mode).

Pages and their text observation (visible text nodes, stripped, empty ones dropped, joined
with ``" [SEP] "``), as rendered by the original templates:

- search: ``WebShop [SEP] Instruction: [SEP] <instruction> [SEP] Search``
- results: ``Instruction: [SEP] <instruction> [SEP] Back to Search [SEP] Page <p> (Total
  results: <n>) [SEP] [< Prev [SEP]] Next > [SEP] <ASIN> [SEP] <Title> [SEP] <Price> ...``
  (``< Prev`` only after page 1; ``Next >`` always, as in the original template)
- item: ``Instruction: [SEP] <instruction> [SEP] Back to Search [SEP] < Prev [SEP] <option
  name> [SEP] <value> ... [SEP] <Title> [SEP] Price: <Price> [SEP] Rating: <Rating> [SEP]
  Description [SEP] Features [SEP] Reviews [SEP] [Attributes [SEP]] Buy Now``
- item sub-pages: ``... Back to Search [SEP] < Prev [SEP] <description | bullet points |
  "title" [SEP] score [SEP] body per review | attributes, category, query, product category>``
- done: ``Thank you for shopping with us! [SEP] Your score (min 0.0, max 1.0) [SEP] <score>``
  (simplified: the original page also carries hidden purchase details).

Clickables (original ``get_available_actions``): lower-cased button texts, lower-cased asins
of the product links, then the option values (a value that appears under two option names
maps to the last one, as the original dict does). Transitions follow ``SimServer.receive``:
``back to search`` resets the session; ``next >`` / ``< prev`` page through results;
``< prev`` on an item page returns to its results page (clearing chosen options), on a
sub-page to the item page; an asin opens its item page; an option value sets that option;
``buy now`` scores the purchase and ends the session.

Deviation: the search page's own ``Search`` button (listed by the original as the clickable
``search`` although clicking it is a no-op there) is not offered as a clickable.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from seed_jax.envs.webshop.catalog import Catalog, Goal, Product
from seed_jax.envs.webshop.reward import RewardBreakdown, get_reward, noun_tokens
from seed_jax.envs.webshop.search import PRODUCT_WINDOW, SEARCH_RETURN_N, BM25Index, page_slice, product_document

SEP = " [SEP] "
END_BUTTON = "Buy Now"
NEXT_PAGE = "Next >"
PREV_PAGE = "< Prev"
BACK_TO_SEARCH = "Back to Search"
SUB_PAGES = ("Description", "Features", "Reviews", "Attributes")

SEARCH, RESULTS, ITEM, ITEM_SUB, DONE = "search", "results", "item", "item_sub", "done"


def build_index(catalog: Catalog) -> BM25Index:
    """BM25 index over the catalog products (original document layout)."""
    return BM25Index((p.asin, product_document(p.Title, p.Description, p.BulletPoints, p.options))
                     for p in catalog.products)


@dataclasses.dataclass(frozen=True)
class Clickable:
    kind: str  # "button" | "product" | "option"
    option_name: str | None = None


class WebShopEngine:
    """One shopping session over a catalog; `search` / `click` assume the action is available."""

    def __init__(self, catalog: Catalog, index: BM25Index, show_attrs: bool = False,
                 noun_fn: Callable = noun_tokens):
        self.catalog, self.index, self.show_attrs, self.noun_fn = catalog, index, show_attrs, noun_fn
        self.goal: Goal | None = None
        self.page_type = SEARCH
        self.reward: RewardBreakdown | None = None

    # ------------------------------------------------------------------ session state

    def start(self, goal: Goal) -> None:
        """Open a new session on the search page for `goal`."""
        self.goal = goal
        self.reward = None
        self._reset_session()

    def _reset_session(self) -> None:
        self.page_type = SEARCH
        self.keywords: list[str] | None = None
        self.page: int | None = None
        self.results: list[str] = []
        self.asin: str | None = None
        self.options: dict[str, str] = {}
        self.sub_page: str | None = None
        self.visited_asins: set[str] = set()

    @property
    def product(self) -> Product | None:
        return self.catalog.by_asin.get(self.asin) if self.asin else None

    # ------------------------------------------------------------------ actions

    def has_search_bar(self) -> bool:
        return self.page_type == SEARCH

    def clickables(self) -> dict[str, Clickable]:
        """Lower-cased clickable text -> what it is, in page order (see module docstring)."""
        out: dict[str, Clickable] = {}
        button = Clickable("button")
        if self.page_type == RESULTS:
            out[BACK_TO_SEARCH.lower()] = button
            if self.page > 1:
                out[PREV_PAGE.lower()] = button
            out[NEXT_PAGE.lower()] = button
            for asin in page_slice(self.results, self.page):
                out[asin.lower()] = Clickable("product")
        elif self.page_type == ITEM:
            out[BACK_TO_SEARCH.lower()] = button
            out[PREV_PAGE.lower()] = button
            for name in self._sub_page_names():
                out[name.lower()] = button
            out[END_BUTTON.lower()] = button
            for name, values in self.product.options.items():
                for value in values:
                    out[value] = Clickable("option", name)
        elif self.page_type == ITEM_SUB:
            out[BACK_TO_SEARCH.lower()] = button
            out[PREV_PAGE.lower()] = button
        return out

    def _sub_page_names(self) -> tuple[str, ...]:
        return SUB_PAGES if self.show_attrs else SUB_PAGES[:3]

    def search(self, query: str) -> None:
        """Run a search (keywords = query split on spaces, as the original browser)."""
        self.keywords = query.split(" ")
        self._show_results(1)

    def _show_results(self, page: int) -> None:
        self.page_type = RESULTS
        self.page = page
        self.results = self.index.search(" ".join(self.keywords), k=SEARCH_RETURN_N)
        self.asin = None
        self.options = {}
        self.sub_page = None

    def click(self, name: str) -> None:
        """Click the available clickable `name` (lower-cased)."""
        clickable = self.clickables()[name]
        if name == END_BUTTON.lower():
            self._buy()
        elif name == BACK_TO_SEARCH.lower():
            self._reset_session()
        elif name == NEXT_PAGE.lower() and self.page_type == RESULTS:
            self._show_results(self.page + 1)
        elif name == PREV_PAGE.lower() and self.page_type == RESULTS:
            self._show_results(self.page - 1)
        elif name == PREV_PAGE.lower() and self.page_type == ITEM_SUB:
            self.page_type, self.sub_page = ITEM, None
        elif name == PREV_PAGE.lower() and self.page_type == ITEM:
            self._show_results(self.page)
        elif clickable.kind == "button" and name in [s.lower() for s in SUB_PAGES]:
            self.page_type = ITEM_SUB
            self.sub_page = next(s for s in SUB_PAGES if s.lower() == name)
        elif clickable.kind == "product":
            self.asin = name.upper()
            self.visited_asins.add(self.asin)
            self.page_type = ITEM
        elif clickable.kind == "option":
            self.options[clickable.option_name] = name
            self.page_type = ITEM
        else:  # pragma: no cover - every clickable kind is handled above
            raise ValueError(f"unhandled clickable {name!r}")

    def _buy(self) -> None:
        product = self.product
        price = self.catalog.prices[product.asin]
        self.reward = get_reward(product, self.goal, price, dict(self.options), self.noun_fn)
        self.page_type = DONE

    # ------------------------------------------------------------------ rendering

    def observation(self) -> str:
        """Text-mode observation of the current page (see module docstring)."""
        instr = self.goal.instruction_text
        if self.page_type == SEARCH:
            parts = ["WebShop", "Instruction:", instr, "Search"]
        elif self.page_type == RESULTS:
            parts = ["Instruction:", instr, BACK_TO_SEARCH,
                     f"Page {self.page} (Total results: {len(self.results)})"]
            if self.page > 1:
                parts.append(PREV_PAGE)
            parts.append(NEXT_PAGE)
            for asin in page_slice(self.results, self.page):
                p = self.catalog.by_asin[asin]
                parts += [p.asin, p.Title, p.Price]
        elif self.page_type == ITEM:
            p = self.product
            parts = ["Instruction:", instr, BACK_TO_SEARCH, PREV_PAGE]
            for name, values in p.options.items():
                parts += [name, *values]
            parts += [p.Title, f"Price: {p.Price}", f"Rating: {p.Rating}",
                      *self._sub_page_names(), END_BUTTON]
        elif self.page_type == ITEM_SUB:
            p = self.product
            parts = ["Instruction:", instr, BACK_TO_SEARCH, PREV_PAGE]
            if self.sub_page == "Description":
                parts.append(p.Description)
            elif self.sub_page == "Features":
                parts += p.BulletPoints
            elif self.sub_page == "Reviews":
                for r in p.Reviews:
                    parts += [f'"{r.get("title", "")}"', str(r.get("score", "")), str(r.get("body", ""))]
            else:
                parts += [*p.Attributes, p.category, p.query, p.product_category]
        else:
            parts = ["Thank you for shopping with us!", "Your score (min 0.0, max 1.0)",
                     str(self.reward.score)]
        return SEP.join(s.strip() for s in parts if s and s.strip())


__all__ = ["WebShopEngine", "build_index", "Clickable", "PRODUCT_WINDOW", "SEARCH_RETURN_N",
           "SEARCH", "RESULTS", "ITEM", "ITEM_SUB", "DONE", "SEP"]
