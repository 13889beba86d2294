"""The `fusion-delegate` program: demo, inspect, bench, diff, check, report, compile and tune.

Results go to stdout and progress to stderr. Every expected failure (a bad option, a missing
or corrupt model, an input dtype the tools cannot generate, a runtime error) ends as one line
`fusion-delegate: error: ...` and a non-zero status, never a traceback: 2 for a bad option or
a model or inputs `check` and `diff --inputs` cannot compare, 1 otherwise.
"""
from __future__ import annotations

import argparse
import sys

from . import __version__
from .comparison import NotCheckable
from .errors import DelegateOptionError, FusionDelegateError
from .options import FusionOptions
from .tools import bench, check, diff, inspect_model, precompile, report, run_demo, tune

COMMANDS = {"demo": run_demo, "inspect": inspect_model, "bench": bench, "diff": diff,
            "check": check, "report": report, "compile": precompile, "tune": tune}
EXIT_ERROR, EXIT_USAGE = 1, 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fusion-delegate",
        description="Fuse elementwise TFLite ops into compiled kernels, and measure the result.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                        help=f"delegate option, repeatable (keys: "
                             f"{', '.join(FusionOptions.names())})")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, module in COMMANDS.items():
        sub = commands.add_parser(name, parents=[common], help=module.HELP,
                                  description=module.__doc__)
        module.add_arguments(sub)
        sub.set_defaults(run=module.run)
    return parser


def _fail(error: BaseException, status: int) -> int:
    message = " ".join(line.strip() for line in str(error).splitlines() if line.strip())
    print(f"fusion-delegate: error: {message or type(error).__name__}", file=sys.stderr)
    return status


def main(argv: list[str] | None = None) -> int:
    """Run one command; the return value is the process exit status."""
    args = build_parser().parse_args(argv)
    try:
        options = FusionOptions.parse(args.option)
    except DelegateOptionError as error:
        return _fail(error, EXIT_USAGE)
    try:
        return args.run(args, options)
    except NotCheckable as error:
        return _fail(error, EXIT_USAGE)
    except (FusionDelegateError, OSError, ValueError, RuntimeError) as error:
        return _fail(error, EXIT_ERROR)
    except KeyboardInterrupt:
        print("fusion-delegate: interrupted", file=sys.stderr)
        return 130
