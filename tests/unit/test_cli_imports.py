"""Each ``egress`` subcommand imports only what it runs (egress.cli.SUBCOMMANDS): the
operator's commands on the job store do not load pyarrow and the engine, a one-shot
export does not load the job store, and Arrow still gets the system allocator."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import click
from click.testing import CliRunner

from egress.cli import SUBCOMMANDS, main
from egress.formats import COMPRESSIONS, FORMATS


def _run(argv: list[str], report: str, home: Path) -> list[str]:
    """``egress ARGV`` in a fresh interpreter; ``report`` (an expression) is printed at
    its exit, after the command."""
    code = textwrap.dedent(f"""
        import atexit, sys
        from egress.cli import run
        atexit.register(lambda: print("REPORT", {report}))
        sys.argv = ["egress", *{argv!r}]
        run()
    """)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("EGRESS_") and k != "ARROW_DEFAULT_MEMORY_POOL"}
    env["EGRESS_HOME"] = str(home)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    return [line.split(" ", 1)[1] for line in done.stdout.splitlines()
            if line.startswith("REPORT ")]


def test_the_job_store_commands_do_not_import_pyarrow(tmp_path: Path) -> None:
    loaded = "sorted(m for m in ('pyarrow', 'egress.manager', 'egress.engine') if m in sys.modules)"
    for argv in (["jobs", "ls"], ["jobs", "ls", "--json"], ["tokens", "ls"],
                 ["audit", "ls", "--project", "default"]):
        assert _run(argv, loaded, tmp_path / "home") == ["[]"], argv


def test_an_export_uses_the_system_allocator_without_the_job_store(tmp_path: Path) -> None:
    db = tmp_path / "small.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT)")
        conn.executemany("INSERT INTO t VALUES (?, ?)", [(i, f"n{i}") for i in range(100)])
    report = ("sys.modules['pyarrow'].default_memory_pool().backend_name, "
              "'sqlalchemy' in sys.modules")
    out = _run(["export", "--source", f"sqlite:///{db}", "--table", "t", "--format",
                "parquet", "--out", str(tmp_path / "out"), "-q"], report, tmp_path / "home")
    assert out == ["system False"]
    assert (tmp_path / "out" / "_SUCCESS").exists()


def test_every_subcommand_is_listed_and_loads_under_its_name() -> None:
    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0, result.output
    listed = result.output.split("Commands:", 1)[1]
    ctx = click.Context(main)
    for name in SUBCOMMANDS:
        assert f"\n  {name} " in listed, name
        command = main.get_command(ctx, name)
        assert command is not None and command.name == name
    assert main.get_command(ctx, "no-such-command") is None
    unknown = CliRunner().invoke(main, ["expot"])
    assert unknown.exit_code == 2 and "No such command 'expot'" in unknown.output


def test_the_create_help_names_every_format_and_compression() -> None:
    result = CliRunner().invoke(main, ["jobs", "create", "--help"])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    formats = text.split("Output format:", 1)[1].split(".", 1)[0]
    assert sorted(n.strip() for n in formats.split(",")) == sorted(FORMATS)
    for name in COMPRESSIONS:
        assert name in text.split("--compression", 1)[1].split("Parquet:", 1)[0], name
