"""Stage `source_model`: the source model as an artefact, materialised once as a Hugging Face directory.

Whatever `source_model` names — a hub id, a local model directory, or a GGUF file (a path,
`hf://owner/name/file.gguf`, or `package:<module>`; `vocabtransfer.model.gguf`) — this stage writes
results/source/base (config, safetensors weights, tokenizer files) and base_stats.json with the sha256
of every weight file (and of the GGUF file it came from). Every later stage reads the source from there:
tokenizer, pretokenize and overlap its tokenizer, source_head its weights (and source_head's
results/source/model is what init and the evaluations read).

Why a stage of its own rather than a first step of source_head: the target tokenizer, pretokenize and
overlap need only the source's tokenizer, and source_head trains a head for minutes (for MiniLM) whose
options must not rerun the tokenizer; with its own stage they depend on a cheap, stable artefact, and a
GGUF file is dequantised once per run, not once per stage that reads the source.

1. a hub id or a directory: the files a transformers model directory needs (`hub.HUB_FILES`:
   config, tokenizer, safetensors — or PyTorch .bin weights where there are no safetensors) are copied
   byte for byte, so a source given as a directory loads exactly as before;
2. a GGUF file: checked, dequantised through transformers, rebuilt as a plain model and saved
   (`gguf.materialise`);
3. base_stats.json: what `source_model` said, where it was found, sha256 of each weight file (and of
   the GGUF file), sizes, seconds, versions.
"""

from __future__ import annotations

import fnmatch
import logging
import shutil
import time
from pathlib import Path

from vocabtransfer import io
from vocabtransfer.errors import VocabTransferError
from vocabtransfer.model import gguf
from vocabtransfer.model.hub import BIN_FILES, HUB_FILES, resolve_model_path
from vocabtransfer.pipeline.stage_spec import Context
from vocabtransfer.plan.params_root import Params

log = logging.getLogger(__name__)

WEIGHT_FILES = ("*.safetensors", "*.bin")


def copy_model_files(directory: Path, out_dir: Path) -> list[str]:
    """Copy the top-level files of a model directory that a transformers model needs (step 1)."""
    names = sorted(p.name for p in directory.iterdir() if p.is_file())
    patterns = HUB_FILES if any(fnmatch.fnmatch(n, "*.safetensors") for n in names) else HUB_FILES + BIN_FILES
    chosen = [n for n in names if any(fnmatch.fnmatch(n, pat) for pat in patterns)]
    if not chosen:
        raise VocabTransferError(
            f"{directory}: no config, tokenizer or weight files in it; point source_model at a "
            "Hugging Face model directory"
        )
    for name in chosen:
        shutil.copyfile(directory / name, out_dir / name)
    return chosen


def weight_hashes(directory: Path) -> dict[str, str]:
    """file name -> sha256 of each weight file of a model directory."""
    return {
        p.name: gguf.sha256(p)
        for p in sorted(directory.iterdir())
        if p.is_file() and any(fnmatch.fnmatch(p.name, pat) for pat in WEIGHT_FILES)
    }


def materialise(value: str, out_dir: Path) -> dict:
    """Write the source `value` names into `out_dir` (atomically); returns the stats."""
    start = time.perf_counter()
    spec = gguf.parse(value)
    stats: dict = {"source_model": value, "route": spec.kind if spec else "directory"}
    with io.atomic_output(out_dir, directory=True) as tmp:
        if spec is None:
            directory = resolve_model_path(value)
            stats["resolved"] = str(directory)
            stats["files"] = copy_model_files(directory, tmp)
        else:
            path = gguf.resolve(spec)
            stats["resolved"] = str(path)
            stats["gguf_bytes"] = path.stat().st_size
            stats["gguf_sha256"] = gguf.sha256(path)
            stats.update(gguf.materialise(path, tmp))
            stats["files"] = sorted(p.name for p in tmp.iterdir() if p.is_file())
    stats["weights_sha256"] = weight_hashes(out_dir)
    stats["weights_bytes"] = sum((out_dir / name).stat().st_size for name in stats["weights_sha256"])
    stats["seconds"] = time.perf_counter() - start
    stats["versions"] = io.versions()
    return stats


def run(ctx: Context[Params]) -> None:
    value = ctx.params.source_model
    out_dir = Path(ctx.output["model"])
    stats = materialise(value, out_dir)
    io.write_json(stats, ctx.output["stats"])
    log.info(
        "source model %s (%s) materialised in %s (%.1f s): %s",
        value,
        stats["route"],
        out_dir,
        stats["seconds"],
        ", ".join(f"{k} sha256 {v[:12]}…" for k, v in stats["weights_sha256"].items()),
    )
