"""A study's finished pieces as compressed archives, so that the study goes on in a later
session, or on another machine, from the very same stage-1 checkpoint.

Stage 0 is trained from scratch, and its float arithmetic differs between CPUs (AMX or not,
AVX-512 or AVX2), so a rerun elsewhere gives another checkpoint: RL seeds run on two
checkpoints are not paired. `pack` stores each finished piece of a study directory ``out``
once as ``ARCHIVE/<piece>.tar.xz``; `unpack` restores the pieces a study directory lacks, and
`experiments.household.experiment.run_study` then skips them as finished. Pieces:

- ``shared``: ``stage0/`` (the policy and its evaluation) and ``base/`` (stage 1 and its
  evaluation); finished when ``base/stages/eval.json`` exists. Not packed when ``out/base`` is
  a link (`link_shared`): the linked study's archive holds it.
- ``start-seed<k>``: ``start/seed<k>/`` (the stage-1 checkpoint's evaluation with seed k);
- ``<arm>-seed<k>``: ``arms/<arm>/seed<k>/`` ('@' in an arm written '_l', as its directory);
  finished when its ``stages/eval.json`` exists.

Left out, as nothing reads them once a piece is finished: XLA caches, TensorBoard events, RL
checkpoints, the stage-0 intermediate ``policy_bc/``, an arm's copies of the stage-1 outputs
(``stage1/``, ``sft/``), and the final model of every seed but ``probe_seed`` (the teacher
probe reads only that one). ``ARCHIVE/timings.json`` keeps the study's timings of the packed
pieces, `unpack` adding those the study's ``timings.json`` lacks; the teacher probe's
``probe.json`` is kept in its latest version (the study probes again when an arm's first seed
has finished since), with its timing, and restored when the study lacks one.
"""

from __future__ import annotations

import json
import re
import tarfile
from collections.abc import Iterator
from pathlib import Path

SHARED = "shared"
TIMINGS = "timings.json"
PROBE = "probe.json"
PROBE_TIMING = "probe"  # the study's timing key of the probe that wrote probe.json
SKIPPED_NAMES = frozenset({"xla_cache", "tb", "ckpt", "policy_bc"})
ARM_COPIES = ("stage1", "sft")


def marker(name: str) -> str:
    """The file (relative to the study directory) whose presence marks piece ``name`` finished."""
    if name == SHARED:
        return "base/stages/eval.json"
    group, seed_dir = name.rsplit("-", 1)
    top = f"start/{seed_dir}" if group == "start" else f"arms/{group}/{seed_dir}"
    return f"{top}/stages/eval.json"


def pieces(out: Path) -> Iterator[tuple[str, list[Path], tuple[str, ...]]]:
    """``(piece name, top-level paths relative to out, its timings keys)`` of every finished piece."""
    out = Path(out)
    if (out / marker(SHARED)).exists() and not (out / "base").is_symlink():
        yield SHARED, [Path("stage0"), Path("base")], ("stage0", "stage0_eval", "stage1")
    for d in sorted((out / "start").glob("seed*")):
        if (out / marker(f"start-{d.name}")).exists():
            yield f"start-{d.name}", [d.relative_to(out)], (f"start/{d.name}",)
    for d in sorted((out / "arms").glob("*/seed*")):
        arm = d.parent.name
        if (out / marker(f"{arm}-{d.name}")).exists():
            yield f"{arm}-{d.name}", [d.relative_to(out)], (f"{re.sub(r'_l(?=[0-9.])', '@', arm)}/{d.name}",)


def _keep(rel: Path, probe_seed: int) -> bool:
    """Whether the file or directory ``rel`` (relative to the study directory) goes in its archive."""
    parts = rel.parts
    if any(p in SKIPPED_NAMES for p in parts):
        return False
    if parts[0] == "arms" and len(parts) >= 4:
        seed_dir, sub = parts[2], parts[3:]
        if sub[0] in ARM_COPIES:
            return False
        if sub[:2] == ("rl", "final_model") and seed_dir != f"seed{probe_seed}":
            return False
    return True


def _files(out: Path, top: Path, probe_seed: int) -> list[Path]:
    root = out / top
    files = [root] if root.is_file() else [p for p in sorted(root.rglob("*")) if p.is_file()]
    return [f.relative_to(out) for f in files if _keep(f.relative_to(out), probe_seed)]


def pack(out: str | Path, archive: str | Path, probe_seed: int = 0) -> list[str]:
    """Archive every finished piece of ``out`` that ``archive`` lacks; returns the new pieces' names."""
    out, archive = Path(out), Path(archive)
    archive.mkdir(parents=True, exist_ok=True)
    timings_path = archive / TIMINGS
    stored = json.loads(timings_path.read_text()) if timings_path.exists() else {}
    study_timings = json.loads((out / TIMINGS).read_text()) if (out / TIMINGS).exists() else {}
    written = []
    for name, tops, keys in pieces(out):
        dst = archive / f"{name}.tar.xz"
        if dst.exists():
            continue
        tmp = dst.with_suffix(".part")
        with tarfile.open(tmp, "w:xz") as tar:
            for top in tops:
                for rel in _files(out, top, probe_seed):
                    tar.add(out / rel, arcname=str(rel), recursive=False)
        tmp.replace(dst)
        stored.update({k: study_timings[k] for k in keys if k in study_timings})
        written.append(name)
    probe = (out / PROBE).read_bytes() if (out / PROBE).exists() else None
    if probe is not None and (not (archive / PROBE).exists() or (archive / PROBE).read_bytes() != probe):
        (archive / PROBE).write_bytes(probe)
        if PROBE_TIMING in study_timings:
            stored[PROBE_TIMING] = study_timings[PROBE_TIMING]
        written.append(PROBE)
    if written:
        timings_path.write_text(json.dumps(stored, indent=1))
    return written


def unpack(archive: str | Path, out: str | Path) -> list[str]:
    """Restore into ``out`` every archived piece whose directory ``out`` lacks (a piece whose
    ``stages/eval.json`` is missing counts as lacking: the files of a run killed part-way are
    overwritten by the archived ones).
    Returns the restored pieces' names."""
    archive, out = Path(archive), Path(out)
    out.mkdir(parents=True, exist_ok=True)
    restored = []
    for tar_path in sorted(archive.glob("*.tar.xz")):
        name = tar_path.name[: -len(".tar.xz")]
        if (out / marker(name)).exists():
            continue
        with tarfile.open(tar_path, "r:xz") as tar:
            tar.extractall(out, filter="data")
        restored.append(name)
    timings_path = archive / TIMINGS
    if restored and timings_path.exists():
        study = json.loads((out / TIMINGS).read_text()) if (out / TIMINGS).exists() else {}
        for k, v in json.loads(timings_path.read_text()).items():
            study.setdefault(k, v)
        (out / TIMINGS).write_text(json.dumps(study, indent=1))
    if (archive / PROBE).exists() and not (out / PROBE).exists():
        (out / PROBE).write_bytes((archive / PROBE).read_bytes())
        restored.append(PROBE)
    return restored
