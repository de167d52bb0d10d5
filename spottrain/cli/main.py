"""The ``spottrain`` command: thin. Parse, call the library, render.

Each command lives in its own module with a ``register(app)`` function, so that commands stay
small and independent. User errors (:class:`~spottrain.errors.SpottrainError`) print one line
and exit with code 2; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import importlib
import os
import sys

import typer
import typer.core
from rich.console import Console
from rich.markup import escape
from typer import Abort, TyperException
from typer._click.exceptions import NoArgsIsHelpError, UsageError  # typer 0.29 vendors click

from spottrain import __version__
from spottrain.errors import SpottrainError

app = typer.Typer(
    name="spottrain",
    help="Plan, predict and run deep-learning training on revocable (spot / preemptible) cloud GPUs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

# Order is the order of `spottrain --help`.
COMMAND_MODULES = (
    "catalog_cmd",
    "profile_cmd",
    "predict_cmd",
    "converge_cmd",
    "transience_cmd",
    "plan_cmd",
    "simulate_cmd",
    "run_cmd",
    "runs_cmd",
    "demo_cmd",
)


def _flag_type(self: typer.core.TyperOption, ctx):  # type: ignore[no-untyped-def]
    """Help shows no value type after a switch (``--spot``, ``--json``): it takes no value."""
    if self.is_flag:
        return None
    return _option_type(self, ctx)


# typer's private hook for the help's value type (typer 0.29, the pinned version): where another
# version lacks it, the help keeps typer's own rendering rather than the CLI failing to import.
_option_type = getattr(typer.core.TyperOption, "display_type_rich", None)
if _option_type is not None:
    typer.core.TyperOption.display_type_rich = _flag_type  # type: ignore[method-assign]


def _print_version(value: bool) -> None:
    if value:
        print(f"spottrain {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                 help="Print the spottrain version and exit."),
) -> None:
    """Plan, predict and run deep-learning training on revocable (spot / preemptible) cloud GPUs."""


for _name in COMMAND_MODULES:
    importlib.import_module(f"spottrain.cli.{_name}").register(app)

err_console = Console(stderr=True)


@app.command()
def version() -> None:
    """Print the spottrain version."""
    print(__version__)


def main(argv: list[str] | None = None) -> None:
    """Entry point of the console script."""
    # Piped output (a file, `less`, CI logs) has no terminal width; rich would squeeze tables
    # into 80 columns and cut every cell. Give it room unless the user chose a width.
    if not sys.stdout.isatty() and "COLUMNS" not in os.environ:
        os.environ["COLUMNS"] = "200"
    try:
        # Not standalone: click's usage errors (unknown option, a value of the wrong type) reach
        # us and print in one line like ours, instead of typer's multi-line box.
        rv = app(args=argv, prog_name="spottrain", standalone_mode=False)
    except NoArgsIsHelpError as exc:
        print(exc.ctx.get_help() if exc.ctx is not None else exc.format_message())
        sys.exit(2)
    except UsageError as exc:
        # lazy: cli.options only on a usage error
        from spottrain.cli.options import usage_line

        err_console.print(f"[bold red]error:[/] {usage_line(exc)}", highlight=False, soft_wrap=True, markup=True)
        sys.exit(2)
    except TyperException as exc:
        err_console.print(f"[bold red]error:[/] {escape(' '.join(exc.format_message().split()))}", highlight=False,
                          soft_wrap=True)
        sys.exit(exc.exit_code)
    except Abort:
        err_console.print("aborted")
        sys.exit(1)
    except SpottrainError as exc:
        # the message is text, not markup: '[/DURATION]' or 'spottrain[skypilot]' print as written
        err_console.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        err_console.print("interrupted")
        sys.exit(130)
    # As in standalone mode: exit with typer.Exit's code (returned in non-standalone mode), else 0.
    sys.exit(rv if isinstance(rv, int) and not isinstance(rv, bool) else 0)


if __name__ == "__main__":
    main()
