"""Credentials are masked in every form libpq accepts them, however oddly spelt."""

from __future__ import annotations

import pytest

from egress.redact import redact, redact_url

SECRET = "Xq7-s3cr"  # every password below contains it


@pytest.mark.parametrize("url, kept", [
    # userinfo, with the characters libpq and urlsplit read differently
    (f"postgresql://reader:{SECRET}et@db.internal:5432/shop", "reader:***@db.internal:5432"),
    (f"postgresql://reader:{SECRET}#et@db.internal:5432/shop", "reader:***@db.internal:5432"),
    (f"postgresql://reader:{SECRET}/et@db.internal:5432/shop", "reader:***@db.internal:5432"),
    (f"postgresql://reader:{SECRET}@et@db.internal:5432/shop", "reader:***@db.internal:5432"),
    (f"postgresql+psycopg://reader:{SECRET}%40et@db:5432/shop", "reader:***@db:5432"),
    # the query string (valid libpq syntax)
    (f"postgresql://127.0.0.1:5432/db?user=reader&password={SECRET}#/@x&sslmode=disable",
     "password=***&sslmode=disable"),
    (f"postgresql://db/shop?sslpassword={SECRET}", "sslpassword=***"),
    (f"postgresql://db/shop?passfile=/home/{SECRET}/.pgpass", "passfile=***"),
    (f"postgresql://db/shop?user=a@b.c&password={SECRET}", "user=a@b.c&password=***"),
    # libpq key=value DSNs, quoted or not
    (f"host=db.internal user=reader password={SECRET} dbname=shop", "password=*** dbname=shop"),
    (f"host=db password='{SECRET} with spaces \\' quote' dbname=shop", "password=*** dbname"),
])
def test_every_credential_form_is_masked(url: str, kept: str) -> None:
    for text in (redact_url(url), redact(f"cannot reach PostgreSQL at {url}: refused")):
        assert SECRET not in text and "et@db" not in text, text
        assert kept in text, text


def test_text_without_credentials_is_unchanged() -> None:
    for text in ("sqlite:////var/lib/egress/shop.db", "postgresql://reader@db:5432/shop",
                 "https://example.com/hook?email=a@b.c", "table 'users' not found"):
        assert redact_url(text) == text and redact(text) == text
