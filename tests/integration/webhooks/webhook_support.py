"""Helpers of the webhook tests: test settings, exports ended by the store, waiting."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from egress.config import Settings, WebhookSettings
from egress.domain.deliveries import DeliveryRecord
from egress.domain.ids import new_id
from egress.domain.jobs import ExportRecord, ExportState, TaskRecord, TaskState
from egress.store.sql import SqlJobStore

#: What the tests run with unless they say otherwise.
TEST_WEBHOOKS = WebhookSettings(
    allow_http=True, allow_loopback=True, timeout=2.0, schedule=(0.05,),
    give_up_after=3600.0, poll_seconds=0.05, concurrency=4, lease_seconds=3.0,
    per_host_rate=0.0,  # no per-host limit, except in the test of that limit
)

MakeSettings = Callable[..., Settings]


def ended_export(
    store: SqlJobStore, url: str, *, project: str = "p", how: str = "fail"
) -> ExportRecord:
    """An export with ``callback_url`` ended by the store (fail or cancel): its outbox row
    is written in that transaction."""
    export_id = new_id("exp")
    record = ExportRecord(
        id=export_id, project=project, source="main", tables=("t",), format="csv",
        compression="none", destination="local", state=ExportState.QUEUED,
        callback_url=url,
    )
    task = TaskRecord(id=new_id("tsk"), export_id=export_id, project=project, table="t",
                      seq=0, state=TaskState.QUEUED)
    store.export_create(record, [task])
    if how == "fail":
        assert store.export_fail(export_id, "boom")
    else:
        assert store.export_cancel(project, export_id) is not None
    return record


def only_delivery(store: SqlJobStore, export: ExportRecord) -> DeliveryRecord:
    [delivery] = store.delivery_list(export.project, export.id)
    return delivery


def wait_for(predicate: Callable[[], Any], timeout: float = 10.0) -> Any:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    return predicate()
