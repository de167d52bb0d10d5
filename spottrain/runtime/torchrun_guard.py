"""The worker entry point of the managed-torchrun SkyPilot task: the user's input error ends the job.

``torchrun``'s elastic agent restarts every worker of a node when one fails (``--max-restarts``),
whatever the reason. A worker that fails on the user's input (a
:class:`~spottrain.errors.SpottrainError`: a bad setting, a checkpoint of another job, a global
batch smaller than the world) would fail the same way on every restart, so the task runs

    torchrun ... -m spottrain.runtime.torchrun_guard train.py ARGS...   (or ... torchrun_guard -m pkg ARGS...)

and this module runs the user's script or module as ``__main__``. On a ``SpottrainError`` it

1. prints one line, ``error: <message>``, on stderr;
2. writes that line to ``$SPOTTRAIN_INPUT_ERROR_FILE`` (the task's run script names a fresh
   node-local path); the first worker of the node to fail creates the file;
3. that first worker sends SIGTERM to its parent, the elastic agent, which then shuts every
   worker of the node down and exits instead of restarting them (the agent treats a signal as
   its own end, not as a worker failure);
4. waits to be stopped by the agent (SIGTERM restored to its default action first: the trainer's
   notice handler would otherwise keep it alive), and exits with
   :data:`~spottrain.runtime.elastic.EXIT_INPUT` if the agent does not stop it.

The run script then finds the file, prints its first line and exits with code 87, a user-code
failure for SkyPilot: the managed job ends FAILED and is not relaunched (SkyPilot relaunches only
after a preemption, or on errors when ``job_recovery.max_restarts_on_errors`` is set, which the
task does not set), and on a multi-node job SkyPilot cancels the other nodes' run commands.

Any other exception keeps its traceback and torchrun's restarts (a crash may be transient).
"""

from __future__ import annotations

import os
import runpy
import signal
import sys
import time
from pathlib import Path

from spottrain.errors import SpottrainError
from spottrain.runtime.elastic import EXIT_INPUT, error_line

ENV_MARKER = "SPOTTRAIN_INPUT_ERROR_FILE"
AGENT_WAIT_S = 60.0
"""How long a worker waits for the agent to stop it before it exits on its own."""


def _agent_pid() -> int | None:
    """The elastic agent's pid (this process's parent) when running under torchrun, else ``None``."""
    if "TORCHELASTIC_RUN_ID" not in os.environ:
        return None
    ppid = os.getppid()
    try:
        cmdline = Path(f"/proc/{ppid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return None
    if "torchrun" in cmdline or "torch.distributed.run" in cmdline or "torch.distributed.launch" in cmdline:
        return ppid
    return None


def stop_on_input_error(exc: SpottrainError) -> None:
    """Report the user's input error in one line, stop the node's torchrun agent, and exit."""
    line = f"error: {error_line(exc)}"
    print(line, file=sys.stderr, flush=True)
    sys.stdout.flush()
    first = False
    marker = os.environ.get(ENV_MARKER)
    if marker:
        try:
            fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            first = True
        except FileExistsError:  # another worker of this node failed first and stops the agent
            fd = os.open(marker, os.O_WRONLY | os.O_APPEND)
        except OSError:
            fd = -1
        if fd >= 0:
            os.write(fd, (line + "\n").encode())
            os.close(fd)
    agent = _agent_pid()
    if agent is not None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        if first or not marker:  # one signal per node: a second one would interrupt the agent's shutdown
            os.kill(agent, signal.SIGTERM)
        time.sleep(AGENT_WAIT_S)  # the agent's shutdown ends this process
    os._exit(EXIT_INPUT)


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv == ["-m"]:
        print("usage: python -m spottrain.runtime.torchrun_guard SCRIPT [ARGS...] | -m MODULE [ARGS...]",
              file=sys.stderr)
        sys.exit(2)
    try:
        if argv[0] == "-m":
            sys.argv = [argv[1], *argv[2:]]
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = argv
            sys.path.insert(0, str(Path(argv[0]).resolve().parent))
            runpy.run_path(argv[0], run_name="__main__")
    except SpottrainError as exc:
        stop_on_input_error(exc)


if __name__ == "__main__":
    main()
