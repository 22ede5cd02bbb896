"""Per-device memory and collective bytes of the SEED train step on fake CPU devices.

    python bench/train_step_sharding.py                        # Qwen2.5-3B shape, 2 layers, 8 devices
    python bench/train_step_sharding.py --layers 4 --mesh 1,8,1 --dtype bfloat16 --remat full

Compiles the train step (and the old/ref log-prob pass) ahead of time for a Qwen2.5-3B-shaped
decoder with few layers (nothing is materialised: state and batch are ShapeDtypeStructs with
the run's shardings) on ``--devices`` fake CPU devices, and prints XLA's ``memory_analysis()``
per device and the bytes of every collective kind read from the compiled HLO (each op's result
bytes, times the trip counts of the while loops around it; per device). The per-layer figures
scale linearly to the full depth. Figures are printed, nothing is asserted; the memory figures
are XLA:CPU's and approximate a GPU / TPU compile.
"""

from __future__ import annotations

import argparse
import os
import re
import sys


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--devices", type=int, default=8)
    ap.add_argument("--mesh", default="1,8,1", help="data,fsdp,tensor")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--rows", type=int, default=32, help="mini-batch rows")
    ap.add_argument("--micro", type=int, default=16, help="rows per micro-batch")
    ap.add_argument("--prompt", type=int, default=2048)
    ap.add_argument("--resp", type=int, default=512)
    ap.add_argument("--dtype", default="bfloat16", help="compute dtype (master weights float32)")
    ap.add_argument("--remat", default="full")
    ap.add_argument("--attention", default="reference")
    ap.add_argument("--programs", default="train,logprobs")
    return ap.parse_args(argv)


_SHAPE = re.compile(r"(pred|s8|u8|s16|u16|s32|u32|s64|u64|bf16|f16|f32|f64)\[([0-9,]*)\]")
_BYTES = {"pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "bf16": 2, "f16": 2,
          "s32": 4, "u32": 4, "f32": 4, "s64": 8, "u64": 8, "f64": 8}
KINDS = ("all-gather", "reduce-scatter", "all-reduce", "all-to-all", "collective-permute")


def shape_bytes(text: str) -> int:
    """Bytes of every array shape in ``text`` (a result type, possibly a tuple)."""
    total = 0
    for dt, dims in _SHAPE.findall(text):
        n = 1
        for d in filter(None, dims.split(",")):
            n *= int(d)
        total += n * _BYTES[dt]
    return total


def collective_bytes(hlo: str) -> dict[str, float]:
    """``{kind: bytes}`` of the collectives in optimized HLO text, loop trip counts applied."""
    comps, cur = {}, None
    for line in hlo.splitlines():
        m = re.match(r"^(ENTRY\s+)?%?([\w.\-]+)\s.*\{\s*$", line)
        if m and not line.startswith(" "):
            cur = m.group(2)
            comps[cur] = {"entry": bool(m.group(1)), "lines": []}
        elif cur is not None:
            comps[cur]["lines"].append(line)
    calls = {c: [] for c in comps}  # callee, factor
    for c, info in comps.items():
        for line in info["lines"]:
            trip = re.search(r'"known_trip_count":\{"n":"(\d+)"', line)
            for callee in re.findall(r"(?:body|condition|calls|to_apply|branch_computations)=\{?%?([\w.\-]+)", line):
                factor = int(trip.group(1)) if (trip and " while(" in line) else 1
                calls[c].append((callee, factor))
    mult = dict.fromkeys(comps, 0.0)
    for c, info in comps.items():
        if info["entry"]:
            mult[c] = 1.0
    for _ in range(len(comps)):
        changed = False
        for c in comps:
            for callee, f in calls[c]:
                if callee in mult and mult[c] * f > mult[callee]:
                    mult[callee] = mult[c] * f
                    changed = True
        if not changed:
            break
    out = dict.fromkeys(KINDS, 0.0)
    for c, info in comps.items():
        for line in info["lines"]:
            m = re.search(r"=\s*(.+?)\s+(" + "|".join(KINDS) + r")(-start)?\(", line)
            if m:
                text = m.group(1)
                if m.group(3) and m.group(2) == "all-gather":  # async: (operand, result); count the result
                    text = "{}[{}]".format(*_SHAPE.findall(text)[-1])
                out[m.group(2)] += shape_bytes(text) * mult[c]
    return out


