"""The ``egress`` command ends its process without the interpreter's last garbage
collections (egress.memory.skip_final_collections); ``main``, which tests and programs
call in-process, leaves the collector alone."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def _exit_report(call: str) -> list[str]:
    code = textwrap.dedent(f"""
        import atexit, gc, sys
        from egress.cli import main, run
        # atexit handlers run once the command has raised SystemExit out of it
        atexit.register(lambda: print("frozen", gc.get_freeze_count() > 0))
        sys.argv = ["egress", "--version"]
        {call}
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_the_command_skips_the_final_collections() -> None:
    out = _exit_report("run()")
    assert out[0].startswith("egress, version") and out[-1] == "frozen True"


def test_main_called_in_process_leaves_the_collector_alone() -> None:
    out = _exit_report("main()")
    assert out[-1] == "frozen False"
