"""``egress tokens create|ls|revoke``: API tokens of a project.

``create`` prints the new token once, on stdout alone (so ``TOKEN=$(egress tokens
create …)`` works); only its SHA-256 is stored, so a lost token cannot be shown again:
revoke it and make another.
"""

from __future__ import annotations

import datetime as dt
import json

import click

from egress import stored_exports
from egress.cli.jobs import home_option, json_option, open_store
from egress.config import load_settings
from egress.domain.access import (
    SCOPES,
    TokenRecord,
    check_scopes,
    check_token_name,
    hash_token,
    new_token,
)
from egress.domain.ids import new_id
from egress.exceptions import NotFoundError


def _when(value: float | None) -> str:
    if value is None:
        return "-"
    return dt.datetime.fromtimestamp(value, dt.UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def _public(t: TokenRecord) -> dict[str, object]:
    return {"id": t.id, "project": t.project, "name": t.name, "scopes": list(t.scopes),
            "created_at": t.created_at, "last_used_at": t.last_used_at,
            "revoked_at": t.revoked_at}


@click.group()
def tokens() -> None:
    """Create, list and revoke API tokens."""


@tokens.command("create")
@home_option
@click.option("--project", required=True, help="Project (tenant) the token acts for.")
@click.option("--scopes", required=True,
              help=f"Comma-separated scopes: {', '.join(SCOPES)}.")
@click.option("--name", default="token", show_default=True, help="A label for humans.")
@json_option
def tokens_create(home: str | None, project: str, scopes: str, name: str,
                  as_json: bool) -> None:
    """Make a token; prints it once (only its hash is stored)."""
    stored_exports.check_project(project)
    wanted = check_scopes([s.strip() for s in scopes.split(",") if s.strip()])
    check_token_name(name)
    settings = load_settings(home)
    store = open_store(settings)
    try:
        secret = new_token()
        record = store.token_create(TokenRecord(
            id=new_id("tok"), project=project, name=name, token_hash=hash_token(secret),
            scopes=wanted))
    finally:
        store.close()
    if as_json:
        click.echo(json.dumps({**_public(record), "token": secret}))
        return
    click.echo(secret)
    click.echo(f"token {record.id} for project {project!r} with scopes {', '.join(wanted)}; "
               "it is shown only now", err=True)


@tokens.command("ls")
@home_option
@click.option("--project", help="Only this project's tokens.")
@json_option
def tokens_ls(home: str | None, project: str | None, as_json: bool) -> None:
    """List tokens (never the tokens themselves)."""
    settings = load_settings(home)
    store = open_store(settings)
    try:
        found = store.token_list(project)
    finally:
        store.close()
    if as_json:
        click.echo(json.dumps([_public(t) for t in found], indent=2))
        return
    for t in found:
        state = f"revoked {_when(t.revoked_at)}" if t.revoked_at else "active"
        click.echo(f"{t.id}  {t.project:<16} {t.name:<16} {','.join(t.scopes):<40} "
                   f"last used {_when(t.last_used_at)}  {state}")


@tokens.command("revoke")
@home_option
@click.argument("token_id")
@click.option("--project", help="Refuse unless the token belongs to this project.")
def tokens_revoke(home: str | None, token_id: str, project: str | None) -> None:
    """Revoke a token at once (its signed download links stop working too)."""
    settings = load_settings(home)
    store = open_store(settings)
    try:
        record = store.token_revoke(token_id, project)
    finally:
        store.close()
    if record is None:
        where = f" in project {project!r}" if project else ""
        raise NotFoundError(f"no token {token_id!r}{where}")
    click.echo(f"{record.id}  revoked {_when(record.revoked_at)}")

