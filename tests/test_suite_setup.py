"""The test suite's own set-up (conftest.py) does what the fault tests rely on."""

import subprocess
import sys


def test_a_process_the_suite_starts_gets_ctrl_c_as_in_a_terminal():
    # However the suite was started (a background job of a shell without job control ignores
    # Ctrl-C and hands that on), a child's Ctrl-C raises KeyboardInterrupt: the profile and store
    # tests press it and wait for the process to stop.
    out = subprocess.run([sys.executable, "-c", "import signal; print(signal.getsignal(signal.SIGINT).__name__)"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "default_int_handler", out.stderr
