"""``egress audit ls``: the audit log of a project (what ``GET /v1/audit`` shows admins)."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import click

from egress.cli.jobs import home_option, open_store
from egress.config import load_settings
from egress.domain.access import AUDIT_ACTIONS, AuditEntry


@click.group()
def audit() -> None:
    """Read the audit log: who created, cancelled, downloaded what, and from where."""


def _when(at: float) -> str:
    moment = dt.datetime.fromtimestamp(at, dt.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _json(entry: AuditEntry) -> dict[str, Any]:
    return {"id": entry.id, "action": entry.action, "at": _when(entry.at),
            "token_id": entry.token_id, "export_id": entry.export_id,
            "client_address": entry.client_address, "details": dict(entry.details)}


@audit.command("ls")
@home_option
@click.option("--project", required=True, help="The project whose log to read.")
@click.option("--action", "actions", multiple=True, type=click.Choice(AUDIT_ACTIONS),
              help="Only this action (repeatable).")
@click.option("--export", "export_id", default=None, help="Only entries of this export.")
@click.option("--limit", type=click.IntRange(1, 10_000), default=100, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def audit_ls(home: str | None, project: str, actions: tuple[str, ...], export_id: str | None,
             limit: int, as_json: bool) -> None:
    """List a project's audit entries, newest first."""
    store = open_store(load_settings(home))
    try:
        entries = store.audit_list(project, export_id=export_id, actions=actions or None,
                                   limit=limit)
    finally:
        store.close()
    if as_json:
        click.echo(json.dumps([_json(e) for e in entries], indent=2))
        return
    for e in entries:
        click.echo(f"{_when(e.at)}  {e.action:<15} {e.export_id or '-':<30} "
                   f"token {e.token_id or '-'}  from {e.client_address or '-'}")
