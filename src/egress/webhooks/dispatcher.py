"""The dispatcher: sends due webhook deliveries; every worker runs one (``worker/loop.py``).

One round (:meth:`Dispatcher.run_once`): lease up to ``webhooks.concurrency`` due
deliveries in one statement, and for each

1. check the URL again and resolve its host (the SSRF guard); a refusal is recorded
   with its reason (retried on schedule when only the DNS answer is to blame, given up
   at once when the URL itself can never be called);
2. sign the event with every active secret of the project (Standard Webhooks);
3. POST it to the checked address, within ``webhooks.timeout``, following no redirect;
   2xx is success, anything else a failure;
4. record the attempt and the delivery's next state in one transaction, fenced by the
   lease: delivered, pending again after the next delay of the schedule, or failed.

A worker that dies anywhere in between leaves the delivery pending; it is due again
when its lease ends, and goes out with the same ``webhook-id``. So delivery is at least
once: receivers deduplicate on ``webhook-id``.
"""

from __future__ import annotations

import logging
import os
import ssl
import time
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

from egress.config import Settings
from egress.domain.deliveries import (
    AttemptOutcome,
    DeliveryRecord,
    DeliveryState,
    with_download_urls,
)
from egress.exceptions import StoreError
from egress.metrics import WEBHOOK_ATTEMPTS, WEBHOOK_DELIVERIES, WEBHOOK_POSTPONED
from egress.ratelimit import RateLimiter
from egress.store.base import WorkerStore
from egress.webhooks.client import PostError, post
from egress.webhooks.guard import Refused, ResolveError, Resolver, resolve_callback, system_resolver
from egress.webhooks.schedule import next_retry
from egress.webhooks.signing import event_body, new_secret, webhook_headers

log = logging.getLogger(__name__)


class Dispatcher:
    def __init__(
        self,
        store: WorkerStore,
        settings: Settings,
        *,
        name: str | None = None,
        resolver: Resolver = system_resolver,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        """``resolver`` and ``ssl_context`` are seams for tests (a fake DNS, a test CA)."""
        self.store, self.settings = store, settings
        self.name = name or f"dispatcher:{os.getpid()}"
        self.resolver, self.ssl_context = resolver, ssl_context
        self._pool: ThreadPoolExecutor | None = None
        ws = settings.webhooks
        #: one bucket per receiving host: a burst of completions must not hammer one
        #: receiver (per worker process; N workers send up to N times the rate)
        self._per_host = (RateLimiter(ws.per_host_rate, ws.per_host_burst)
                          if ws.per_host_rate > 0 else None)

    def run_once(self) -> int:
        """Send the deliveries due now (up to ``concurrency``); returns how many."""
        ws = self.settings.webhooks
        claimed = self.store.delivery_claim(lease_seconds=ws.lease_seconds, limit=ws.concurrency)
        if len(claimed) == 1:
            self._deliver_logged(claimed[0])
        elif claimed:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(ws.concurrency, thread_name_prefix="webhook")
            list(self._pool.map(self._deliver_logged, claimed))
        return len(claimed)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    def _deliver_logged(self, delivery: DeliveryRecord) -> None:
        try:
            self.deliver(delivery)
        except Exception as exc:  # the store is away: the lease ends, the row is due again
            log.warning("webhook attempt not recorded",
                        extra={"delivery": delivery.id, "error": str(exc)})

    def _secrets(self, project: str) -> list[str]:
        found = self.store.webhook_secret_list(project)
        if not found:  # the project's first webhook: it gets its first secret now
            found = self.store.webhook_secret_ensure(project, new_secret())
        return [s.secret for s in found]

    def deliver(self, delivery: DeliveryRecord) -> DeliveryRecord | None:
        """Make one attempt of a claimed delivery and record it; returns the delivery's
        new record (None: the lease was lost meanwhile, nothing recorded; or the host's
        rate was reached and the delivery went back to the outbox unsent)."""
        if delivery.lease_token is None:
            raise ValueError(f"delivery {delivery.id} is not claimed")
        ws = self.settings.webhooks
        if self._per_host is not None:
            host = (urlsplit(delivery.url).hostname or "").lower()
            wait = self._per_host.acquire(host)
            if wait > 0:  # this receiver's turn has not come: back to the outbox, unsent
                self.store.delivery_postpone(delivery.id, delivery.lease_token, wait)
                WEBHOOK_POSTPONED.inc()
                return None
        started = time.monotonic()
        outcome, status, error, address = AttemptOutcome.FAILURE, None, None, None
        give_up = False
        try:
            target = resolve_callback(delivery.url, ws, self.resolver)
            address = target.address
            payload = with_download_urls(delivery.payload, self.settings.api.public_url)
            body = event_body(payload, delivery.created_at)
            headers = webhook_headers(self._secrets(delivery.project), delivery.id, body)
            result = post(target, headers, body, timeout=ws.timeout, ssl_context=self.ssl_context)
            status = result.status
            if 200 <= status < 300:
                outcome = AttemptOutcome.SUCCESS
            elif 300 <= status < 400:
                error = (f"redirect {status} to {result.location!r} not followed; "
                         "give the final URL as callback_url")
            else:
                error = f"receiver answered HTTP {status}"
        except Refused as exc:
            outcome, error, give_up = AttemptOutcome.REFUSED, exc.reason, exc.permanent
        except (ResolveError, PostError) as exc:
            error = str(exc)
        except StoreError:
            raise  # nothing can be recorded now: the lease ends and the row is due again
        except Exception as exc:  # a bug must not make a delivery silently retry for ever
            log.exception("webhook attempt broke", extra={"delivery": delivery.id})
            error = f"internal error ({type(exc).__name__}); see the worker's log"
        duration = time.monotonic() - started
        retry_in = None
        if outcome is not AttemptOutcome.SUCCESS and not give_up:
            age = delivery.updated_at - delivery.round_started_at + duration
            retry_in = next_retry(delivery.round_attempts + 1, age, ws.schedule,
                                  ws.give_up_after)
        recorded = self.store.delivery_record_attempt(
            delivery.id, delivery.lease_token, outcome=outcome, duration=duration,
            status_code=status, error=error, address=address, worker=self.name,
            retry_in=retry_in,
        )
        WEBHOOK_ATTEMPTS.labels(outcome.value).inc()
        if recorded is not None and recorded.state is not DeliveryState.PENDING:
            WEBHOOK_DELIVERIES.labels(recorded.state.value).inc()  # delivered | failed
        fields = {"delivery": delivery.id, "export": delivery.export_id,
                  "event": delivery.event_type, "attempt": delivery.attempts + 1,
                  "status": status, "outcome": str(outcome)}
        if recorded is None:
            log.warning("webhook lease lost before the attempt was recorded", extra=fields)
        elif outcome is AttemptOutcome.SUCCESS:
            log.info("webhook delivered", extra=fields)
        else:
            log.warning("webhook attempt failed", extra={
                **fields, "error": error, "state": str(recorded.state),
                "retry_in": retry_in})
        return recorded
