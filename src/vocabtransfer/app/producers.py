"""Which stage wrote an artefact (`producer`), and the hint an error naming one gets (`rerun_hint`): the stage to
rerun and the output to delete, read off the stage table's output templates."""

from __future__ import annotations

import re
from pathlib import Path

from vocabtransfer.app.stages import STAGES


def producer(path: str | Path, root: Path | None = None) -> tuple[str, str] | None:
    """(the stage, its output) that `path` is or lies inside (`results/sw/init/fvt/pseed1/model/model.safetensors`
    -> ("init", "results/sw/init/fvt/pseed1")); None where no stage writes it. A path under `root` (the working
    directory by default) is read relative to it."""
    text = Path(path).as_posix()
    base = (root or Path.cwd()).as_posix().rstrip("/") + "/"
    text = text[len(base) :] if text.startswith(base) else text.removeprefix("./")
    for stage in STAGES.values():
        for template in stage.outputs.values():
            parts = re.split(r"\{\w+\}", template)
            pattern = r"[^/]+".join(re.escape(p) for p in parts)
            found = re.match(f"({pattern})(?:/|$)", text)
            if found:
                return stage.name, found.group(1)
    return None


def rerun_hint(message: str, root: Path | None = None) -> str | None:
    """For an error that names a file a stage wrote (torn, truncated or from another version): which stage and
    which output to delete so that the same command rebuilds it; None where the message names no artefact."""
    for candidate in re.findall(r"(?:^|[\s(`'\"])((?:/|\./)?[\w.+/-]*results/[\w.+/-]+)", message):
        found = producer(candidate.rstrip(".,;:"), root)
        if found:
            stage, output = found
            return (
                f"{output} is stage {stage}'s output: delete it (rm -r {output}) and run snakemake (or dvc repro) "
                f"again, which rebuilds it with stage {stage} and reruns what depends on it"
            )
    return None
