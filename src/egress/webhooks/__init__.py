"""Signed webhooks: the SSRF guard, Standard Webhooks signatures, the retry schedule and
the dispatcher that every worker runs. See docs/webhooks.md.

The outbox rows are written by the store in the transaction that ends an export; this
package only sends them. ``check_callback_url`` is what the API calls at create time.
"""

from __future__ import annotations

from egress.webhooks.guard import check_callback_url

__all__ = ["check_callback_url"]
