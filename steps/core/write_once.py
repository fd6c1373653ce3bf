"""Write-once S3 objects: the model version's files and the gate's decision in MLflow's artifact store are created
with S3's conditional write (`If-None-Match: *`), so an object, once written, is never replaced by anyone who holds a
write grant there; a second write of the same key is refused by S3 (412 Precondition Failed) and raised here as
`AlreadyWritten`, naming the object.

The bucket policy (scripts/render_iam.py, infra/s3/mlflow-bucket-policy.json) denies every object-creating request
under MLflow's artifact root that does not carry the header (`s3:if-none-match` absent and `s3:ObjectCreationOperation`
true: PutObject and CompleteMultipartUpload; CreateMultipartUpload and UploadPart take no conditional header and are
exempt, as AWS documents), so a client that forgets the header is refused too, not only a second write.

MLflow's own S3 store uploads with boto3's `upload_file`, whose ExtraArgs cannot carry `IfNoneMatch` (s3transfer's
ALLOWED_UPLOAD_ARGS has no such key): `WriteOnceS3ArtifactRepository` replaces its one upload call with `put_once`,
and `install()` makes it MLflow's repository for `s3://` URIs in this process (register calls it before logging).

DVC's store (`<dvc remote>/files/md5/…`) is written by DVC itself (s3fs `put_file`, no conditional header and no
setting that adds one), so its writes cannot be made conditional: there the objects are content-addressed (the key
is the md5 of the bytes), the remote verifies what it reads (`verify = true`), fetch-dataset compares every file with
the revision's md5s, the role may not delete, and bucket versioning keeps every earlier version (docs/security.md).

    python -c "from steps.core import write_once"   # library only; no command line
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

# Above this size a file goes up in parts (S3's single PUT takes up to 5 GiB; parts keep memory and retries small).
MULTIPART_THRESHOLD = 64 * 1024 * 1024
PART_SIZE = 64 * 1024 * 1024
SHA256_METADATA = "sha256"  # x-amz-meta-sha256: the uploader's digest of the bytes, for readers that check


class AlreadyWritten(RuntimeError):
    """The object exists and is write-once: S3 refused the conditional write."""


def _refused(e: Exception) -> bool:
    """S3's answer to a conditional write whose key exists (412), or that raced another one for it (409)."""
    response = getattr(e, "response", None) or {}
    code = response.get("Error", {}).get("Code", "")
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return code in ("PreconditionFailed", "ConditionalRequestConflict") or status in (412, 409)


def _already(bucket: str, key: str) -> AlreadyWritten:
    return AlreadyWritten(
        f"s3://{bucket}/{key} already exists and is write-once: S3 refused to replace it (If-None-Match: *). "
        "Model versions, their files and the gate's decisions are never rewritten: log a new run (a retry of "
        "register does) instead of writing over this one; if the object is wrong, investigate who wrote it."
    )


def put_once(client: Any, bucket: str, key: str, path: Path, extra: dict | None = None) -> str:
    """Create s3://bucket/key from the file at `path` only if no object has that key; returns the file's sha256.

    One conditional PutObject up to MULTIPART_THRESHOLD, else a multipart upload whose CompleteMultipartUpload is the
    conditional request (an upload refused there is aborted, so no parts are left behind). Raises AlreadyWritten when
    the key exists.
    """
    path = Path(path)
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    sha256 = digest.hexdigest()
    args = {**(extra or {}), "Metadata": {**(extra or {}).get("Metadata", {}), SHA256_METADATA: sha256}}
    size = path.stat().st_size
    try:
        if size <= MULTIPART_THRESHOLD:
            with path.open("rb") as f:
                client.put_object(Bucket=bucket, Key=key, Body=f, IfNoneMatch="*", **args)
        else:
            _multipart(client, bucket, key, path, args)
    except Exception as e:
        if _refused(e):
            raise _already(bucket, key) from e
        raise
    return sha256


def _multipart(client: Any, bucket: str, key: str, path: Path, args: dict) -> None:
    upload = client.create_multipart_upload(Bucket=bucket, Key=key, **args)["UploadId"]
    try:
        parts = []
        with path.open("rb") as f:
            for number, chunk in enumerate(iter(lambda: f.read(PART_SIZE), b""), start=1):
                etag = client.upload_part(Bucket=bucket, Key=key, UploadId=upload, PartNumber=number, Body=chunk)
                parts.append({"ETag": etag["ETag"], "PartNumber": number})
        client.complete_multipart_upload(
            Bucket=bucket, Key=key, UploadId=upload, MultipartUpload={"Parts": parts}, IfNoneMatch="*"
        )
    except BaseException:
        client.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=upload)
        raise


def repository_class() -> type:
    """MLflow's S3 artifact repository with every upload made by `put_once` (imported lazily: mlflow is heavy)."""
    from mlflow.store.artifact.s3_artifact_repo import S3ArtifactRepository

    class WriteOnceS3ArtifactRepository(S3ArtifactRepository):
        """Uploads are conditional creates: an artifact that exists is never replaced (AlreadyWritten)."""

        def _upload_file(self, s3_client: Any, local_file: str, bucket: str, key: str) -> None:
            extra: dict = {}
            environ = self.get_s3_file_upload_extra_args()  # MLFLOW_S3_UPLOAD_EXTRA_ARGS (SSE settings and such)
            if environ:
                extra.update(environ)
            put_once(s3_client, bucket, key, Path(local_file), extra)

    return WriteOnceS3ArtifactRepository


def install() -> None:
    """Make `s3://` artifact URIs write-once in this process (MLflow's artifact repository registry)."""
    from mlflow.store.artifact.artifact_repository_registry import _artifact_repository_registry

    _artifact_repository_registry.register("s3", repository_class())
