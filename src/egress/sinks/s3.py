"""S3-compatible sink: an output file is a multipart upload, a committed part an UploadPart.

The checkpoint protocol maps onto multipart uploads one to one (docs/design.md, "Exactly once"):

- ``start_file`` → CreateMultipartUpload; the upload id, the key and a random token
  (also stored as object metadata) become the file's ``sink_state`` in the checkpoint.
- ``put_part`` → UploadPart with the checkpoint's part number: re-sending a part after
  a crash replaces it. Each part carries its CRC32C; S3 checks it on arrival.
- ``complete_file`` → CompleteMultipartUpload with the (number, ETag) list from the
  checkpoint and ``If-None-Match: *``: a finished object is never overwritten (a late
  zombie gets PreconditionFailed). A retried complete that finds the object already
  there checks the token: the object is ours → done, idempotently. It returns the
  object's SHA-256: from the running digest of the parts this process uploaded in order
  (sinks/digests.py), else by reading the object back once (a resumed upload).
- ``verify_parts`` → ListParts against the checkpoint on resume; the engine rewinds to
  the last agreed part when they differ (engine/resume.py).

Errors: 5xx, SlowDown, throttling, connection resets and timeouts are retried here with
exponential backoff and full jitter, per request (botocore's own retries are off so a
request is never retried twice over); once the attempts are used up the error is a
transient :class:`SinkUnavailableError`. 403s say "access denied to bucket X" and are
permanent. Credentials come from the standard AWS chain or explicit settings; they are
handed to boto3 and never stored on the sink, logged or put in a message.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import logging
import random
import re
import secrets
import time
from collections.abc import Callable, Collection, Sequence
from typing import Any, BinaryIO

import google_crc32c
from botocore.exceptions import BotoCoreError, ClientError

from egress.domain.checkpoint import PartRecord
from egress.domain.crc import crc32c_base64, crc32c_concat
from egress.domain.filenames import safe_base_name
from egress.exceptions import ConfigError, SinkError, SinkUnavailableError
from egress.sinks.digests import RunningDigests, sha256_of
from egress.sinks.s3_client import (
    CHECKSUM_MODES,
    TOKEN_META,
    content_type,
    error_code,
    etag_value,
    is_transient,
    make_client,
    map_error,
)
from egress.sinks.s3_reader import RangedReader
from egress.sinks.s3_stitch import stitch_upload

log = logging.getLogger(__name__)
#: SHA-256 of the uploads in progress in this process, across slices and sink objects
DIGESTS = RunningDigests()
#: Bytes per read when an object is read back to hash it.
READ_BACK_CHUNK = 8 * 1024 * 1024

MiB = 1024 * 1024
#: S3's smallest part, except for an upload's last part.
S3_MIN_PART_BYTES = 5 * MiB
#: S3's largest part number.
S3_MAX_PARTS = 10_000
#: Longest a presigned URL may live (SigV4's limit).
MAX_PRESIGN_SECONDS = 7 * 24 * 3600

_NAME = re.compile(r"[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*")
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")


def multipart_etag(parts: Sequence[PartRecord]) -> str:
    """The ETag S3 gives an object completed from ``parts`` (without SSE-KMS): the MD5 of
    the parts' binary MD5s, a dash, the number of parts."""
    digests = b"".join(bytes.fromhex(etag_value(p.etag)) for p in parts)
    return f"{hashlib.md5(digests).hexdigest()}-{len(parts)}"


