"""Text WebShop (princeton-nlp/WebShop reproduced without its web stack), see README.md here."""

from seed_jax.envs.webshop.catalog import Catalog, CatalogError, Goal, Product, load_catalog
from seed_jax.envs.webshop.env import WEBSHOP_SPEC, WebShopEnv, get_site, load_goals, make_webshop_env
from seed_jax.envs.webshop.reward import RewardBreakdown, get_reward

__all__ = ["Catalog", "CatalogError", "Goal", "Product", "load_catalog", "WEBSHOP_SPEC",
           "WebShopEnv", "get_site", "load_goals", "make_webshop_env", "RewardBreakdown",
           "get_reward"]
