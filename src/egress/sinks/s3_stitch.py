"""A stitched file on S3: completed objects (the pieces a split table's ranges wrote)
joined into one object, server-side where S3 allows it (engine/stitch.py decides what is
joined; ``S3Sink.stitch_file`` calls this once the object is not there yet)."""

from __future__ import annotations

import itertools
import logging
import secrets
from collections.abc import Collection, Sequence
from typing import Any, Protocol

from botocore.exceptions import ClientError

from egress.exceptions import SinkError
from egress.sinks.s3_client import TOKEN_META, content_type

log = logging.getLogger(__name__)
#: The most bytes one UploadPartCopy copies (S3's limit).
COPY_PART_MAX = 5 * 1024 * 1024 * 1024


class StitchTarget(Protocol):
    """What the stitch uses of ``S3Sink`` (sinks/s3.py), which calls it."""

    bucket: str
    min_part_bytes: int

    def _call(self, op: str, key: str, *, expect: Collection[str] = (),
              **kwargs: Any) -> Any: ...

    def _head(self, key: str) -> dict[str, Any] | None: ...

    def key(self, name: str) -> str: ...

    def abort_file(self, name: str, state: dict[str, Any]) -> None: ...


def stitch_upload(sink: StitchTarget, key: str, name: str, pieces: Sequence[tuple[str, int]],
                  tail: bytes, size: int) -> None:
    """Write ``pieces`` then ``tail`` as the object ``key`` of ``size`` bytes: one
    multipart upload, completed with ``If-None-Match: *`` (see ``S3Sink.stitch_file``)."""
    upload = sink._call("create_multipart_upload", key, Key=key,
                        ContentType=content_type(name),
                        Metadata={TOKEN_META: secrets.token_hex(16)})["UploadId"]
    state = {"key": key, "upload_id": upload}
    minimum = max(1, sink.min_part_bytes)
    parts: list[dict[str, Any]] = []
    buffer = bytearray()

    def upload_buffer() -> None:
        resp = sink._call("upload_part", key, Key=key, UploadId=upload,
                          PartNumber=len(parts) + 1, Body=bytes(buffer))
        parts.append({"PartNumber": len(parts) + 1, "ETag": resp["ETag"]})
        buffer.clear()

    def read(source: str, start: int, end: int) -> bytes:
        body = sink._call("get_object", source, Key=source,
                          Range=f"bytes={start}-{end - 1}")["Body"]
        try:
            return bytes(body.read())
        finally:
            body.close()

    def copy(source: str, start: int, end: int) -> None:
        count = -(-(end - start) // COPY_PART_MAX)  # each >= minimum: end - start is
        edges = [start + (end - start) * i // count for i in range(count + 1)]
        for lo, hi in itertools.pairwise(edges):
            resp = sink._call(
                "upload_part_copy", key, Key=key, UploadId=upload,
                PartNumber=len(parts) + 1, CopySourceRange=f"bytes={lo}-{hi - 1}",
                CopySource={"Bucket": sink.bucket, "Key": source})
            parts.append({"PartNumber": len(parts) + 1,
                          "ETag": resp["CopyPartResult"]["ETag"]})

    try:
        written = 0
        for piece, piece_size in pieces:
            source, start = sink.key(piece), 0
            if piece_size == 0:
                continue
            if buffer:  # fill the small part in hand up to the minimum
                start = min(piece_size, minimum - len(buffer))
                buffer += read(source, 0, start)
            rest = piece_size - start
            if rest >= minimum:
                if buffer:
                    upload_buffer()
                copy(source, start, piece_size)
            elif rest:
                buffer += read(source, start, piece_size)
            if len(buffer) >= minimum:
                upload_buffer()
            written += piece_size
        buffer += tail
        if buffer or not parts:
            upload_buffer()
        if written + len(tail) != size:
            raise SinkError(f"the pieces of s3://{sink.bucket}/{key} add up to "
                            f"{written + len(tail)} bytes, expected {size}")
        sink._call("complete_multipart_upload", key,
                   expect=("PreconditionFailed", "412"), Key=key, UploadId=upload,
                   IfNoneMatch="*", MultipartUpload={"Parts": parts})
    except ClientError:  # completed meanwhile by another finalizer
        sink.abort_file(name, state)
        head = sink._head(key)
        if head is None or head.get("ContentLength") != size:
            raise SinkError(f"s3://{sink.bucket}/{key} was written by someone else; "
                            "egress never overwrites an object") from None
    except BaseException:
        sink.abort_file(name, state)
        raise
    log.info("s3 stitched key=%s size=%d parts=%d", key, size, len(parts),
             extra={"key": key, "size": size})
