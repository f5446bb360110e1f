"""A table's place in S3 (bucket + key prefix) and the IAM session policy that confines vended
credentials to it.

The prefix ends at a `/` boundary everywhere: a table at `lake/t1` owns `lake/t1/...`, never
`lake/t10/...`. Characters that IAM reads as wildcards or variables cannot be scoped exactly, so a
location holding one is refused rather than granted more than the table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cedarberg.catalog import locations
from cedarberg.catalog.errors import InvalidRequestError

_POLICY_SPECIAL = frozenset("*?$")
READ_ACTIONS = ("s3:GetObject", "s3:GetObjectVersion")
WRITE_ACTIONS = ("s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload", "s3:ListMultipartUploadParts")


@dataclass(frozen=True, slots=True)
class S3Scope:
    bucket: str
    prefix: str  # key prefix without leading or trailing "/"

    @classmethod
    def of(cls, location: str) -> S3Scope:
        """The scope of an s3:// location. Raises InvalidRequestError for anything else."""
        norm = locations.normalize(location)
        if not norm.startswith("s3://"):
            raise InvalidRequestError("credential vending and request signing need an s3:// table location")
        bucket, _, key = norm.removeprefix("s3://").partition("/")
        prefix = key.strip("/")
        if not prefix:
            raise InvalidRequestError("a table location must lie below the bucket root")
        return cls(bucket, prefix)

    def owns(self, key: str) -> bool:
        """Whether object `key` (already normalised) lies inside the scope."""
        return key.startswith(self.prefix + "/")

    def owns_listing(self, prefix: str) -> bool:
        """Whether a listing with this key prefix stays inside the scope. The bare prefix is not
        enough: listing `t1` also lists `t10/...`."""
        return prefix.startswith(self.prefix + "/")


def session_policy(scope: S3Scope, write: bool, partition: str = "aws") -> dict[str, Any]:
    """The session policy for credentials limited to `scope`: read (get, list the prefix), and for
    `write` also put, delete and multipart clean-up. It only narrows the role's own policy."""
    if _POLICY_SPECIAL & set(scope.bucket + scope.prefix):
        raise InvalidRequestError("this table location cannot be scoped by an IAM policy (*, ? or $)")
    bucket_arn = f"arn:{partition}:s3:::{scope.bucket}"
    objects_arn = f"{bucket_arn}/{scope.prefix}/*"
    statements: list[dict[str, Any]] = [
        {"Sid": "ReadTableFiles", "Effect": "Allow", "Action": list(READ_ACTIONS), "Resource": [objects_arn]},
        {
            "Sid": "ListTableFiles",
            "Effect": "Allow",
            "Action": ["s3:ListBucket"],
            "Resource": [bucket_arn],
            "Condition": {"StringLike": {"s3:prefix": [scope.prefix, f"{scope.prefix}/*"]}},
        },
        {
            "Sid": "LocateBucket",
            "Effect": "Allow",
            "Action": ["s3:GetBucketLocation"],
            "Resource": [bucket_arn],
        },
    ]
    if write:
        statements.append(
            {
                "Sid": "WriteTableFiles",
                "Effect": "Allow",
                "Action": list(WRITE_ACTIONS),
                "Resource": [objects_arn],
            }
        )
    return {"Version": "2012-10-17", "Statement": statements}