class S3Sink:
    """Files under ``s3://bucket/prefix``; every key is ``{prefix}/{name}``."""

    max_parts = S3_MAX_PARTS

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        endpoint_url: str | None = None,
        region: str | None = None,
        profile: str | None = None,
        aws_access_key_id: str | None = None,
        aws_secret_access_key: str | None = None,
        aws_session_token: str | None = None,
        min_part_bytes: int = S3_MIN_PART_BYTES,
        checksum: str = "full_object",
        max_attempts: int = 6,
        backoff: float = 0.25,
        max_backoff: float = 20.0,
        retry_seconds: float = 60.0,
        connect_timeout: float = 10.0,
        read_timeout: float = 120.0,
        addressing_style: str | None = None,
        check_parts: bool = True,
        client: Any = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not _BUCKET.fullmatch(bucket) or ".." in bucket:
            raise ConfigError(
                f"bad S3 bucket name {bucket!r}: 3–63 lowercase letters, digits, dots and dashes"
            )
        prefix = prefix.strip("/")
        if prefix and any(seg in ("", ".", "..") for seg in prefix.split("/")):
            raise ConfigError(f"bad S3 prefix {prefix!r}: empty, '.' and '..' segments are refused")
        if checksum not in CHECKSUM_MODES:
            known = ", ".join(CHECKSUM_MODES)
            raise ConfigError(f"unknown S3 checksum mode {checksum!r}; known: {known}")
        if min_part_bytes < 0 or max_attempts < 1:
            raise ConfigError("S3 min_part_bytes must be ≥ 0 and max_attempts ≥ 1")
        self.bucket, self.prefix = bucket, prefix
        self.location = f"s3://{bucket}/{prefix}" if prefix else f"s3://{bucket}"
        self.min_part_bytes = int(min_part_bytes)
        self.checksum = checksum
        #: ListParts on resume; off only for servers without it (then trust the checkpoint).
        self.check_parts = check_parts
        self.max_attempts, self.backoff, self.max_backoff = max_attempts, backoff, max_backoff
        #: a transient failure is retried for at least this long (waited between tries):
        #: an outage of a few seconds (a restart, a failover, throttling) is ridden out
        self.retry_seconds = retry_seconds
        self._sleep = sleep
        #: upload id → key of every upload this sink object created and did not complete
        #: or abort: one it did not hand to a committed checkpoint is aborted when its
        #: slice ends (``abort_unused_uploads``)
        self.created: dict[str, str] = {}
        self.client = client or make_client(
            endpoint_url=endpoint_url, region=region, profile=profile,
            aws_access_key_id=aws_access_key_id, aws_secret_access_key=aws_secret_access_key,
            aws_session_token=aws_session_token, connect_timeout=connect_timeout,
            read_timeout=read_timeout, addressing_style=addressing_style,
        )

    def __repr__(self) -> str:
        return f"S3Sink({self.location!r})"

    def for_export(self, *segments: str) -> S3Sink:
        """The same bucket and client under ``prefix/seg1/seg2…``, each segment made safe
        (``safe_base_name``), so user text such as a project name never becomes a raw
        path segment."""
        child = object.__new__(S3Sink)
        child.__dict__.update(self.__dict__)
        safe = [safe_base_name(s) for s in segments]
        child.prefix = "/".join([self.prefix, *safe] if self.prefix else safe)
        child.location = f"s3://{self.bucket}/{child.prefix}"
        child.created = {}
        return child

    # --- keys and requests ------------------------------------------------------------

    def key(self, name: str) -> str:
        """The object key of ``name``; names are built by egress, anything else is refused."""
        if not _NAME.fullmatch(name) or any(s in (".", "..") for s in name.split("/")):
            raise SinkError(f"refusing an object name outside the export prefix: {name!r}")
        return f"{self.prefix}/{name}" if self.prefix else name

    def _call(self, op: str, key: str, *, expect: Collection[str] = (), **kwargs: Any) -> Any:
        """``client.op(**kwargs)``, retrying transient failures with backoff. Errors whose
        code is in ``expect`` are re-raised as the ClientError for the caller to handle."""
        attempt, waited = 0, 0.0
        while True:
            attempt += 1
            try:
                return getattr(self.client, op)(Bucket=self.bucket, **kwargs)
            except (ClientError, BotoCoreError) as exc:
                if isinstance(exc, ClientError) and error_code(exc) in expect:
                    raise
                if not is_transient(exc):
                    raise map_error(exc, op, self.bucket, key) from exc
                if attempt >= self.max_attempts and waited >= self.retry_seconds:
                    raise SinkUnavailableError(
                        f"S3 {op} of s3://{self.bucket}/{key} still failing after "
                        f"{attempt} attempts: {map_error(exc, op, self.bucket, key)}"
                    ) from exc
                delay = random.uniform(0, min(self.max_backoff, self.backoff * 2 ** (attempt - 1)))
                log.warning(
                    "s3 %s retry key=%s attempt=%d/%d delay=%.2f error=%s %s",
                    op, key, attempt, self.max_attempts, delay, type(exc).__name__,
                    error_code(exc) if isinstance(exc, ClientError) else "",
                    extra={"op": op, "key": key, "attempt": attempt},
                )
                self._sleep(delay)
                waited += delay

    def _head(self, key: str) -> dict[str, Any] | None:
        try:
            return self._call("head_object", key, expect=("404", "NoSuchKey", "NotFound"), Key=key)
        except ClientError:
            return None

    def _completed_by_us(self, key: str, state: dict[str, Any], size: int,
                         parts: Sequence[PartRecord] = ()) -> bool:
        """Whether the object at ``key`` is this file as the checkpoint has it: written by
        this upload (its token), or by an earlier upload of the same parts — a complete
        whose reply was lost and that landed after a resume had started over — whose
        multipart ETag (the MD5 of the parts' MD5s) is the one these parts make."""
        head = self._head(key)
        if head is None or head.get("ContentLength") != size:
            return False
        if head.get("Metadata", {}).get(TOKEN_META) == state.get("token"):
            return True
        return bool(parts) and etag_value(head.get("ETag")) == multipart_etag(parts)

    # --- the Sink protocol ------------------------------------------------------------

    def start_file(self, name: str, earlier: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
        key = self.key(name)
        head = self._head(key)
        if head is not None:
            token = head.get("Metadata", {}).get(TOKEN_META)
            if token is None or token not in {e.get("token") for e in earlier}:
                raise SinkError(
                    f"s3://{self.bucket}/{key} already exists; egress never overwrites an "
                    "object (choose another prefix or delete it)"
                )
            # An earlier attempt of this very file, started over because its upload was
            # gone, was being completed on the server meanwhile. Its parts were the ones
            # this attempt writes again (parts are deterministic): the complete finds the
            # object there and takes it as this file once its ETag is the one they make.
            log.warning("s3 an earlier upload of key=%s completed late; the file is written "
                        "again and checked against it", key, extra={"key": key})
        token = secrets.token_hex(16)
        kwargs: dict[str, Any] = {
            "Key": key, "Metadata": {TOKEN_META: token}, "ContentType": content_type(name),
        }
        if self.checksum != "off":
            kwargs["ChecksumAlgorithm"] = "CRC32C"
        if self.checksum == "full_object":
            kwargs["ChecksumType"] = "FULL_OBJECT"
        resp = self._call("create_multipart_upload", key, **kwargs)
        self.created[resp["UploadId"]] = key
        log.info("s3 upload started key=%s", key, extra={"key": key})
        # Any other upload of this key is one this file will never use: a create whose
        # reply was lost (and was retried), an earlier attempt that is starting over, a
        # fenced-off writer's. Abort them now rather than leave them to the daily sweep:
        # the recorded ones by id (a listing may lag), then whatever the listing shows.
        for e in earlier:
            if e.get("upload_id") and e["upload_id"] != resp["UploadId"]:
                self.abort_file(name, {"key": key, "upload_id": e["upload_id"]})
        stale = self.abort_orphaned_uploads(-3600.0, names=[name], keep=[resp["UploadId"]])
        if stale:
            log.info("s3 aborted %d earlier uploads of key=%s", stale, key,
                     extra={"key": key, "count": stale})
        return {"key": key, "upload_id": resp["UploadId"], "token": token}

    def put_part(
        self, name: str, state: dict[str, Any], number: int, offset: int, data: bytes
    ) -> str | None:
        key = state["key"]
        if not isinstance(data, bytes):
            data = bytes(data)  # a pyarrow Buffer (formats.base.PartBytes): boto3 takes bytes
        if not 1 <= number <= S3_MAX_PARTS:
            raise SinkError(
                f"part {number} of s3://{self.bucket}/{key} is beyond S3's {S3_MAX_PARTS} parts "
                "per object; use a larger part size or a max file size"
            )
        kwargs: dict[str, Any] = {
            "Key": key, "UploadId": state["upload_id"], "PartNumber": number, "Body": data,
        }
        if self.checksum != "off":
            kwargs["ChecksumAlgorithm"] = "CRC32C"
            kwargs["ChecksumCRC32C"] = crc32c_base64(google_crc32c.value(data))
        try:
            resp = self._call("upload_part", key, expect=("NoSuchUpload",), **kwargs)
        except ClientError as exc:
            raise SinkUnavailableError(
                f"the upload of s3://{self.bucket}/{key} no longer exists (aborted?); "
                "resuming restarts the file"
            ) from exc
        etag = resp["ETag"]
        DIGESTS.add((self.bucket, key, state["upload_id"]), offset, data)
        log.debug(
            "s3 part stored key=%s part=%d size=%d etag=%s",
            key, number, len(data), etag_value(etag),
            extra={"key": key, "part": number, "size": len(data)},
        )
        return str(etag)

    def complete_file(
        self, name: str, state: dict[str, Any], size: int, parts: Sequence[PartRecord] = ()
    ) -> str | None:
        """CompleteMultipartUpload; idempotent. Returns the object's SHA-256 (S3 keeps none
        for a multipart object): the running digest, else read back from the object."""
        key = state["key"]
        if sum(p.size for p in parts) != size or not parts:
            raise SinkError(
                f"the checkpoint's parts of s3://{self.bucket}/{key} do not add up to {size} bytes"
            )
        for p in parts[:-1]:
            if p.size < self.min_part_bytes:
                raise SinkError(
                    f"part {p.number} of s3://{self.bucket}/{key} is {p.size} bytes; every "
                    f"part but the last must hold at least {self.min_part_bytes} bytes"
                )
        listed = []
        for p in parts:
            entry: dict[str, Any] = {"PartNumber": p.number, "ETag": p.etag}
            if self.checksum != "off":
                entry["ChecksumCRC32C"] = crc32c_base64(p.crc32c)
            listed.append(entry)
        kwargs: dict[str, Any] = {
            "Key": key, "UploadId": state["upload_id"], "IfNoneMatch": "*",
            "MultipartUpload": {"Parts": listed},
        }
        if self.checksum == "full_object":
            kwargs["ChecksumType"] = "FULL_OBJECT"
            whole = crc32c_concat((p.crc32c, p.size) for p in parts)
            kwargs["ChecksumCRC32C"] = crc32c_base64(whole)
            kwargs["MpuObjectSize"] = size
        try:
            self._call(
                "complete_multipart_upload", key,
                expect=("PreconditionFailed", "NoSuchUpload", "412"), **kwargs,
            )
        except ClientError as exc:
            # A retry of a complete that went through, or a zombie late to the party.
            if self._completed_by_us(key, state, size, parts):
                log.info("s3 upload was already completed key=%s", key, extra={"key": key})
                if not self._completed_by_us(key, state, size):  # by an earlier upload
                    self.abort_file(name, state)
                return self._sha256(key, state, size)
            if error_code(exc) == "NoSuchUpload":
                raise SinkUnavailableError(
                    f"the upload of s3://{self.bucket}/{key} no longer exists and the object is "
                    "not there; resuming restarts the file"
                ) from exc
            self.abort_file(name, state)
            raise SinkError(
                f"s3://{self.bucket}/{key} was completed by another upload; egress never "
                "overwrites an object (a late writer that lost its task?)"
            ) from exc
        self.created.pop(state["upload_id"], None)
        log.info("s3 upload completed key=%s size=%d parts=%d", key, size, len(parts),
                 extra={"key": key, "size": size})
        return self._sha256(key, state, size)

    def stitch_file(self, name: str, pieces: Sequence[tuple[str, int]], tail: bytes,
                    size: int) -> str:
        """Join ``pieces`` (``(name, size)`` of completed objects, in order) and ``tail``
        into the object ``name`` of ``size`` bytes, server-side; remove the pieces; its
        SHA-256 (read back: S3 keeps none for a multipart object).

        One multipart upload: a piece of at least the minimum part size is copied by the
        server (UploadPartCopy, at most 5 GiB a part); smaller pieces, and the head of
        the piece after one, are read and uploaded with it until the minimum is reached,
        so that every part but the last holds at least ``min_part_bytes`` (at most two
        minimum parts in memory). Completed with ``If-None-Match: *``: a redo after a kill,
        or another finalizer at once, finds the object there (the same bytes: the pieces
        are committed) and only removes the pieces left; an unfinished upload of a killed
        stitch is aborted by the reconciler's sweep of orphaned uploads.
        """
        key = self.key(name)
        head = self._head(key)
        if head is None or head.get("ContentLength") != size:
            stitch_upload(self, key, name, pieces, tail, size)
        for piece, _ in pieces:
            self.delete(piece)
        return self._sha256(key, {"upload_id": ""}, size)

    def _sha256(self, key: str, state: dict[str, Any], size: int) -> str:
        running = DIGESTS.take((self.bucket, key, state["upload_id"]), size)
        if running is not None:
            return running
        # parts uploaded by another process (a resume): read the object back, once
        log.info("s3 reading back to hash key=%s size=%d", key, size,
                 extra={"key": key, "size": size})
        body = self._call("get_object", key, Key=key)["Body"]
        try:
            return sha256_of(iter(lambda: body.read(READ_BACK_CHUNK), b""))
        finally:
            body.close()

    def abort_file(self, name: str, state: dict[str, Any]) -> None:
        if not state.get("upload_id"):
            return
        key = state["key"]
        self.created.pop(state["upload_id"], None)
        try:
            self._call("abort_multipart_upload", key, expect=("NoSuchUpload",),
                       Key=key, UploadId=state["upload_id"])
        except ClientError:
            return  # already aborted or completed
        log.info("s3 upload aborted key=%s", key, extra={"key": key})

    def release(self) -> None:
        """Nothing to hand over: an upload is the same for every writer."""

    def abort_unused_uploads(self, keep: Collection[str]) -> int:
        """Abort every upload this sink created that is not in ``keep`` (the uploads of
        the task's committed checkpoint) and was not completed: one whose id no commit
        recorded (a slice that failed, was fenced or stopped before its first part was
        committed) is one no later slice can find or use. Returns how many."""
        unused = [(u, k) for u, k in self.created.items() if u not in keep]
        for upload_id, key in unused:
            self.abort_file(key, {"key": key, "upload_id": upload_id})
        if unused:
            log.info("s3 aborted %d uploads no checkpoint recorded", len(unused),
                     extra={"count": len(unused)})
        return len(unused)

    def verify_parts(self, name: str, state: dict[str, Any], parts: Sequence[PartRecord]) -> int:
        """How many of ``parts``, from the first, the server holds as the checkpoint says
        (number, ETag, size). All of them when the object was already completed by us."""
        if not parts or not state.get("upload_id"):
            return 0
        if not self.check_parts:
            return len(parts)
        key = state["key"]
        try:
            stored = self._list_parts(key, state["upload_id"])
        except ClientError:
            size = sum(p.size for p in parts)
            return len(parts) if self._completed_by_us(key, state, size) else 0
        agreed = 0
        for p in parts:
            got = stored.get(p.number)
            if got is None or got != (etag_value(p.etag), p.size):
                break
            agreed += 1
        return agreed

    def _list_parts(self, key: str, upload_id: str) -> dict[int, tuple[str, int]]:
        stored: dict[int, tuple[str, int]] = {}
        marker = 0
        while True:
            resp = self._call("list_parts", key, expect=("NoSuchUpload",), Key=key,
                              UploadId=upload_id, PartNumberMarker=marker)
            for p in resp.get("Parts", []):
                stored[p["PartNumber"]] = (etag_value(p["ETag"]), p["Size"])
            if not resp.get("IsTruncated"):
                return stored
            marker = int(resp["NextPartNumberMarker"])

    def put_object(self, name: str, data: bytes) -> None:
        """PutObject (atomic on S3). Overwrites: a manifest may be written again after a crash."""
        key = self.key(name)
        kwargs: dict[str, Any] = {"Key": key, "Body": data, "ContentType": content_type(name)}
        if self.checksum != "off":
            kwargs["ChecksumCRC32C"] = crc32c_base64(google_crc32c.value(data))
        self._call("put_object", key, **kwargs)

    def get_object(self, name: str) -> bytes:
        key = self.key(name)
        try:
            resp = self._call("get_object", key, expect=("NoSuchKey", "404"), Key=key)
        except ClientError as exc:
            raise SinkError(f"s3://{self.bucket}/{key} does not exist") from exc
        return bytes(resp["Body"].read())

    def exists(self, name: str) -> bool:
        return self._head(self.key(name)) is not None

    def list_files(self, folder: str) -> list[tuple[str, int]]:
        """``(name, size)`` of every object under ``folder/`` (written by someone else: a
        remote engine's unload), in name order."""
        base = self.key(folder.strip("/")) + "/"
        found: list[tuple[str, int]] = []
        token: dict[str, Any] = {}
        while True:
            page = self._call("list_objects_v2", base, Prefix=base, **token)
            for obj in page.get("Contents", []):
                found.append((obj["Key"][len(self.prefix) + 1 if self.prefix else 0:],
                              int(obj["Size"])))
            if not page.get("IsTruncated"):
                return sorted(found)
            token = {"ContinuationToken": page["NextContinuationToken"]}

    def open_reader(self, name: str, size: int) -> BinaryIO:
        """A seekable reader of ``name`` that fetches only the ranges read (a Parquet
        footer without the data)."""
        return io.BufferedReader(RangedReader(self, self.key(name), size),
                                 buffer_size=64 * 1024)

    def url_of(self, folder: str) -> str:
        """Where a remote engine writes ``folder`` of this sink."""
        return f"s3://{self.bucket}/{self.key(folder.strip('/'))}/"

    def delete(self, name: str) -> None:
        key = self.key(name)
        self._call("delete_object", key, Key=key)

    # --- downloads and housekeeping ---------------------------------------------------

    def presign(self, name: str, expires_seconds: int = 3600) -> str:
        """A GET URL for ``name`` valid for ``expires_seconds`` (1 s … 7 days). Signing is
        local and cheap: ask again for a fresh link whenever one has expired."""
        if not 1 <= expires_seconds <= MAX_PRESIGN_SECONDS:
            raise ConfigError(
                f"a download link must expire within 1 second to 7 days ({MAX_PRESIGN_SECONDS} s), "
                f"got {expires_seconds}"
            )
        key = self.key(name)
        try:
            return str(self.client.generate_presigned_url(
                "get_object", Params={"Bucket": self.bucket, "Key": key}, ExpiresIn=expires_seconds,
            ))
        except BotoCoreError as exc:
            raise map_error(exc, "presign", self.bucket, key) from exc

    def abort_orphaned_uploads(
        self, older_than: float, *, names: Collection[str] | None = None,
        keep: Collection[str] = (), now: dt.datetime | None = None,
        owned: Callable[[str], bool] | None = None,
    ) -> int:
        """Abort multipart uploads under the prefix started more than ``older_than`` seconds
        before ``now`` (only those of ``names`` if given), except the upload ids in ``keep``
        and the relative names for which ``owned`` says a live export may still use them.
        For the reconciler, and for a one-shot export that has completed every file."""
        keys = {self.key(n) for n in names} if names is not None else None
        cutoff = (now or dt.datetime.now(dt.UTC)) - dt.timedelta(seconds=older_than)
        prefix = f"{self.prefix}/" if self.prefix else ""
        aborted = 0
        markers: dict[str, str] = {}
        while True:
            resp = self._call("list_multipart_uploads", prefix, Prefix=prefix, **markers)
            for up in resp.get("Uploads", []):
                key, upload_id = up["Key"], up["UploadId"]
                if (keys is not None and key not in keys) or upload_id in keep:
                    continue
                if up["Initiated"] > cutoff:
                    continue
                if owned is not None and owned(key[len(prefix):]):
                    continue
                self.abort_file(key, {"key": key, "upload_id": upload_id})
                aborted += 1
            if not resp.get("IsTruncated"):
                return aborted
            markers = {
                "KeyMarker": resp["NextKeyMarker"],
                "UploadIdMarker": resp["NextUploadIdMarker"],
            }
