"""One TOML file plus ``EGRESS_*`` variables for every setting; ``egress config check``
prints the effective configuration with secrets masked; docs/configuration.md lists
every setting as the code defines it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from egress.cli import main
from egress.config import SECTION_PREFIXES, load_settings, unknown_variables
from egress.config_reference import entries, reference_markdown
from egress.exceptions import ConfigError
from egress.sinks import sink_from_destination

DOCS = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def test_the_docs_list_every_setting_as_the_code_defines_it() -> None:
    text = DOCS.read_text()
    block = text.split("<!-- settings:begin -->\n", 1)[1].split("<!-- settings:end -->", 1)[0]
    assert block == reference_markdown(), (
        "docs/configuration.md is out of date: put the output of 'egress config reference' "
        "between its settings markers")
    every = list(entries())
    assert len(every) > 60 and all(e.doc for e in every), [e.name for e in every if not e.doc]
    assert {e.section for e in every} == {*SECTION_PREFIXES.values(), "sources.<name>"}


def test_every_section_setting_can_be_set_from_the_environment(tmp_path: Path) -> None:
    """Each setting's variable reaches it (a value unlike the default, of its type)."""
    for e in entries():
        if isinstance(e.default, bool):
            value, expected = ("false" if e.default else "true"), not e.default
        elif isinstance(e.default, int):
            value, expected = "7", 7
        elif isinstance(e.default, float):
            value, expected = str(e.default + 1.5), e.default + 1.5
        elif isinstance(e.default, tuple):
            value, expected = "3,4.5", (3.0, 4.5)
        elif e.default is None:
            value, expected = "5", 5
        else:
            value, expected = "http://127.0.0.1:1", "http://127.0.0.1:1"
        if e.name in ("lease_seconds",) and e.section == "webhooks":
            value, expected = "99.5", 99.5  # must stay above webhooks.timeout
        if e.section == "sources.<name>":  # a source named app_db, of PostgreSQL
            env = {"EGRESS_SOURCE_APP_DB_URL": "postgresql://r@db/app",
                   e.variable.replace("<NAME>", "APP_DB"): value}
            assert getattr(load_settings(tmp_path, env=env).limits_of("app_db"),
                           e.name) == expected, e
            continue
        try:
            settings = load_settings(tmp_path, env={e.variable: value})
        except ConfigError as exc:  # a range check of its own: the value got there
            assert e.section in str(exc) or e.name in str(exc), (e, exc)
            continue
        assert getattr(getattr(settings, e.section), e.name) == expected, e


def test_the_file_from_egress_config_and_the_environment_over_it(tmp_path: Path) -> None:
    config = tmp_path / "etc" / "egress.toml"
    config.parent.mkdir()
    config.write_text('[store]\nurl = "postgresql://egress@db/egress"\n'
                      '[sources.main]\nurl = "postgresql://reader@db/app"\n'
                      '[destinations.lake]\ntype = "s3"\nbucket = "exports"\n'
                      "[worker]\nconcurrency = 3\nlease_seconds = 12\n")
    env = {"EGRESS_CONFIG": str(config), "EGRESS_WORKER_LEASE_SECONDS": "20",
           "EGRESS_SOURCE_MAIN_PASSWORD": "p@ss/w#rd",
           "EGRESS_SOURCE_OTHER_DB_URL": "sqlite:///x.db",
           "EGRESS_DESTINATION_LAKE_MIN_PART_BYTES": "6291456",
           "EGRESS_DESTINATION_LAKE_CHECK_PARTS": "false",
           "EGRESS_DESTINATION_LAKE_ENDPOINT_URL": "http://127.0.0.1:9000",
           "EGRESS_ALLOW_SOURCE_URLS": "no"}
    settings = load_settings(tmp_path / "home", env=env)
    assert settings.store_url == "postgresql://egress@db/egress"
    assert (settings.worker.concurrency, settings.worker.lease_seconds) == (3, 20.0)
    assert settings.sources["main"] == "postgresql://reader:p%40ss%2Fw%23rd@db/app"
    assert settings.sources["other_db"] == "sqlite:///x.db"
    assert settings.destinations["lake"]["endpoint_url"] == "http://127.0.0.1:9000"
    assert settings.allow_source_urls is False
    sink = sink_from_destination(settings.destinations["lake"])
    assert sink.min_part_bytes == 6291456 and sink.check_parts is False  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match="no configuration file at"):
        load_settings(tmp_path, env={"EGRESS_CONFIG": str(tmp_path / "missing.toml")})


