"""`vocabtransfer <stage> …`: every pipeline stage as a command, built from the stage table.

    vocabtransfer corpus --lang sw            # run one stage on its own
    vocabtransfer dvc-yaml --output dvc.yaml  # regenerate dvc.yaml
    vocabtransfer validate                    # check params.yaml against the schema
    vocabtransfer params-doc                  # regenerate docs/parameters.md from the schema
    vocabtransfer coverage                    # the coverage of the report's intervals, by simulation
"""

from __future__ import annotations

import argparse
import logging
import sys
import time

from vocabtransfer.version import __version__
from vocabtransfer.errors import VocabTransferError

log = logging.getLogger("vocabtransfer")


def build_parser() -> argparse.ArgumentParser:
    from vocabtransfer.pipeline.stages import STAGES

    parser = argparse.ArgumentParser(prog="vocabtransfer", description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"vocabtransfer {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="<stage or command>")

    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--params", default="params.yaml", help="params file (default: params.yaml)")
    common.add_argument("--log-file", default=None, help="also write the log to this file")
    common.add_argument("-v", "--verbose", action="store_true", help="debug logging")

    for stage in STAGES.values():
        p = sub.add_parser(stage.name, parents=[common], help=stage.help, description=stage.help)
        for wc in stage.wildcards:
            p.add_argument(f"--{wc}", required=True, help=f"the `{wc}` wildcard")
        p.add_argument("--threads", type=int, default=None, help="worker threads (default: all cores)")
        p.add_argument("--device", default="auto", help="torch device: auto (cuda if available), cpu, cuda, cuda:1 …")

    p = sub.add_parser("dvc-yaml", parents=[common], help="generate dvc.yaml from the stage table")
    p.add_argument("--output", default="dvc.yaml", help="where to write (default: dvc.yaml; - for stdout)")
    sub.add_parser("validate", parents=[common], help="validate params.yaml and print it with defaults filled in")
    p = sub.add_parser("params-doc", parents=[common], help="generate docs/parameters.md from the params schema")
    p.add_argument("--output", default="docs/parameters.md", help="where to write (default: docs/parameters.md; - for stdout)")
    p = sub.add_parser("coverage", help="measure by simulation how often the report's 95 %% interval holds the true "
                       "difference at the study's sizes (a Markdown table)")
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


def _device(name: str) -> str:
    if name != "auto":
        return name
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from vocabtransfer.log import setup_logging

    setup_logging(args.log_file, logging.DEBUG if args.verbose else logging.INFO)
    try:
        if args.command == "coverage":
            from vocabtransfer.evaluate import coverage

            sys.stdout.write(coverage.markdown(coverage.table(sims=args.sims, resamples=args.resamples)))
            return 0
        if args.command == "remote":
            from vocabtransfer.pipeline.remote import add_remote

            target = add_remote(args.url, args.name)
            log.info("default DVC remote %s: %s (commit .dvc/config; then `dvc push` shares the results and "
                     "`dvc pull` fetches them)", args.name, target)
            return 0
        from vocabtransfer.pipeline.config import load_params

        params = load_params(args.params)  # params-doc too: a file that does not validate is not documented
        if args.command == "params-doc":
            from vocabtransfer.pipeline import params_doc

            if args.output == "-":
                sys.stdout.write(params_doc.render(args.params))
            else:
                log.info("wrote %s", params_doc.write(args.output, args.params))
            return 0
        if args.command == "validate":
            import yaml

            sys.stdout.write(yaml.safe_dump(params, sort_keys=False))
            return 0
        if args.command == "dvc-yaml":
            import yaml

            from vocabtransfer.pipeline import dvcgen

            missing = dvcgen.missing_leaves(yaml.safe_load(open(args.params, encoding="utf-8")), params)
            if missing:
                raise VocabTransferError(
                    f"{args.params}: DVC tracks params leaves that the file does not set: {', '.join(missing)}; "
                    "write them out (`vocabtransfer validate` prints every key with its default)"
                )

            if args.output == "-":
                sys.stdout.write(dvcgen.generate(params))
            else:
                log.info("wrote %s", dvcgen.write(params, args.output))
            return 0

        from vocabtransfer.pipeline.runner import run_stage
        from vocabtransfer.pipeline.stages import STAGES

        stage = STAGES[args.command]
        wildcards = {wc: getattr(args, wc) for wc in stage.wildcards}
        # only GPU stages pay for importing torch to look for a device
        device = _device(args.device) if stage.gpu else ("cpu" if args.device == "auto" else args.device)
        start = time.perf_counter()
        log.info("stage %s %s", stage.name, " ".join(f"{k}={v}" for k, v in wildcards.items()))
        run_stage(stage.name, params, wildcards, threads=args.threads, device=device)
        log.info("stage %s done in %.1f s", stage.name, time.perf_counter() - start)
        return 0
    except VocabTransferError as exc:
        log.error("%s", exc)
        return 1
    except KeyboardInterrupt:
        log.error("interrupted; no partial artefact was kept")
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
