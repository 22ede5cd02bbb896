"""The README's plan table from the JSON files of `bench/plan_paper.sh` (or any ``--json`` plans).

``python bench/plan_table.py bench/plans/*.json`` prints one markdown row per program: GB per
device (of the target's HBM), fits (5% headroom), collective GB per call (for the train step: per
optimizer step), roofline seconds and MFU, compile seconds.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def rows(path: Path) -> list[str]:
    plan = json.loads(path.read_text())
    before = path.name.startswith("before_")
    model = path.name.removeprefix("before_").split("_")[0] + (" (presets before ZeRO-3)" if before else "")
    segs = path.name.removeprefix("before_").split("_", 2)[-1].split(".")  # target[.knob].programs.json
    model += f" `{segs[1]}`" if len(segs) > 3 else ""
    mesh = "x".join(str(v) for v in plan["mesh"].values())
    out = []
    for p in plan["programs"]:
        coll = "-" if p.get("error") else f"{sum(p['collective_bytes'].values()) / 1e9:.1f}"
        mfu = f"{p['mfu']:.0%}" if not p.get("error") else "-"
        roof = f"{p['roofline_s']:.2f}" if not p.get("error") else "-"
        fits = "yes" if p["fits"] else "**no**" + (" (XLA: out of memory)" if p.get("error") else "")
        out.append(f"| {model} | `{plan['target']}` ({mesh}) | {p['name']} | {p['total'] / 1e9:.1f} / "
                   f"{p['hbm'] / 1e9:.1f} | {fits} | {coll} | {roof} | {mfu} | {p['compile_s']:.0f} |")
    return out


def main(paths: list[str]) -> None:
    print("| model | target (data x fsdp x tensor) | program | GB per device / HBM | fits | collective GB | "
          "roofline s | MFU | compile s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for p in paths:
        for r in rows(Path(p)):
            print(r)


if __name__ == "__main__":
    main(sys.argv[1:])
