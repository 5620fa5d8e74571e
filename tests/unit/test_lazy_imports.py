"""The sources' drivers load no library egress never uses (sources/lazy_imports.py)."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def _run(code: str) -> str:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, check=True, timeout=120).stdout.strip()


def test_importing_the_adbc_sources_leaves_pyarrow_dataset_unloaded() -> None:
    out = _run("""
        import sys
        import egress.sources.postgres, egress.sources.sqlite
        import adbc_driver_manager.dbapi
        print(sorted(m for m in sys.modules if m.startswith(("pyarrow._dataset",
                                                             "pyarrow._acero", "psycopg"))))
    """)
    assert out == "[]"


def test_a_deferred_module_is_whole_at_its_first_use() -> None:
    out = _run("""
        import sys
        import egress.sources.sqlite
        import pyarrow as pa
        import pyarrow.dataset as ds  # the stand-in
        table = ds.dataset(pa.table({"a": [1, 2]})).to_table()
        real = sys.modules["pyarrow.dataset"]
        print(table.num_rows, real is pa.dataset, real is not ds, hasattr(real, "Scanner"))
    """)
    assert out == "2 True True True"


def test_defer_leaves_an_imported_or_unknown_module_alone() -> None:
    out = _run("""
        import sys, json
        from egress.sources import lazy_imports
        lazy_imports.defer("json")
        lazy_imports.defer("no_such_module_here")
        print(sys.modules["json"] is json, "no_such_module_here" in sys.modules)
    """)
    assert out == "True False"


def test_only_a_parquet_export_loads_pyarrow_parquet(tmp_path) -> None:
    """Parquet's module (pyarrow.parquet, ~30 ms of a start-up) is loaded by the first
    Parquet export, not by a text export or an idle worker."""
    out = _run(f"""
        import sqlite3, sys
        db = sqlite3.connect({str(tmp_path / "t.db")!r})
        db.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)")
        db.execute("INSERT INTO t VALUES (1, 'a')")
        db.commit()
        import egress
        url = "sqlite:///{tmp_path / "t.db"}"
        egress.export(url, ["t"], to={str(tmp_path / "csv")!r}, format="csv")
        seen = ["pyarrow.parquet" in sys.modules]
        egress.export(url, ["t"], to={str(tmp_path / "parquet")!r}, format="parquet")
        print(seen + ["pyarrow.parquet" in sys.modules])
    """)
    assert out == "[False, True]"
