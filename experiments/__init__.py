"""Experiments built on seed_jax (on top of the library; nothing in seed_jax/ imports them)."""
