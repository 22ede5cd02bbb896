"""What XLA:TPU compiles a reduce-scatter into, per topology (compile-only devices, libtpu).

    python bench/reduce_scatter_probe.py [v5e:2x4 v5e:4x4 v5p:2x2x2 ...]

For each topology, on a 1-D mesh of all its chips, two programs whose result is a sum over the
devices split over them: (a) ``x.T @ x`` of row-sharded ``x`` with a sharded output (the
pattern of a gradient constrained to its fsdp sharding, `seed_jax.train.grad_accum`) and (b) the
same with an explicit ``lax.psum_scatter`` inside ``shard_map``. Printed: the collective opcodes
of the optimised HLO, and whether XLA:TPU's ``all-reduce-scatter`` fusion (its form of a
reduce-scatter: `seed_jax.plan.hlo` counts it as one) is there. Where it is absent the device
all-reduces the whole sum and slices its share, and the plan counts an all-reduce. Nothing is
asserted: the figures belong to the installed libtpu.
"""

from __future__ import annotations

import re
import sys

import jax
import jax.numpy as jnp
from jax.experimental import mesh_utils, topologies
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

OPS = re.compile(r"= [^=]*? (all-reduce|reduce-scatter|all-reduce-start|reduce-scatter-start)\(")


def probe(topology: str, hidden: int = 2048) -> dict[str, str]:
    devs = topologies.get_topology_desc(platform="tpu", topology_name=topology).devices
    mesh = Mesh(mesh_utils.create_device_mesh((len(devs),), devs), ("fsdp",))
    x = jax.ShapeDtypeStruct((len(devs) * 64, hidden), jnp.bfloat16, sharding=NamedSharding(mesh, P("fsdp")))
    implicit = jax.jit(lambda x: x.T @ x, out_shardings=NamedSharding(mesh, P("fsdp")))
    explicit = jax.jit(jax.shard_map(
        lambda x: jax.lax.psum_scatter(x.T @ x, "fsdp", scatter_dimension=0, tiled=True),
        mesh=mesh, in_specs=P("fsdp"), out_specs=P("fsdp")))
    out = {}
    for label, f in (("sharded output", implicit), ("psum_scatter", explicit)):
        text = f.lower(x).compile().as_text()
        fused = "all-reduce-scatter" in text
        out[label] = f"{'+'.join(sorted(set(OPS.findall(text))))}{' in all-reduce-scatter fusion' if fused else ''}"
    return out


def main(argv: list[str]) -> None:
    from importlib.metadata import version

    print(f"jax {jax.__version__}, libtpu {version('libtpu')}")  # the compile-only devices are libtpu's
    print(f"{'topology':<12} {'chips':>5}  {'sharded output':<40} psum_scatter")
    for topology in argv or ["v5e:2x4", "v5e:4x4", "v5p:2x2x2"]:
        n = len(topologies.get_topology_desc(platform="tpu", topology_name=topology).devices)
        r = probe(topology)
        print(f"{topology:<12} {n:>5}  {r['sharded output']:<40} {r['psum_scatter']}")


if __name__ == "__main__":
    main(sys.argv[1:])
