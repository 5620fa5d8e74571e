"""What a configured source allows its readers (``[sources.NAME]`` in egress.toml)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SourceLimits:
    """How hard the workers may read one configured source (``[sources.NAME]`` beside its
    ``url``; ``EGRESS_SOURCE_<NAME>_<SETTING>``). Protection for the database egress
    reads: the fleet's concurrency is enforced by the claim in the job store, the rest by
    each reader."""

    #: Tasks of exports from this source running at once across all workers (remote
    #: engines' submitted queries count too); enforced by the claim. 0: no limit.
    max_tasks: int = 0
    #: Longest a page query may run on the source before it is cancelled (a transient
    #: failure, retried with backoff). PostgreSQL sources only. 0: no timeout.
    statement_timeout_seconds: float = 0.0
    #: Pause after each page before the next page's query starts. 0: none.
    page_pause_seconds: float = 0.0
    #: Most rows per second one task reads from this source (page by page). 0: no ceiling.
    max_rows_per_second: float = 0.0

    @property
    def throttled(self) -> bool:
        return self.page_pause_seconds > 0 or self.max_rows_per_second > 0
