"""PostgresSource against a real server: catalog, keys, keyset pages, types, errors."""

from __future__ import annotations

import decimal
import math
from collections.abc import Iterator
from urllib.parse import urlsplit

import psycopg
import pyarrow as pa
import pytest

from egress.domain.predicate import Predicate
from egress.exceptions import (
    DataError,
    NoUsableKeyError,
    PermissionDeniedError,
    SourceUnavailableError,
    TableNotFoundError,
)
from egress.sources import open_source
from egress.sources.base import LOGICAL_TYPE, SOURCE_TYPE, TableInfo
from egress.sources.postgres import PostgresSource
from pgserver import PgServer, free_port

pytestmark = pytest.mark.postgres


def run(url: str, *statements: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)


def fetch(url: str, query: str) -> list[tuple[object, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(query).fetchall()


@pytest.fixture
def source(pg_url: str) -> Iterator[PostgresSource]:
    src = PostgresSource(pg_url)
    yield src
    src.close()


def read_all(src: PostgresSource, info: TableInfo, page: int) -> list[dict[str, object]]:
    """Every row, page by page with keyset pagination, as the engine reads them."""
    rows: list[dict[str, object]] = []
    after = None
    while True:
        batches = list(src.read(info, after, page))
        for batch in batches:
            assert batch.schema.equals(info.schema, check_metadata=True)
            rows += batch.to_pylist()
        if sum(b.num_rows for b in batches) < page:
            return rows
        after = tuple(rows[-1][k] for k in info.key_columns)


def test_catalog_columns_types_and_key(pg_url: str, source: PostgresSource) -> None:
    run(
        pg_url,
        "CREATE TYPE mood AS ENUM ('sad', 'happy')",
        "CREATE DOMAIN posint AS integer CHECK (VALUE > 0)",
        """CREATE TABLE kinds (
            id bigint PRIMARY KEY, small smallint NOT NULL, f4 real, f8 double precision,
            amount numeric(12, 3), big numeric, wide numeric(50, 2), name varchar(20),
            code char(3), data bytea, flag boolean, day date, at timestamp, at_tz timestamptz,
            clock time, doc jsonb, raw json, uid uuid, ints integer[], words text[],
            nums numeric[], grid integer[][], feeling mood, positive posint, span interval)""",
        "INSERT INTO kinds (id, small) VALUES (1, 1), (2, 2), (3, 3)",
    )
    info = source.describe("kinds")
    assert info.name == "kinds"
    assert info.key_columns == ("id",) and info.primary_key == ("id",)
    assert info.hidden_columns == ()
    assert info.row_estimate == 3
    types = {c.name: (c.arrow_type, c.source_type, c.logical_type) for c in info.columns}
    assert types == {
        "id": (pa.int64(), "bigint", None),
        "small": (pa.int16(), "smallint", None),
        "f4": (pa.float32(), "real", None),
        "f8": (pa.float64(), "double precision", None),
        "amount": (pa.decimal128(12, 3), "numeric(12,3)", None),
        "big": (pa.string(), "numeric", "decimal"),
        "wide": (pa.string(), "numeric(50,2)", "decimal"),
        "name": (pa.string(), "character varying(20)", None),
        "code": (pa.string(), "character(3)", None),
        "data": (pa.binary(), "bytea", None),
        "flag": (pa.bool_(), "boolean", None),
        "day": (pa.date32(), "date", None),
        "at": (pa.timestamp("us"), "timestamp without time zone", None),
        "at_tz": (pa.timestamp("us", tz="UTC"), "timestamp with time zone", None),
        "clock": (pa.time64("us"), "time without time zone", None),
        "doc": (pa.string(), "jsonb", "json"),
        "raw": (pa.string(), "json", "json"),
        "uid": (pa.string(), "uuid", None),
        "ints": (pa.list_(pa.int32()), "integer[]", None),
        "words": (pa.list_(pa.string()), "text[]", None),
        "nums": (pa.list_(pa.string()), "numeric[]", None),
        "grid": (pa.string(), "integer[]", None),
        "feeling": (pa.string(), "mood", None),
        "positive": (pa.int32(), "posint", None),
        "span": (pa.string(), "interval", None),
    }
    nullable = {c.name for c in info.columns if not c.nullable}
    assert nullable == {"id", "small"}
    field = info.schema.field("doc")
    assert field.metadata[LOGICAL_TYPE] == b"json" and field.metadata[SOURCE_TYPE] == b"jsonb"


def test_tables_plain_and_schema_qualified(pg_url: str, source: PostgresSource) -> None:
    run(
        pg_url,
        "CREATE SCHEMA audit",
        "CREATE TABLE events (id int PRIMARY KEY)",
        "CREATE TABLE audit.events (id int PRIMARY KEY, note text)",
        "CREATE TABLE audit.log (id int PRIMARY KEY)",
        "CREATE TABLE parted (id int PRIMARY KEY) PARTITION BY RANGE (id)",
        "CREATE TABLE parted_1 PARTITION OF parted FOR VALUES FROM (0) TO (100)",
        "CREATE VIEW not_a_table AS SELECT 1 AS x",
        "INSERT INTO parted SELECT generate_series(0, 9)",
    )
    assert source.tables() == ["audit.events", "audit.log", "events", "parted"]
    assert source.describe("events").column_names == ["id"]
    assert source.describe("public.events").column_names == ["id"]
    audit = source.describe("audit.events")
    assert audit.name == "audit.events" and audit.column_names == ["id", "note"]
    run(pg_url, "INSERT INTO audit.events VALUES (1, 'a'), (2, 'b')")
    assert read_all(source, audit, 10) == [{"id": 1, "note": "a"}, {"id": 2, "note": "b"}]
    parted = source.describe("parted")
    assert parted.row_estimate == 10
    assert [r["id"] for r in read_all(source, parted, 3)] == list(range(10))


def test_a_big_table_is_estimated_from_the_catalog_not_counted(
    pg_url: str, source: PostgresSource, monkeypatch: pytest.MonkeyPatch
) -> None:
    # every table "bigger" than the exact-count bound: the estimate is the catalog's
    # reltuples (1000 at the ANALYZE), not a count(*) of today's 1500 rows; a table not
    # partitioned read as 0 bytes before, and was counted at every describe
    monkeypatch.setattr("egress.sources.postgres.EXACT_COUNT_BYTES", 1)
    run(
        pg_url,
        # no autovacuum: its ANALYZE would move the estimate to 1500 under the test
        "CREATE TABLE big (id int PRIMARY KEY, v text) WITH (autovacuum_enabled = off)",
        "INSERT INTO big SELECT i, repeat('x', 100) FROM generate_series(1, 1000) i",
        "ANALYZE big",
        "INSERT INTO big SELECT i, 'y' FROM generate_series(1001, 1500) i",
        "CREATE TABLE parted (id int PRIMARY KEY) PARTITION BY RANGE (id)",
        "CREATE TABLE parted_1 PARTITION OF parted FOR VALUES FROM (0) TO (100)",
        "CREATE TABLE parted_2 PARTITION OF parted FOR VALUES FROM (100) TO (1000)",
        "INSERT INTO parted SELECT generate_series(0, 299)",
        "ANALYZE parted",
    )
    assert source.describe("big").row_estimate == 1000
    assert source.describe("parted").row_estimate == 300
    run(pg_url, "CREATE TABLE fresh (id int PRIMARY KEY) WITH (autovacuum_enabled = off)",
        "INSERT INTO fresh VALUES (1)")
    assert source.describe("fresh").row_estimate is None  # never analysed: unknown


def test_composite_key_with_ties_pages_in_row_value_order(
    pg_url: str, source: PostgresSource
) -> None:
    run(
        pg_url,
        """CREATE TABLE visits (tenant int, at timestamptz, uid uuid, label text,
           PRIMARY KEY (tenant, at, uid))""",
        # many ties in the first and second columns, so a page often ends inside a group
        """INSERT INTO visits SELECT g % 3, timestamptz '2024-01-01 00:00:00+00'
           + ((g % 5) * interval '1 microsecond'), md5(g::text)::uuid, 'row ' || g
           FROM generate_series(1, 200) g""",
    )
    info = source.describe("visits")
    assert info.key_columns == ("tenant", "at", "uid")
    expected = [r[0] for r in fetch(pg_url, "SELECT label FROM visits ORDER BY tenant, at, uid")]
    for page in (1, 7, 64, 500):
        assert [r["label"] for r in read_all(source, info, page)] == expected


def test_key_values_compare_as_their_column_type(pg_url: str, source: PostgresSource) -> None:
    # As text, '10' < '9' and '100' < '11': the cursor must be cast to numeric.
    values = ["-1.5", "0", "1", "9", "10", "11", "100", "1e3", "12345678901234567890.5"]
    run(pg_url, "CREATE TABLE amounts (n numeric PRIMARY KEY, by_bytes bytea UNIQUE NOT NULL)")
    with psycopg.connect(pg_url, autocommit=True) as conn:
        for i, v in enumerate(values):
            conn.execute("INSERT INTO amounts VALUES (%s::numeric, %s)", (v, bytes([255 - i, 0])))
    info = source.describe("amounts")
    got = [decimal.Decimal(r["n"]) for r in read_all(source, info, 2)]
    assert got == sorted(decimal.Decimal(v) for v in values)


def test_cursor_written_into_the_query_pages_awkward_text_and_bytea_keys(
    pg_url: str, source: PostgresSource
) -> None:
    # An unfiltered read writes the cursor into the query as a quoted literal (the driver
    # then streams a COPY); quotes, backslashes, SQL and unicode must survive the quoting.
    keys = ["a'b", "a''", "back\\slash", "x'); DROP TABLE texts; --", "ünï 🦆", "$1", "E'\\n'"]
    run(pg_url, "CREATE TABLE texts (k text COLLATE \"C\" PRIMARY KEY, v int)",
        "CREATE TABLE blobs (k bytea PRIMARY KEY)")
    with psycopg.connect(pg_url, autocommit=True) as conn:
        for i, k in enumerate(keys):
            conn.execute("INSERT INTO texts VALUES (%s, %s)", (k, i))
            conn.execute("INSERT INTO blobs VALUES (%s)", (k.encode() + b"\x00\\'",))
    info = source.describe("texts")
    for page in (1, 2, 3):
        assert [r["k"] for r in read_all(source, info, page)] == sorted(
            keys, key=lambda k: k.encode())
    blobs = source.describe("blobs")
    expected = [r[0] for r in fetch(pg_url, "SELECT k FROM blobs ORDER BY k")]
    assert [r["k"] for r in read_all(source, blobs, 1)] == expected
    assert fetch(pg_url, "SELECT count(*) FROM texts") == [(len(keys),)]


def test_filtered_reads_bind_their_values_and_page_like_unfiltered_ones(
    pg_url: str, source: PostgresSource
) -> None:
    run(pg_url, "CREATE TABLE nums (id int PRIMARY KEY, label text)",
        "INSERT INTO nums SELECT g, 'n' || g FROM generate_series(1, 50) g")
    info = source.describe("nums")
    every = Predicate.from_json(
        [{"column": "label", "op": "!=", "value": "x'; DROP TABLE nums; --"}])
    rows: list[dict[str, object]] = []
    after = None
    while True:
        page = [r for b in source.read(info, after, 7, predicate=every) for r in b.to_pylist()]
        rows += page
        if len(page) < 7:
            break
        after = (page[-1]["id"],)
    assert rows == read_all(source, info, 7)
    assert len(rows) == 50


def test_unique_index_over_not_null_columns_is_the_key(pg_url: str, source: PostgresSource) -> None:
    run(
        pg_url,
        """CREATE TABLE nokey (a text NOT NULL, b int NOT NULL, c int, d int NOT NULL)""",
        "CREATE UNIQUE INDEX nokey_c ON nokey (c)",  # nullable: unusable
        "CREATE UNIQUE INDEX nokey_partial ON nokey (d) WHERE d > 0",  # partial: unusable
        "CREATE UNIQUE INDEX nokey_expr ON nokey (lower(a), b)",  # expression: unusable
        "CREATE UNIQUE INDEX nokey_ab ON nokey (b, a) INCLUDE (c)",
        "INSERT INTO nokey SELECT 'x' || (g % 4), g / 4, g, g FROM generate_series(0, 30) g",
    )
    info = source.describe("nokey")
    assert info.primary_key == ()
    assert info.key_columns == ("b", "a")
    rows = read_all(source, info, 4)
    assert [(r["b"], r["a"]) for r in rows] == fetch(pg_url, "SELECT b, a FROM nokey ORDER BY b, a")


def test_no_usable_key_names_the_table_and_the_options(
    pg_url: str, source: PostgresSource
) -> None:
    run(
        pg_url,
        "CREATE TABLE loose (a int, b int)",
        "CREATE UNIQUE INDEX loose_a ON loose (a)",
    )
    with pytest.raises(NoUsableKeyError) as err:
        source.describe("loose")
    message = str(err.value)
    assert "'loose'" in message
    assert "PRIMARY KEY" in message and "UNIQUE index" in message and "NOT NULL" in message


def test_unknown_table_lists_close_names(pg_url: str, source: PostgresSource) -> None:
    run(pg_url, "CREATE TABLE orders (id int PRIMARY KEY)", "CREATE TABLE order_items (id int)")
    with pytest.raises(TableNotFoundError) as err:
        source.describe("ordres")
    assert err.value.close[0] == "orders"
    assert "did you mean orders" in str(err.value)
    with pytest.raises(TableNotFoundError):
        source.describe('"orders"')


def test_extreme_and_special_values(pg_url: str, source: PostgresSource) -> None:
    run(
        pg_url,
        """CREATE TABLE edge (id int PRIMARY KEY, i8 bigint, f4 real, f8 float8,
           n numeric(38, 10), t text, ints bigint[], fl float8[], bs boolean[], ch char(2)[])""",
        """INSERT INTO edge VALUES
           (1, -9223372036854775808, 'NaN', '-Infinity', '-9999999999999999999999999999.9999999999',
            E'a,"b"\\r\\n\\u00e9\\u2713\\U0001F600\\x01', '{-9223372036854775808,NULL}',
            '{NaN,Infinity,-0}', '{t,NULL}', '{a,NULL}'),
           (2, 9223372036854775807, 'Infinity', '5e-324', '0.0000000001', '',
            '{}', '{}', '{}', '{}'),
           (3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)""",
    )
    rows = read_all(source, source.describe("edge"), 10)
    first, second, third = rows
    assert first["i8"] == -(2**63) and second["i8"] == 2**63 - 1
    assert math.isnan(first["f4"]) and second["f4"] == math.inf
    assert first["f8"] == -math.inf and second["f8"] == 5e-324
    assert first["n"] == decimal.Decimal("-9999999999999999999999999999.9999999999")
    assert second["n"] == decimal.Decimal("0.0000000001")
    assert first["t"] == 'a,"b"\r\né✓😀\x01' and second["t"] == ""
    assert first["ints"] == [-(2**63), None] and second["ints"] == []
    nan, inf, zero = first["fl"]
    assert math.isnan(nan) and inf == math.inf and zero == 0 and math.copysign(1, zero) == -1
    assert first["bs"] == [True, None] and first["ch"] == ["a ", None]
    assert all(v is None for k, v in third.items() if k != "id")


@pytest.mark.parametrize(
    ("column", "value", "needle"),
    [
        ("timestamp", "'infinity'", "infinity"),
        ("timestamptz", "'-infinity'", "infinity"),
        ("date", "'infinity'", "infinity"),
        ("time", "'24:00:00'", "24:00:00"),
        ("numeric(10,2)", "'NaN'", "numeric(10,2)"),
        ("int[]", "'{{1,2},{3,4}}'", "multi-dimensional"),
        ("text[]", "'[0:1]={a,b}'", "index 1"),
    ],
)
def test_values_arrow_cannot_hold_are_refused(
    pg_url: str, source: PostgresSource, column: str, value: str, needle: str
) -> None:
    run(
        pg_url,
        f"CREATE TABLE odd (id int PRIMARY KEY, v {column})",
        f"INSERT INTO odd VALUES (1, NULL), (2, {value})",
    )
    with pytest.raises(DataError) as err:
        read_all(source, source.describe("odd"), 10)
    assert "'v'" in str(err.value) and needle in str(err.value)


def test_unreachable_server_is_transient_and_redacted() -> None:
    url = f"postgresql+psycopg://alice:s3cr%40tpw@127.0.0.1:{free_port()}/db"
    with pytest.raises(SourceUnavailableError) as err:
        open_source(url)
    message = str(err.value)
    assert err.value.transient
    assert "s3cr" not in message and "alice:***@127.0.0.1" in message


def test_permission_denied_is_a_clear_error(pg_url: str) -> None:
    run(
        pg_url,
        "CREATE ROLE reader LOGIN",
        "CREATE TABLE secret (id int PRIMARY KEY)",
        "CREATE TABLE shared (id int PRIMARY KEY)",
        "GRANT SELECT ON shared TO reader",
    )
    parts = urlsplit(pg_url)
    reader_url = parts._replace(netloc=f"reader:pw@{parts.hostname}:{parts.port}").geturl()
    src = PostgresSource(reader_url)
    try:
        with pytest.raises(PermissionDeniedError, match=r"'secret'.*GRANT SELECT"):
            src.describe("secret")
        info = src.describe("shared")
        run(pg_url, "REVOKE SELECT ON shared FROM reader")
        with pytest.raises(PermissionDeniedError, match="'shared'") as err:
            list(src.read(info, None, 10))
        assert "pw" not in str(err.value)
    finally:
        src.close()


def test_table_dropped_after_describe(pg_url: str, source: PostgresSource) -> None:
    run(pg_url, "CREATE TABLE gone (id int PRIMARY KEY)", "CREATE TABLE kept (id int PRIMARY KEY)")
    info = source.describe("gone")
    run(pg_url, "DROP TABLE gone")
    with pytest.raises(TableNotFoundError, match="'gone'"):
        list(source.read(info, None, 10))


def test_lost_connection_is_transient_then_reconnects(
    pg_url: str, pg_server: PgServer, source: PostgresSource
) -> None:
    run(pg_url, "CREATE TABLE t (id int PRIMARY KEY)", "INSERT INTO t VALUES (1), (2)")
    info = source.describe("t")
    assert read_all(source, info, 10) == [{"id": 1}, {"id": 2}]
    dbname = urlsplit(pg_url).path.lstrip("/")
    run(
        pg_server.url,
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        f"WHERE application_name = 'egress' AND datname = '{dbname}'",
    )
    with pytest.raises(SourceUnavailableError):
        list(source.read(info, None, 10))
    assert read_all(source, info, 10) == [{"id": 1}, {"id": 2}]


def test_read_leaves_no_transaction_open(pg_url: str, source: PostgresSource) -> None:
    run(pg_url, "CREATE TABLE t (id int PRIMARY KEY)",
        "INSERT INTO t SELECT generate_series(1, 200000)")
    info = source.describe("t")
    reader = source.read(info, None, 200000)
    assert next(reader).num_rows > 0
    dbname = urlsplit(pg_url).path.lstrip("/")
    state = f"SELECT state FROM pg_stat_activity WHERE application_name = 'egress' " \
            f"AND datname = '{dbname}'"
    assert fetch(pg_url, state) == [("idle in transaction",)]
    reader.close()  # the engine closes a reader it stops early
    assert fetch(pg_url, state) == [("idle",)]


def test_a_rollback_that_fails_is_logged_and_its_connection_replaced(
    pg_url: str, pg_server: PgServer, source: PostgresSource, caplog: pytest.LogCaptureFixture
) -> None:
    run(pg_url, "CREATE TABLE t (id int PRIMARY KEY)",
        "INSERT INTO t SELECT generate_series(1, 200000)")
    info = source.describe("t")
    reader = source.read(info, None, 200000)
    assert next(reader).num_rows > 0  # the page's query is done: idle in transaction
    dbname = urlsplit(pg_url).path.lstrip("/")
    # the timeout makes the call wait until the backend has exited
    run(pg_server.url, "SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity "
        f"WHERE application_name = 'egress' AND datname = '{dbname}'")
    with caplog.at_level("WARNING", logger="egress.sources.postgres"):
        reader.close()  # its ROLLBACK meets a connection the server has ended
    assert [r.getMessage() for r in caplog.records if "read transaction" in r.getMessage()]
    assert "the next page opens a new one" in caplog.text
    assert pg_url.split("@")[0] not in caplog.text  # nothing of the URL's credentials
    assert len(read_all(source, info, 100000)) == 200000  # on a new connection


def test_a_page_arrives_in_batches_of_about_the_hint_not_whole(
        pg_url: str, source: PostgresSource) -> None:
    from egress.sources.postgres import BATCH_HINT_BYTES

    # 60k rows of ~500 bytes: 30 MB in one page, under BATCH_ROWS rows
    run(pg_url, "CREATE TABLE wide (id int PRIMARY KEY, body text NOT NULL)",
        "INSERT INTO wide SELECT g, repeat('x', 500) FROM generate_series(1, 60000) g")
    info = source.describe("wide")
    batches = list(source.read(info, None, 60000))
    assert sum(b.num_rows for b in batches) == 60000
    # the driver ends a batch near the hint: what waits in the read-ahead stays small
    assert len(batches) >= 5
    assert max(b.nbytes for b in batches) < 2 * BATCH_HINT_BYTES


def test_a_reader_left_open_does_not_lend_its_snapshot(pg_url: str, source: PostgresSource) -> None:
    run(pg_url, "CREATE TABLE t (id int PRIMARY KEY)", "INSERT INTO t VALUES (1), (2)")
    info = source.describe("t")
    stale = source.read(info, None, 1)
    assert next(stale).to_pylist() == [{"id": 1}]  # its transaction is open now
    run(pg_url, "INSERT INTO t VALUES (3)")
    assert read_all(source, info, 10) == [{"id": 1}, {"id": 2}, {"id": 3}]
    stale.close()  # ending the old reader late leaves the connection usable
    assert read_all(source, info, 10) == [{"id": 1}, {"id": 2}, {"id": 3}]


@pytest.mark.parametrize("scheme", ["postgres", "postgresql+psycopg"])
def test_url_schemes(pg_url: str, scheme: str) -> None:
    run(pg_url, "CREATE TABLE t (id int PRIMARY KEY)")
    src = open_source(pg_url.replace("postgresql", scheme, 1))
    try:
        assert isinstance(src, PostgresSource) and src.tables() == ["t"]
    finally:
        src.close()


def test_a_page_past_the_statement_timeout_is_cancelled_and_transient(
    pg_url: str, source: PostgresSource
) -> None:
    """Source protection: ``statement_timeout_seconds`` cancels a page's query that runs
    too long (here: waiting on a lock another session holds) as a transient error."""
    run(pg_url, "CREATE TABLE slow (id int PRIMARY KEY)", "INSERT INTO slow VALUES (1), (2)")
    info = source.describe("slow")
    source.set_statement_timeout(0.2)
    with psycopg.connect(pg_url) as holder:
        holder.execute("LOCK TABLE slow IN ACCESS EXCLUSIVE MODE")
        with pytest.raises(SourceUnavailableError,
                           match=r"statement_timeout_seconds \(0.2 s\) and was cancelled"):
            list(source.read(info, None, 10))
    # the lock gone, the same source reads again, under the same timeout
    assert read_all(source, info, 10) == [{"id": 1}, {"id": 2}]
    assert fetch(pg_url, "SELECT count(*) FROM pg_stat_activity WHERE application_name = "
                 "'egress' AND state = 'idle in transaction'") == [(0,)]


@pytest.mark.parametrize("standard_strings", ["on", "off"])
def test_a_quoted_literal_reads_back_as_its_text(pg_url: str, standard_strings: str) -> None:
    """The cursor of a COPY read is written into the query (sources/pg_keyset.py
    ``quote_literal``): whatever the text, the server reads back the same text."""
    from egress.sources.pg_keyset import quote_literal

    texts = ["plain", "it's", "''", "back\\slash", "\\'; DROP TABLE t; --", "\\\\'\\",
             "é 中 \N{PILE OF POO}", "line\nbreak\r\ttab", "E'x'", "$$dollar$$"]
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f"SET standard_conforming_strings = {standard_strings}")
        for text in texts:
            row = conn.execute(f"SELECT {quote_literal(text)}::text").fetchone()
            assert row == (text,), text
    with pytest.raises(ValueError, match="NUL"):
        quote_literal("a\0b")


def test_a_failed_catalog_connection_leaves_no_read_connection_open(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the read connection opens on a thread while the catalog's does: when the catalog's
    # fails, the read connection that did open is closed, and the catalog's error raised
    opened: list[object] = []
    real_open = PostgresSource._open_adbc

    def open_adbc(self: PostgresSource) -> object:
        opened.append(real_open(self))
        return opened[-1]

    def catalog_fails(self: PostgresSource) -> object:
        raise SourceUnavailableError("the catalog's connection failed")

    monkeypatch.setattr(PostgresSource, "_open_adbc", open_adbc)
    monkeypatch.setattr(PostgresSource, "_catalog_conn", catalog_fails)
    with pytest.raises(SourceUnavailableError, match="catalog's connection failed"):
        PostgresSource(pg_url)
    assert len(opened) == 1
    with pytest.raises(Exception, match=r"INVALID_STATE|closed"):
        opened[0].cursor()  # type: ignore[attr-defined]
