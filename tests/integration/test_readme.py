"""The README's examples run as pasted, in order, against the database the demo builds.

The demo's 1M-row database is stood in for by a small one at the same path (the commands
only name the path), so the examples run in seconds.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from egress.cli.demo import default_demo_dir
from egress.cli.demo_data import DEFAULT_ROWS, build_demo_db

README = Path(__file__).parents[2] / "README.md"


def readme_blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README.read_text(), flags=re.S)


def test_readme_names_the_database_the_demo_builds() -> None:
    demo_db = default_demo_dir() / f"demo-{DEFAULT_ROWS}.db"
    text = README.read_text()
    assert f"sqlite:///{demo_db}" in text
    assert "shop.db" not in text and "../shared" not in text


def test_readme_examples_run_as_pasted(tmp_path: Path) -> None:
    build_demo_db(tmp_path / default_demo_dir() / f"demo-{DEFAULT_ROWS}.db", rows=3000)
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "EGRESS_HOME": str(tmp_path / "home"),
           "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    commands = [
        line.split("  #")[0].strip()
        for block in readme_blocks("sh")
        for line in block.splitlines()
        if line.startswith("egress ")
        and not line.startswith("egress demo")  # builds the 1M rows: tested in test_cli
        and "user@host" not in line  # a placeholder PostgreSQL server
    ]
    assert len(commands) >= 6, commands
    export_id = ""
    for command in commands:
        command = command.replace("EXPORT_ID", export_id)  # as a user pastes the printed id
        ran = subprocess.run(command, shell=True, capture_output=True, text=True,
                             timeout=120, env=env, cwd=tmp_path)
        assert ran.returncode == 0, (command, ran.stdout, ran.stderr)
        if command.startswith("egress jobs create"):
            export_id = ran.stdout.strip()
    assert export_id
    (python_example,) = [b for b in readme_blocks("python") if "egress.export(" in b]
    ran = subprocess.run([sys.executable, "-c", python_example], capture_output=True,
                         text=True, timeout=120, env=env, cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert (tmp_path / "out-py" / "orders.jsonl").stat().st_size > 0
