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
