"""SqlJobStore implements every operation of the JobStore protocol with its signature."""

from __future__ import annotations

import inspect

import pytest

from egress.store.base import JobStore
from egress.store.sql import SqlJobStore

OPERATIONS = sorted(
    name for name, value in vars(JobStore).items()
    if callable(value) and not name.startswith("_")
)


def test_protocol_has_the_operations_we_test():
    assert {"task_claim", "task_commit", "export_create", "lease_events"} <= set(OPERATIONS)


@pytest.mark.parametrize("name", OPERATIONS)
def test_signature_matches_the_protocol(name: str):
    declared = inspect.signature(getattr(JobStore, name))
    implemented = inspect.signature(getattr(SqlJobStore, name))
    assert list(implemented.parameters.items()) == list(declared.parameters.items())
    assert implemented.return_annotation == declared.return_annotation