@pytest.mark.parametrize(("toml", "env", "message"), [
    ("[wrker]\nconcurrency = 2\n", {}, "unknown setting(s) wrker in"),
    ("[worker]\nconcurency = 2\n", {}, "unknown setting worker.concurency; allowed:"),
    ("", {"EGRESS_WORKER_LEASE_SECONDS": "soon"}, "bad value for worker.lease_seconds"),
    ("", {"EGRESS_DESTINATION_LAKE_COLOUR": "red"}, "unknown destination setting"),
    ("", {"EGRESS_ALLOW_SOURCE_URLS": "perhaps"}, "bad value for allow_source_urls"),
    ("worker = 3\n", {}, "[worker] in"),
    ("[api]\nkeep_alive_seconds = 0\n", {}, "bad value for api.keep_alive_seconds: 0"),
])
def test_bad_configuration_is_refused_by_name(tmp_path: Path, toml: str, env: dict[str, str],
                                              message: str) -> None:
    (tmp_path / "egress.toml").write_text(toml)
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_settings(tmp_path, env=env)


def test_config_check_prints_the_settings_in_force_with_secrets_masked(tmp_path: Path) -> None:
    (tmp_path / "egress.toml").write_text(
        '[store]\nurl = "postgresql://egress:store-secret@db/egress"\n'
        '[sources.main]\nurl = "postgresql://reader@db/app"\npassword = "source-secret"\n'
        '[destinations.lake]\ntype = "s3"\nbucket = "b"\naws_secret_access_key = "s3-secret"\n'
        '[api]\nlink_signing_key = "' + "k" * 40 + '"\n')
    env = {"EGRESS_HOME": str(tmp_path), "EGRESS_WORKER_API_TOKEN": "egr_worker-secret",
           "EGRESS_WORKER_API_URL": "http://127.0.0.1:8080", "EGRESS_WORKR_NICE": "1"}
    result = CliRunner().invoke(main, ["config", "check"], env=env)
    assert result.exit_code == 0, result.output
    out = result.stdout
    for secret in ("store-secret", "source-secret", "s3-secret", "k" * 40, "worker-secret"):
        assert secret not in result.output
    assert 'url = "postgresql://egress:***@db/egress"' in out
    assert 'aws_secret_access_key = "***"' in out and 'api_token = "***"' in out
    assert 'api_url = "http://127.0.0.1:8080"' in out and "lease_seconds = 30.0" in out
    assert "EGRESS_WORKR_NICE is set but no setting reads it" in result.stderr
    assert unknown_variables({"EGRESS_WORKR_NICE": "1", "EGRESS_HOME": "x",
                              "EGRESS_SOURCE_A_URL": "u",
                              "EGRESS_DESTINATION_A_BUCKET": "b"}) == ["EGRESS_WORKR_NICE"]

    (tmp_path / "bad.toml").write_text('[destinations.x]\ntype = "ftp"\n'
                                       '[sources.y]\nurl = "oracle://h/db"\n')
    bad = CliRunner().invoke(main, ["config", "check", str(tmp_path / "bad.toml")], env=env)
    assert bad.exit_code == 2
    assert "destinations.x: unknown type 'ftp'; allowed: local, s3" in bad.stderr
    assert "sources.y: unknown kind 'oracle'" in bad.stderr
