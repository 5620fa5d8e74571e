"""The boto3 client of the S3 sink, and what its errors mean to egress.

Kept apart from the sink so that the error classification (transient or permanent,
and the message a user reads) is in one small place.
"""

from __future__ import annotations

import os
from typing import Any

from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionError,
    HTTPClientError,
    IncompleteReadError,
    NoCredentialsError,
    PartialCredentialsError,
    ResponseStreamingError,
)

from egress.exceptions import EgressError, SinkError, SinkUnavailableError

#: ``full_object``: CRC32C on every part and on the whole object (S3 checks both);
#: ``composite``: CRC32C on every part only (older S3-compatible servers);
#: ``off``: no S3 checksums (servers that refuse them; our manifest still has CRC32C).
CHECKSUM_MODES = ("full_object", "composite", "off")
#: Object metadata that names the upload which wrote an object.
TOKEN_META = "egress-upload"

_TRANSIENT_CODES = frozenset({
    "SlowDown", "Throttling", "ThrottlingException", "RequestLimitExceeded",
    "TooManyRequests", "RequestTimeout", "RequestTimeoutException", "InternalError",
    "ServiceUnavailable", "ConditionalRequestConflict", "OperationAborted",
})
_DENIED_CODES = frozenset({
    "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "AllAccessDisabled",
    "AccountProblem", "InvalidToken", "ExpiredToken", "InvalidSecurity",
})
_TRANSIENT_BOTO = (ConnectionError, HTTPClientError, IncompleteReadError, ResponseStreamingError)

_CONTENT_TYPES = {
    ".csv": "text/csv", ".jsonl": "application/x-ndjson", ".json": "application/json",
    ".sql": "application/sql", ".parquet": "application/vnd.apache.parquet",
    ".gz": "application/gzip", ".zst": "application/zstd",
}


def content_type(name: str) -> str:
    """By the last suffix: ``x.csv.gz`` is gzip data, as a browser should save it."""
    return _CONTENT_TYPES.get(name[name.rfind("."):], "application/octet-stream")


def etag_value(value: str | None) -> str:
    """An ETag without its quotes, for comparing what different calls return."""
    return (value or "").strip('"').lower()


def make_client(
    *,
    endpoint_url: str | None = None,
    region: str | None = None,
    profile: str | None = None,
    aws_access_key_id: str | None = None,
    aws_secret_access_key: str | None = None,
    aws_session_token: str | None = None,
    connect_timeout: float = 10.0,
    read_timeout: float = 120.0,
    addressing_style: str | None = None,
) -> Any:
    """An S3 client with botocore's retries off (the sink retries per request) and
    checksums only where egress asks for them (S3-compatible servers differ).

    The endpoint is ``endpoint_url`` or the standard ``AWS_ENDPOINT_URL`` (boto3 reads
    it); credentials come from the arguments or the standard AWS chain."""
    import boto3

    try:
        session = boto3.session.Session(
            profile_name=profile,
            aws_access_key_id=aws_access_key_id,
            aws_secret_access_key=aws_secret_access_key,
            aws_session_token=aws_session_token,
        )
    except BotoCoreError as exc:  # e.g. ProfileNotFound; the message names no secret
        raise SinkError(f"cannot set up the S3 client: {exc}") from exc
    s3_config: dict[str, Any] = {}
    if addressing_style:
        s3_config["addressing_style"] = addressing_style
    config = Config(
        signature_version="s3v4",  # presigned links: SigV4, up to 7 days
        retries={"total_max_attempts": 1, "mode": "standard"},
        connect_timeout=connect_timeout,
        read_timeout=read_timeout,
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
        s3=s3_config or None,
    )
    region = region or session.region_name or os.environ.get("AWS_REGION") or "us-east-1"
    try:
        return session.client("s3", endpoint_url=endpoint_url, region_name=region, config=config)
    except (BotoCoreError, ValueError) as exc:
        raise SinkError(f"cannot set up the S3 client: {type(exc).__name__}: {exc}") from exc


def error_code(exc: BaseException) -> str:
    if isinstance(exc, ClientError):
        return str(exc.response.get("Error", {}).get("Code", ""))
    return ""


def _status(exc: ClientError) -> int:
    return int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)


def is_transient(exc: BaseException) -> bool:
    """Worth retrying: 5xx, throttling, timeouts, dropped connections."""
    if isinstance(exc, ClientError):
        status = _status(exc)
        return status >= 500 or status == 429 or error_code(exc) in _TRANSIENT_CODES
    return isinstance(exc, _TRANSIENT_BOTO)


def map_error(exc: BaseException, op: str, bucket: str, key: str) -> EgressError:
    """The egress error for a boto error; never includes credentials."""
    where = f"s3://{bucket}/{key}"
    if isinstance(exc, (NoCredentialsError, PartialCredentialsError)):
        return SinkError(
            "no usable AWS credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, "
            "a profile (AWS_PROFILE), or an instance role"
        )
    if isinstance(exc, ClientError):
        code, status = error_code(exc), _status(exc)
        if status == 403 or code in _DENIED_CODES:
            return SinkError(f"access denied to bucket {bucket!r} ({op}: {code or status})")
        if code == "NoSuchBucket":
            return SinkError(
                f"bucket {bucket!r} does not exist (or these credentials cannot see it)"
            )
        message = exc.response.get("Error", {}).get("Message", "")
        text = f"S3 {op} of {where} failed: {code or status} {message}".rstrip()
        return SinkUnavailableError(text) if is_transient(exc) else SinkError(text)
    text = f"S3 {op} of {where} failed: {type(exc).__name__}"
    return SinkUnavailableError(text) if is_transient(exc) else SinkError(f"{text}: {exc}")
