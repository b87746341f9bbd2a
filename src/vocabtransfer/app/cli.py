"""`vocabtransfer <stage> …`: every pipeline stage as a command, built from the stage table.

examples:
  vocabtransfer validate                     # check params.yaml and the plan before any job
  vocabtransfer validate my.yaml             # an overlay laid over params.yaml (= --params params.yaml my.yaml)
  snakemake --cores 2 --configfile my.yaml   # run the whole pipeline with it (snakemake -n: the plan only)
  vocabtransfer corpus --lang sw             # run one stage on its own (its inputs must be there)
  vocabtransfer init --lang sw --method mean # --pseed may be left out where the method draws nothing
  vocabtransfer init --help                  # a stage's options, defaults and what it writes
  vocabtransfer dvc-yaml --output dvc.yaml   # regenerate dvc.yaml
  vocabtransfer dag                          # the DAG as a Mermaid flowchart (docs/stages.md)
  vocabtransfer params-doc                   # regenerate docs/parameters.md from the schema
  vocabtransfer coverage                     # the coverage of the report's intervals, by simulation
"""

from __future__ import annotations

import argparse
import difflib
import logging
import sys
import time
from typing import Callable, Iterable
from pathlib import Path

import yaml

from vocabtransfer.version import __version__
from vocabtransfer.errors import VocabTransferError
from vocabtransfer.app import dag, dvcgen, layout
from vocabtransfer.app.runner import run_stage
from vocabtransfer.app.producers import rerun_hint
from vocabtransfer.plan.stages import STAGES
from vocabtransfer.log import report_error, setup_logging
from vocabtransfer.app import params_doc
from vocabtransfer.app.params import load, schema
from vocabtransfer.plan.params_root import Params
from vocabtransfer.app.plan import job_counts, preflight
from vocabtransfer.pipeline.config import pattern_names, read_yaml
from vocabtransfer.pipeline import paths
from vocabtransfer.pipeline.remote import add_remote
from vocabtransfer.plan import availability
from vocabtransfer.registry import resolve

log = logging.getLogger("vocabtransfer")


def wildcard_help() -> dict[str, str]:
    """Each wildcard's `--<wildcard>` help: what it is and its allowed values, from the params schema."""
    props = schema()["properties"]
    pattern = props["init"]["properties"]["methods"]["items"]["pattern"]
    named = pattern_names(pattern)
    if named is None:  # the schema builds this pattern from the method names: another form is a bug, not input
        raise VocabTransferError(f"params schema: init.methods pattern {pattern!r} lists no names")
    methods = named[1]
    objectives = ", ".join(props["pretrain"]["properties"]["objectives"]["items"]["enum"])
    tasks = ", ".join(props["eval"]["properties"]["tasks"]["properties"])
    return {
        "lang": "a language code that params `languages` lists (e.g. sw, de)",
        "method": f"an init method that params `init.methods` lists: {methods}",
        "objective": f"a pretraining objective: {objectives}",
        "pseed": "a pretraining seed: 1 .. pretrain.seeds",
        "task": f"a downstream task: {tasks}",
        "model": "source, <method>-<objective>-pseed<N> (a pretrained model) or <method>-init-pseed<N> (init only)",
        "seed": "a fine-tuning seed: 1 .. eval.seeds",
    }