def main(argv=None) -> None:
    args = parse_args(argv)
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                               + f" --xla_force_host_platform_device_count={args.devices}")
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import jax
    import jax.numpy as jnp

    from seed_jax.models.config import ModelConfig
    from seed_jax.train.batch import SeedBatch
    from seed_jax.train.config import TrainConfig
    from seed_jax.train.mesh import batch_sharding, make_mesh
    from seed_jax.train.state import abstract_train_state, state_shardings
    from seed_jax.train.step import make_train_step

    data, fsdp, tensor = (int(x) for x in args.mesh.split(","))
    mesh = make_mesh(data, fsdp, tensor)
    cfg = ModelConfig(model_type="qwen2", vocab_size=151936, hidden_size=2048, intermediate_size=11008,
                      num_layers=args.layers, num_heads=16, num_kv_heads=2, head_dim=128, qkv_bias=True,
                      tie_word_embeddings=True,
                      **({} if args.attention == "reference" else {"attention": args.attention}))
    # booleans for none / full: the same policy, also understood by versions that took a bool
    remat = {"none": False, "full": True}.get(args.remat, args.remat)
    tc = TrainConfig(micro_batch_size=args.micro, remat=remat, compute_dtype=args.dtype,
                     param_dtype="float32", lambda_opd=0.01, c_kl=0.01)
    B, Pl, R = args.rows, args.prompt, args.resp
    rows = batch_sharding(mesh)

    def sds(shape, dt, sh=rows):
        return jax.ShapeDtypeStruct(shape, dt, sharding=sh)

    print(f"mesh data={data} fsdp={fsdp} tensor={tensor}; Qwen2.5-3B shape, {args.layers} layers; "
          f"rows {B}, micro {args.micro}, P={Pl}, R={R}; compute {args.dtype}, remat {args.remat}, "
          f"attention {args.attention}")
    gib = 1 << 30
    if "train" in args.programs:
        abstract = abstract_train_state(cfg, tc)
        sh = state_shardings(abstract, mesh)
        state = jax.tree_util.tree_map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), abstract, sh)
        i32, f32 = jnp.int32, jnp.float32
        batch = SeedBatch(student_ids=sds((B, Pl + R), i32), student_mask=sds((B, Pl + R), i32),
                          response_mask=sds((B, R), i32), old_logp=sds((B, R), f32), advantages=sds((B,), f32),
                          ref_logp=sds((B, R), f32), teacher_ids=sds((B, Pl + R), i32),
                          teacher_mask=sds((B, Pl + R), i32), has_skill=sds((B,), i32))
        compiled = make_train_step(cfg, tc, mesh).lower(state, batch).compile()
        report("train step (one optimizer step)", compiled, gib, args.layers)
    if "logprobs" in args.programs:
        from seed_jax.train.logprobs import make_logprob_pass, param_shardings

        ps = param_shardings(cfg, mesh)
        abstract = jax.eval_shape(lambda: __import__("seed_jax.models.decoder", fromlist=["x"]).init_params(
            cfg, jax.random.PRNGKey(0)))
        params = jax.tree_util.tree_map(lambda a, s: jax.ShapeDtypeStruct(a.shape, jnp.dtype(args.dtype), sharding=s),
                                        abstract, ps)
        ids = sds((args.micro, Pl + R), jnp.int32)
        compiled = make_logprob_pass(tc.apply_to(cfg), Pl, R, None, mesh).lower(params, ids, ids).compile()
        report(f"log-prob pass ({args.micro} rows)", compiled, gib, args.layers)


def report(name, compiled, gib, layers) -> None:
    ma = compiled.memory_analysis()
    coll = collective_bytes(compiled.as_text())
    total = ma.argument_size_in_bytes + ma.temp_size_in_bytes + ma.output_size_in_bytes - ma.alias_size_in_bytes
    print(f"\n{name}: per device  args {ma.argument_size_in_bytes / gib:.2f} GiB  temp "
          f"{ma.temp_size_in_bytes / gib:.2f} GiB  out {ma.output_size_in_bytes / gib:.2f} GiB  "
          f"alias {ma.alias_size_in_bytes / gib:.2f} GiB  total {total / gib:.2f} GiB")
    print("  collectives per device (GiB):  " + "  ".join(f"{k} {v / gib:.3f}" for k, v in coll.items()
                                                         if v) + f"  | sum {sum(coll.values()) / gib:.3f}"
          f"  ({sum(coll.values()) / gib / layers:.3f} per layer incl. head/embedding share)")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
