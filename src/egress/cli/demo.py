"""``egress demo``: build a realistic SQLite database and export it with progress bars.

Files go to ``--out`` (default ``$EGRESS_HOME/demo``, else ``./demo-out``): the database
``demo-ROWS.db`` is built once and reused; the export directory ``export-FORMAT-COMPRESSION``
is replaced on every run.
"""

from __future__ import annotations

import os
import shlex
import shutil
import time
from pathlib import Path

import click

from egress.cli.demo_data import DEFAULT_ROWS, DemoSizes, ensure_demo_db
from egress.cli.export import ExportArgs, program_argv, run_export


def default_demo_dir() -> Path:
    home = os.environ.get("EGRESS_HOME")
    return Path(home) / "demo" if home else Path("demo-out")


@click.command("demo")
@click.option("--rows", type=click.IntRange(min=1), default=DEFAULT_ROWS, show_default=True,
              help="Rows of the largest table (events).")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Directory for the database and the export [default: $EGRESS_HOME/demo "
                   "or ./demo-out].")
@click.option("--format", "fmt", default="csv", show_default=True, metavar="FORMAT",
              help="Output format: csv, jsonl, json, sql or parquet.")
@click.option("--compression", default="gzip", show_default=True, metavar="NAME",
              help="none, gzip or zstd.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bars.")
@click.pass_context
def demo_command(
    ctx: click.Context, rows: int, out: Path | None, fmt: str, compression: str, quiet: bool
) -> None:
    """Build a demo database (users, products, orders, events, edge cases) and export it."""
    from egress.formats import resolve_compression

    resolve_compression(fmt, compression)
    base = (out or default_demo_dir()).resolve()
    sizes = DemoSizes.for_rows(rows)
    started = time.monotonic()
    if not quiet:
        click.echo(
            f"Demo database: {sizes.events:,} events, {sizes.orders:,} orders, "
            f"{sizes.users:,} users, {sizes.products:,} products, edge cases",
            err=True,
        )
    db, built = ensure_demo_db(base, rows)
    if not quiet:
        verb = f"built in {time.monotonic() - started:.1f} s" if built else "reused"
        click.echo(f"  {db} ({verb})", err=True)

    target = base / f"export-{fmt}-{compression}"
    shutil.rmtree(target, ignore_errors=True)
    args = ExportArgs(
        source=f"sqlite:///{db}", out=str(target), format=fmt, all_tables=True,
        compression=compression, quiet=quiet,
    )
    program = program_argv(ctx)
    if not quiet:
        command = shlex.join(args.resume_argv(program)[:-1])
        click.echo(f"Exporting every table, the same as:\n  {command}", err=True)
    code = run_export(args, program, resume=False)
    if code == 0:
        click.echo(_next_steps(db, target, fmt, compression, program, quiet))
    ctx.exit(code)


def _next_steps(
    db: Path, target: Path, fmt: str, compression: str, program: list[str], quiet: bool
) -> str:
    """What to paste next: the files, then commands that run as printed from this shell."""
    if quiet:
        return f"Exported to {target}"
    if fmt == "parquet":
        look = (
            f"python -c \"import pyarrow.parquet as pq; "
            f"print(pq.read_table('{target}/events').slice(0, 5))\""
        )
    else:
        cat = {"gzip": "zcat", "zstd": "zstdcat"}.get(compression, "cat")
        suffix = {"gzip": ".gz", "zstd": ".zst"}.get(compression, "")
        look = f"{cat} {shlex.quote(str(target / f'users.{fmt}{suffix}'))} | head"
    egress = shlex.join(program)
    lines = [f"Exported to {target}", "", "Look at the data:", f"  {look}", ""]
    if egress != "egress":
        # `egress` alone is not on this shell's PATH: say how to get it, use the full path
        bin_dir = Path(program[0]).parent
        activate = bin_dir / "activate"
        if len(program) == 1 and activate.is_file():
            lines += ["The egress command is in " f"{bin_dir}; to call it by name:",
                      f"  source {shlex.quote(str(activate))}", ""]
    source = shlex.quote(f"sqlite:///{db}")
    lines += [
        "Next (every command runs as pasted; docs/cli.md has all options):",
        f"  {egress} export --source {source} --table orders --format jsonl --out out/",
        "  # press Ctrl-C during it, then run the command it prints (the same with --resume)",
        f"  {egress} jobs create --source {source} --table events --format parquet",
        f"  {egress} worker --exit-when-idle",
        f"  {egress} jobs ls",
        # the project of `jobs create` (default), so the page shows that export too
        f"  {egress} tokens create --project default "
        "--scopes exports:read,exports:create,exports:cancel --name me",
        # the demo database as the configured source "demo": the page's new-export form
        f"  EGRESS_SOURCE_DEMO_URL={source} {egress} serve",
        "  # the web page: open http://127.0.0.1:8080/ and sign in with the token that",
        "  # 'tokens create' printed (the API is under /v1, its docs at /docs)",
    ]
    return "\n".join(lines)
