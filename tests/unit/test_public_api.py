"""The names ``egress`` exports, and ``egress.export`` as help() shows it."""

from __future__ import annotations

import inspect
import subprocess
import sys

import egress


def test_public_names() -> None:
    assert sorted(egress.__all__) == ["ExportResult", "__version__", "export"]
    for name in egress.__all__:
        assert getattr(egress, name) is not None


def test_export_has_its_real_signature_and_docstring() -> None:
    params = inspect.signature(egress.export).parameters
    assert list(params)[:3] == ["source", "tables", "to"]
    assert params["format"].default == "csv" and params["to"].kind is inspect.Parameter.KEYWORD_ONLY
    assert "resume=True" in (egress.export.__doc__ or "")


def test_importing_egress_does_not_load_the_engine() -> None:
    code = "import sys, egress; print('egress.oneshot' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
