"""Every setting with its default, its variable and its meaning, read from the settings'
own classes and their ``#:`` comments (config.py): the reference in
docs/configuration.md is this module's output, and a test keeps the two equal.

It also renders the effective settings as TOML with every secret masked, for
``egress config check``.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from egress import config
from egress.config import (
    ApiSettings,
    ExportDefaults,
    RemoteSettings,
    Settings,
    WebhookSettings,
    WorkerSettings,
)
from egress.domain.limits import SourceLimits
from egress.redact import MASK, redact_url

#: section → its class, in the order of the reference
SECTIONS: dict[str, type] = {"worker": WorkerSettings, "export": ExportDefaults,
                             "api": ApiSettings, "webhooks": WebhookSettings,
                             "remote": RemoteSettings}
#: the per-source section (one per configured source, beside its url and password)
SOURCE_SECTION = "sources.<name>"
#: setting names whose values are secrets: masked wherever settings are shown
_SECRET = re.compile(r"(secret|token|password|signing_key)", re.IGNORECASE)


@dataclass(frozen=True)
class Entry:
    section: str
    name: str
    default: Any
    variable: str
    doc: str


def _comments(cls: type) -> dict[str, str]:
    """The ``#:`` comment lines above each field of a dataclass, joined."""
    source = inspect.getsource(cls)
    lines = source.splitlines()
    docs: dict[str, str] = {}
    for node in ast.parse(source).body[0].body:  # type: ignore[attr-defined]
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            comment: list[str] = []
            index = node.lineno - 2
            while index >= 0 and lines[index].strip().startswith("#:"):
                comment.insert(0, lines[index].strip()[2:].strip())
                index -= 1
            docs[node.target.id] = " ".join(comment)
    return docs


def _default(field: dataclasses.Field[Any]) -> Any:
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return None


def _classes() -> dict[str, type]:
    return {**SECTIONS, SOURCE_SECTION: SourceLimits}


def entries() -> Iterator[Entry]:
    for section, cls in _classes().items():
        docs = _comments(cls)
        prefix = "EGRESS_SOURCE_<NAME>" if section == SOURCE_SECTION else \
            f"EGRESS_{section.upper()}"
        for field in dataclasses.fields(cls):
            yield Entry(section, field.name, _default(field),
                        f"{prefix}_{field.name.upper()}", docs.get(field.name, ""))


def _shown(value: Any) -> str:
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and math.isinf(value):
        return "inf"
    if isinstance(value, tuple):
        return ", ".join(_shown(v) for v in value)
    if value == "":
        return '""'
    return str(value)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def reference_markdown() -> str:
    """The settings tables of docs/configuration.md (between its markers)."""
    out: list[str] = []
    current = None
    for e in entries():
        if e.section != current:
            current = e.section
            cls = _classes()[current]
            doc = (inspect.getdoc(cls) or "").split("\n\n")[0]
            out += ["", f"### [{current}]", ""]
            if doc and not doc.startswith(cls.__name__ + "("):
                out += [_cell(doc), ""]
            out += ["| setting | default | variable | meaning |", "|---|---|---|---|"]
        out.append(f"| `{e.name}` | `{_cell(_shown(e.default))}` | `{e.variable}` | "
                   f"{_cell(e.doc)} |")
    return "\n".join(out).strip() + "\n"


# --- the effective settings as TOML -----------------------------------------------------


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return "inf" if isinstance(value, float) and math.isinf(value) else repr(value)
    if isinstance(value, tuple | list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    text = str(value).replace("\\", "\\\\").replace('"', '\\"')
    return f'"{text}"'


def _masked(name: str, value: Any) -> Any:
    if isinstance(value, str) and value and _SECRET.search(name):
        return MASK
    if isinstance(value, str) and "://" in value:
        return redact_url(value)
    return value


def effective_toml(settings: Settings) -> str:
    """The settings in force, as egress.toml would say them; secrets masked."""
    lines = [f"# home: {settings.home}", f"allow_source_urls = "
             f"{_toml_value(settings.allow_source_urls)}", "", "[store]",
             f"url = {_toml_value(redact_url(settings.store_url))}"]
    for name, url in sorted(settings.sources.items()):
        lines += ["", f"[sources.{name}]", f"url = {_toml_value(redact_url(url))}"]
        limits = settings.limits_of(name)
        lines += [f"{f.name} = {_toml_value(getattr(limits, f.name))}"
                  for f in dataclasses.fields(limits)]
    for name, dest in sorted(settings.destinations.items()):
        lines += ["", f"[destinations.{name}]"]
        lines += [f"{k} = {_toml_value(_masked(k, v))}" for k, v in dest.items()]
    for section in SECTIONS:
        values = getattr(settings, section)
        lines += ["", f"[{section}]"]
        for field in dataclasses.fields(values):
            value = getattr(values, field.name)
            if value is None:
                lines.append(f"# {field.name} is unset")
            else:
                lines.append(f"{field.name} = {_toml_value(_masked(field.name, value))}")
    return "\n".join(lines) + "\n"


def check_destinations(settings: Settings) -> list[str]:
    """Problems with the destinations' settings, without opening any."""
    problems = []
    for name, dest in sorted(settings.destinations.items()):
        kind = dest.get("type", "local")
        unknown = sorted(set(dest) - set(config.DESTINATION_KEYS))
        if unknown:
            problems.append(f"destinations.{name}: unknown setting(s) {', '.join(unknown)}; "
                            f"allowed: {', '.join(config.DESTINATION_KEYS)}")
        if kind not in ("local", "s3"):
            problems.append(f"destinations.{name}: unknown type {kind!r}; allowed: local, s3")
        elif kind == "local" and not dest.get("path"):
            problems.append(f"destinations.{name}: a local destination needs a path")
        elif kind == "s3" and not dest.get("bucket"):
            problems.append(f"destinations.{name}: an s3 destination needs a bucket")
    return problems