PARAMS_HELP = (
    "params files: the first is the config (default: params.yaml), each further one an overlay laid over "
    "it key by key, as Snakemake's --configfile: --params params.yaml config/gemma.yaml (or --params "
    "repeated)"
)


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """The description and epilog as written (examples, one a line), and each option's default where it has one
    that its help does not already give."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if action.default in (None, False, argparse.SUPPRESS) or "default" in text or action.option_strings == []:
            return text
        return f"{text} (default: %(default)s)"


# the values a stage's example uses for each wildcard
EXAMPLE = {
    "lang": "sw",
    "method": "focus",
    "objective": "standard",
    "pseed": "1",
    "task": "qa",
    "model": "source",
    "seed": "1",
}


def stage_epilog(stage) -> str:
    """A stage's --help epilog: an example command, the same job through snakemake, and what the stage writes."""
    options = " ".join(f"--{wc} {EXAMPLE[wc]}" for wc in stage.wildcards)
    outputs = list(stage.outputs.values())
    first = paths.fill(outputs[0], **{k: v for k, v in EXAMPLE.items() if "{" + k + "}" in outputs[0]})
    return "\n".join(
        [
            f"example: vocabtransfer {stage.name}" + (f" {options}" if options else ""),
            f"  or: snakemake --cores 2 {first}   # the job with every stage it needs",
            "writes: " + "\n        ".join(outputs),
        ]
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="vocabtransfer",
        description=__doc__.splitlines()[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"vocabtransfer {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="<stage or command>")

    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--params", action="extend", nargs="+", default=None, metavar="FILE", help=PARAMS_HELP)
    common.add_argument("--log-file", default=None, help="also write the log to this file")
    common.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    wildcards = wildcard_help()

    for stage in STAGES.values():
        add_stage_parser(sub, stage, common, wildcards)

    p = sub.add_parser("dvc-yaml", parents=[common], help="generate dvc.yaml from the stage table")
    p.add_argument("--output", default="dvc.yaml", help="where to write (default: dvc.yaml; - for stdout)")
    validate = (
        "validate params.yaml (and any overlays, laid over it as Snakemake's --configfile lays them) against "
        "the params schema and the cross-key rules, and check the plan as `snakemake -n` does before any job "
        "(data files, what the source model can run, lm-eval task names); ends with one line saying it is "
        "valid and how many jobs the plan has (--print: the merged params with every default); a bad config "
        "prints one `error:` line per problem, naming the file, the key and the fix"
    )
    p = sub.add_parser(
        "validate",
        parents=[common],
        help="validate params.yaml (and overlays) and the plan, before any job",
        description=validate,
    )
    p.add_argument(
        "overlays",
        nargs="*",
        metavar="OVERLAY",
        help="overlays laid over the --params files (default: params.yaml) in order: `vocabtransfer validate my.yaml` "
        "is `vocabtransfer validate --params params.yaml my.yaml`",
    )
    p.add_argument("--print", action="store_true", help="print the merged params with every default filled in")
    p = sub.add_parser("dag", help="print the DAG of the stage declarations as a Mermaid flowchart (docs/stages.md)")
    p.add_argument("--log-file", default=None, help=argparse.SUPPRESS)
    p.add_argument("-v", "--verbose", action="store_true", help=argparse.SUPPRESS)
    p = sub.add_parser(
        "layout",
        help="print the README's layout of the package (every module, by layer); --write "
        "rewrites it in README.md and docs/layout.md (every module's first docstring line)",
    )
    p.add_argument("--write", action="store_true", help="rewrite README.md's block and docs/layout.md here")
    p.add_argument("--log-file", default=None, help=argparse.SUPPRESS)
    p.add_argument("-v", "--verbose", action="store_true", help=argparse.SUPPRESS)
    p = sub.add_parser("params-doc", parents=[common], help="generate docs/parameters.md from the params schema")
    p.add_argument(
        "--output", default="docs/parameters.md", help="where to write (default: docs/parameters.md; - for stdout)"
    )
    p = sub.add_parser(
        "coverage",
        help="measure by simulation how often the report's 95 %% interval holds the true "
        "difference at the study's sizes (a Markdown table)",
    )
    p.add_argument("--sims", type=int, default=1000, help="synthetic studies per size and scenario (default: 1000)")
    p.add_argument("--resamples", type=int, default=2000, help="cluster-bootstrap resamples each (default: 2000)")
    p.add_argument("--log-file", default=None, help=argparse.SUPPRESS)
    p.add_argument("-v", "--verbose", action="store_true", help=argparse.SUPPRESS)
    p = sub.add_parser("remote", help="make a directory or URL the default DVC remote (dvc push / dvc pull)")
    p.add_argument("url", help="a directory (shared disk) or a URL: s3://…, gs://…, ssh://…, https://…")
    p.add_argument("--name", default="origin", help="the remote's name in .dvc/config (default: origin)")
    p.add_argument("--log-file", default=None, help=argparse.SUPPRESS)
    p.add_argument("-v", "--verbose", action="store_true", help=argparse.SUPPRESS)
    return parser


def add_stage_parser(sub, stage, common: argparse.ArgumentParser, wildcards: dict[str, str]) -> None:
    """`vocabtransfer <stage>`: one option per wildcard (`--pseed` optional where the method draws nothing), the
    threads and the device; its help with the stage's example and outputs (`stage_epilog`)."""
    p = sub.add_parser(
        stage.name,
        parents=[common],
        help=stage.help,
        description=stage.help,
        epilog=stage_epilog(stage),
        formatter_class=HelpFormatter,
    )
    for wc in stage.wildcards:
        if wc == "pseed" and _pseed_optional(stage):
            help_text = f"{wildcards[wc]}; optional for a method that draws nothing (e.g. mean): 1"
            p.add_argument(f"--{wc}", default=None, help=help_text)
        else:
            p.add_argument(f"--{wc}", required=True, help=wildcards[wc])
    p.add_argument("--threads", type=int, default=None, help="worker threads (default: all cores)")
    p.add_argument("--device", default="auto", help="torch device: auto (cuda if available), cpu, cuda, cuda:1 …")


def _pseed_optional(stage) -> bool:
    """An initialisation (a method, no objective): `--pseed` may be left out where the method draws nothing."""
    return "method" in stage.wildcards and "pseed" in stage.wildcards and "objective" not in stage.wildcards


def resolve_pseed(stage, wildcards: dict, params: Params, source: str) -> None:
    """A left-out `--pseed` of an initialisation: 1 for a method that draws nothing (`availability.seeded`: every
    row a copy or a mean, so all its pretraining seeds share pseed 1), else one line asking for it."""
    if not _pseed_optional(stage) or wildcards.get("pseed") is not None:
        return
    if availability.seeded(wildcards["method"]):
        seeds = params.pretrain.seeds
        raise VocabTransferError(
            f"{source}: {stage.name} --method {wildcards['method']}: the method can draw random rows, so its "
            f"initialisation depends on the pretraining seed; pass --pseed N (1 ≤ N ≤ pretrain.seeds = {seeds})"
        )
    wildcards["pseed"] = "1"


def _device(name: str) -> str:
    if name != "auto":
        return name
    import torch  # torch: heavy, not at CLI start-up

    return "cuda" if torch.cuda.is_available() else "cpu"


def _params_files(given: list[str] | None, overlays: list[str]) -> list[str]:
    """The params files a command reads: `--params` (default params.yaml), then the overlays given as arguments
    (`vocabtransfer validate my.yaml`); params.yaml named first as an argument is the base, not an overlay of itself."""
    if not given and overlays and Path(overlays[0]).resolve() == Path("params.yaml").resolve():
        return overlays
    return (given or ["params.yaml"]) + overlays


def _lone_overlay(files: list[str] | None) -> bool:
    """One params file given, not params.yaml, that lacks a key the schema requires, with params.yaml here:
    an overlay meant to go over params.yaml."""
    if not files or len(files) != 1 or Path(files[0]).name == "params.yaml" or not Path("params.yaml").is_file():
        return False

    try:
        raw = read_yaml(files[0])
    except VocabTransferError:
        return False
    return isinstance(raw, dict) and any(key not in raw for key in schema().get("required", []))


# a stage's option -> the params list its value must be in
WILDCARD_LISTS: dict[str, tuple[str, Callable[[Params], Iterable]]] = {
    "lang": ("languages", lambda params: params.languages),
    "method": ("init.methods", lambda params: params.init.methods),
    "objective": ("pretrain.objectives", lambda params: params.pretrain.objectives),
    "task": ("eval.tasks", lambda params: params.eval.task_sections()),
}


def check_wildcards(wildcards: dict, params: Params, source: str) -> None:
    """`--lang`, `--method`, `--objective` and `--task` must be in the params' lists: else one line naming the
    params files read, the list, its values and the closest one."""
    for name, value in wildcards.items():
        if name not in WILDCARD_LISTS:
            continue
        key, listed = WILDCARD_LISTS[name]
        allowed = [str(v) for v in listed(params)]
        if value not in allowed:
            close = difflib.get_close_matches(value, allowed, n=1, cutoff=0.6)
            raise VocabTransferError(
                f"{source}: --{name} {value!r} is not in {key} ({', '.join(allowed)})"
                + (f"; did you mean {close[0]!r}?" if close else "")
                + "; pass the params files that list it (--params params.yaml <overlay>) or add it there"
            )


def _validate(params: Params, files: list[str], *, show: bool) -> int:
    """`vocabtransfer validate`: the plan's checks (`plan.preflight`, what the workflow runs before any job), its skip
    lines and notes on stderr, the merged params with --print, and one closing line with the plan's job counts."""
    source = " + ".join(files)
    for line in preflight(params, source=source):
        sys.stderr.write(line + "\n")
    if show:
        sys.stdout.write(yaml.safe_dump(dict(params.tree), sort_keys=False))
    counts = job_counts(params)
    listed = ", ".join(f"{stage} {n}" for stage, n in counts.items() if n)
    sys.stdout.write(f"valid: {source}: {sum(counts.values())} jobs ({listed})\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    params = None

    setup_logging(args.log_file, logging.DEBUG if args.verbose else logging.INFO)
    try:
        if args.command == "coverage":
            # the simulation's code, by reference: imported for this command only (numpy, the report's statistics)
            table, markdown = (resolve(f"vocabtransfer.evaluate.coverage:{name}") for name in ("table", "markdown"))
            sys.stdout.write(markdown(table(sims=args.sims, resamples=args.resamples)))
            return 0
        if args.command == "dag":
            sys.stdout.write(dag.picture())
            return 0
        if args.command == "layout":
            if args.write:
                log.info("wrote %s", ", ".join(map(str, layout.write(Path.cwd()))))
            else:
                sys.stdout.write(layout.readme_block())
            return 0
        if args.command == "remote":
            target = add_remote(args.url, args.name)
            log.info(
                "default DVC remote %s: %s (commit .dvc/config; then `dvc push` shares the results and "
                "`dvc pull` fetches them)",
                args.name,
                target,
            )
            return 0
        files = _params_files(args.params, getattr(args, "overlays", None) or [])
        # validated once: here for a params file of the user's (params-doc too: a file that does not
        # validate is not documented), where Snakemake merged them for its merged file (trusted as it is)
        params = Params(load(files))
        if args.command == "params-doc":
            if args.output == "-":
                sys.stdout.write(params_doc.render(files[0]))
            else:
                log.info("wrote %s", params_doc.write(args.output, files[0]))
            return 0
        if args.command == "validate":
            return _validate(params, files, show=args.print)
        if args.command == "dvc-yaml":
            missing = dvcgen.missing_leaves(read_yaml(files[0]), params)
            if missing:
                raise VocabTransferError(
                    f"{files[0]}: DVC tracks params leaves that the file does not set: {', '.join(missing)}; "
                    "write them out (`vocabtransfer validate` prints every key with its default)"
                )

            if args.output == "-":
                sys.stdout.write(dvcgen.generate(params))
            else:
                log.info("wrote %s", dvcgen.write(params, args.output))
            return 0

        stage = STAGES[args.command]
        wildcards = {wc: getattr(args, wc) for wc in stage.wildcards}
        check_wildcards(wildcards, params, " + ".join(files))
        resolve_pseed(stage, wildcards, params, " + ".join(files))
        # only GPU stages pay for importing torch to look for a device
        device = _device(args.device) if stage.gpu else ("cpu" if args.device == "auto" else args.device)
        start = time.perf_counter()
        log.info("stage %s %s", stage.name, " ".join(f"{k}={v}" for k, v in wildcards.items()))
        run_stage(stage.name, params, wildcards, threads=args.threads, device=device)
        log.info("stage %s done in %.1f s", stage.name, time.perf_counter() - start)
        return 0
    except VocabTransferError as exc:
        hint = rerun_hint(str(exc)) if getattr(args, "command", None) in STAGES else None
        # one line per problem; an artefact a stage wrote that is torn or stale: which stage rebuilds it
        report_error(str(exc) + (f"; {hint}" if hint else ""))
        if params is None and _lone_overlay(getattr(args, "params", None)):  # `remote` takes no params
            report_error(
                f"{args.params[0]} is an overlay (it lacks keys a config needs); lay it over params.yaml: "
                f"--params params.yaml {args.params[0]}"
            )
        return 1
    except KeyboardInterrupt:
        report_error("interrupted; no partial artefact was kept")
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
