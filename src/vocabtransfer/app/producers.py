"""Which stage wrote an artefact (`producer`), and the hint an error naming one gets (`rerun_hint`): for an artefact
that is there, the stage to rerun and the output to delete; for one that is not there yet, the stage to run first
(its `vocabtransfer` command, or the `snakemake` target that runs it and what it needs), read off the stage table's
output templates."""

from __future__ import annotations

import re
from pathlib import Path

from vocabtransfer.plan.stages import STAGES


def _pattern(template: str) -> str:
    """A template's regex, each `{wildcard}` a named group (a repeated one must match the same text)."""
    out, seen = [], set()
    for i, part in enumerate(re.split(r"\{(\w+)\}", template)):
        if i % 2 == 0:
            out.append(re.escape(part))
        else:
            out.append(f"(?P={part})" if part in seen else f"(?P<{part}>[^/]+)")
            seen.add(part)
    return "".join(out)


def _relative(path: str | Path, root: Path | None) -> str:
    text = Path(path).as_posix()
    base = (root or Path.cwd()).as_posix().rstrip("/") + "/"
    return text[len(base) :] if text.startswith(base) else text.removeprefix("./")


def produced(path: str | Path, root: Path | None = None) -> tuple[str, str, dict[str, str]] | None:
    """(the stage, its output, the output's wildcards) that `path` is or lies inside; None where no stage writes it."""
    text = _relative(path, root)
    for stage in STAGES.values():
        for template in stage.outputs.values():
            found = re.match(f"({_pattern(template)})(?:/|$)", text)
            if found:
                return stage.name, found.group(1), {k: v for k, v in found.groupdict().items() if v is not None}
    return None


def producer(path: str | Path, root: Path | None = None) -> tuple[str, str] | None:
    """(the stage, its output) that `path` is or lies inside (`results/sw/init/fvt/pseed1/model/model.safetensors`
    -> ("init", "results/sw/init/fvt/pseed1")); None where no stage writes it. A path under `root` (the working
    directory by default) is read relative to it."""
    found = produced(path, root)
    return (found[0], found[1]) if found else None


def stage_command(stage: str, wildcards: dict[str, str]) -> str:
    """`vocabtransfer <stage> --<wildcard> <value> …` for one job of `stage` (`…` for a value the path lacks)."""
    options = " ".join(f"--{wc} {wildcards.get(wc, '…')}" for wc in STAGES[stage].wildcards)
    return f"vocabtransfer {stage}" + (f" {options}" if options else "")


def rerun_hint(message: str, root: Path | None = None) -> str | None:
    """For an error that names a file a stage writes: where it is not there yet, which stage to run first (its
    command, or the snakemake target that runs it and what it needs); where it is there (torn, truncated or from
    another version), which stage and which output to delete so that the same command rebuilds it; None where the
    message names no artefact."""
    for candidate in re.findall(r"(?:^|[\s(`'\"])((?:/|\./)?[\w.+/-]*results/[\w.+/-]+)", message):
        found = produced(candidate.rstrip(".,;:"), root)
        if found:
            stage, output, wildcards = found
            if not ((root or Path.cwd()) / output).exists():
                return (
                    f"{output} does not exist yet: it is stage {stage}'s output, so run that stage first "
                    f"(`{stage_command(stage, wildcards)}`), or `snakemake --cores 2 {output}`, which runs it and "
                    "every stage it needs"
                )
            return (
                f"{output} is stage {stage}'s output: delete it (rm -r {output}) and run snakemake (or dvc repro) "
                f"again, which rebuilds it with stage {stage} and reruns what depends on it"
            )
    return None
