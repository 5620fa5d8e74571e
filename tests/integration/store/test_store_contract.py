"""SqlJobStore implements every operation of the JobStore protocol with its signature."""

from __future__ import annotations

import inspect

import pytest

from egress.store.base import WORKER_OPERATIONS, JobStore, WorkerStore
from egress.store.sql import SqlJobStore

#: the whole protocol: the worker's part (WorkerStore) and the rest (JobStore)
OPERATIONS = sorted(
    name for cls in (WorkerStore, JobStore) for name, value in vars(cls).items()
    if callable(value) and not name.startswith("_")
)


def test_protocol_has_the_operations_we_test():
    assert {"task_claim", "task_commit", "export_create", "lease_events"} <= set(OPERATIONS)
    # the worker's part is what the API's worker routes serve, and nothing of the tenants'
    assert {"task_claim", "task_commit", "remote_polled", "delivery_claim"} <= WORKER_OPERATIONS
    assert not WORKER_OPERATIONS & {"export_create", "token_find", "audit_write", "migrate"}


@pytest.mark.parametrize("name", OPERATIONS)
def test_signature_matches_the_protocol(name: str):
    declared = inspect.signature(getattr(JobStore, name))
    implemented = inspect.signature(getattr(SqlJobStore, name))
    assert list(implemented.parameters.items()) == list(declared.parameters.items())
    assert implemented.return_annotation == declared.return_annotation
