"""What remote signing signs (`sign_scope.classify`) and what vended credentials may touch
(`s3_scope.session_policy`), decided on S3's reading of a request."""

from __future__ import annotations

import hashlib

import pytest

from cedarberg.catalog.errors import InvalidRequestError
from cedarberg.gateway.storage.s3_scope import S3Scope, session_policy
from cedarberg.gateway.storage.sign_scope import Endpoint, S3Request, classify

MINIO = Endpoint("http", "minio:9000", "eu-west-1")
AWS = Endpoint("https", None, "eu-west-1")
TABLE = S3Scope.of("s3://lake/wh/sales/t1")


def verdict(endpoint: Endpoint, method: str, uri: str, body: str | None = None, **headers: str) -> str:
    found = classify(
        endpoint, TABLE, S3Request(method, uri, {k.replace("_", "-"): [v] for k, v in headers.items()}, body)
    )
    return found.refused or ("write" if found.write else "read")


@pytest.mark.parametrize(
    ("endpoint", "uri"),
    [
        (MINIO, "http://minio:9000/lake/wh/sales/t1/data/f.parquet"),
        (MINIO, "http://lake.minio:9000/wh/sales/t1/data/f.parquet"),
        (AWS, "https://s3.amazonaws.com/lake/wh/sales/t1/data/f.parquet"),
        (AWS, "https://lake.s3.eu-west-1.amazonaws.com/wh/sales/t1/data/f.parquet"),
        (AWS, "https://lake.s3.amazonaws.com/wh/sales/t1/data/f%20g.parquet?versionId=3"),
    ],
)
def test_objects_inside_are_read_and_written(endpoint: Endpoint, uri: str) -> None:
    assert verdict(endpoint, "GET", uri) == "read"
    assert verdict(endpoint, "HEAD", uri) == "read"
    assert verdict(endpoint, "PUT", uri) == "write"
    assert verdict(endpoint, "DELETE", uri) == "write"


@pytest.mark.parametrize(
    ("uri", "reason"),
    [
        ("http://minio:9000/lake/wh/sales/t10/f", "outside the table location"),
        ("http://minio:9000/lake/wh/sales/t1", "outside the table location"),
        ("http://minio:9000/other/wh/sales/t1/f", "another bucket"),
        ("http://other.minio:9000/wh/sales/t1/f", "another bucket"),
        ("https://minio:9000/lake/wh/sales/t1/f", "not on the warehouse's S3 endpoint"),
        ("http://evil:9000/lake/wh/sales/t1/f", "not on the warehouse's S3 endpoint"),
        ("http://minio:9000/lake/wh/sales/t1/../t2/f", "not in canonical form"),
        ("http://minio:9000/lake/wh/sales/t1/%2E%2E/t2/f", "not in canonical form"),
        ("http://minio:9000/lake/wh/sales/t1/.%2e/t2/f", "not in canonical form"),
        ("http://minio:9000/lake/wh/sales/t1/./f", "not in canonical form"),
        ("http://minio:9000/lake/wh/sales/t1/a%2F..%2F..%2Ft2", "not in canonical form"),
        ("http://minio:9000/lake/wh/sales/t1/%00", "not in canonical form"),
        ("http://minio:9000/lake/wh/sales/t1/%zz", "not in canonical form"),
        ("http://minio:9000/lake/wh/sales/t1/%ff", "not in canonical form"),
        ("http://minio:9000/lake/wh/sales/t1/f?policy", "sub-resource 'policy'"),
        ("http://minio:9000/lake/wh/sales/t1/f#x", "fragment"),
        ("http://minio:9000/lake", "prefix inside the table location"),
        ("http://minio:9000/lake?list-type=2&prefix=wh/sales/t", "prefix inside the table location"),
        ("http://minio:9000/lake?list-type=2&prefix=wh/sales/t1&acl", "sub-resource 'acl'"),
    ],
)
def test_anything_else_is_refused(uri: str, reason: str) -> None:
    assert reason in verdict(MINIO, "GET", uri)


def test_listings_and_bucket_probes() -> None:
    assert verdict(MINIO, "GET", "http://minio:9000/lake?list-type=2&prefix=wh/sales/t1/data/") == "read"
    assert verdict(MINIO, "GET", "http://minio:9000/lake?list-type=2&prefix=wh/sales/t1/") == "read"
    # The bare location would list wh/sales/t10/... too.
    assert "prefix inside" in verdict(MINIO, "GET", "http://minio:9000/lake?list-type=2&prefix=wh/sales/t1")
    assert verdict(MINIO, "HEAD", "http://minio:9000/lake") == "read"
    assert verdict(MINIO, "GET", "http://minio:9000/lake?location") == "read"
    assert "bucket-level" in verdict(MINIO, "PUT", "http://minio:9000/lake")
    assert "never signed" in verdict(MINIO, "PATCH-ME", "http://minio:9000/lake/wh/sales/t1/f")


@pytest.mark.parametrize(
    "header", ["x_amz_acl", "x_amz_grant_read", "x_amz_object_lock_mode", "x_amz_website_redirect_location"]
)
def test_writes_that_set_permissions_locks_or_redirects_are_refused(header: str) -> None:
    target = "http://minio:9000/lake/wh/sales/t1/data/f.parquet"
    assert verdict(MINIO, "PUT", target) == "write"
    assert "is never signed" in verdict(MINIO, "PUT", target, **{header: "public-read"})


def test_copies_and_multi_object_deletes_must_stay_inside() -> None:
    target = "http://minio:9000/lake/wh/sales/t1/data/copy"
    assert verdict(MINIO, "PUT", target, x_amz_copy_source="lake/wh/sales/t1/data/f") == "write"
    assert "copy source" in verdict(MINIO, "PUT", target, x_amz_copy_source="/lake/wh/sales/t2/f")
    assert "copy source" in verdict(MINIO, "PUT", target, x_amz_copy_source="lake/wh/sales/t1/../t2/f")
    delete = "http://minio:9000/lake?delete"
    ns = 'xmlns="http://s3.amazonaws.com/doc/2006-03-01/"'
    inside = f"<Delete {ns}><Object><Key>wh/sales/t1/a</Key></Object></Delete>"
    assert verdict(MINIO, "POST", delete, inside) == "write"
    for key in ("wh/sales/t2/a", "wh/sales/t1/../t2/a", "wh/sales/t1"):
        objects = f"<Object><Key>wh/sales/t1/a</Key></Object><Object><Key>{key}</Key></Object>"
        body = f"<Delete {ns}>{objects}</Delete>"
        assert "outside the table location" in verdict(MINIO, "POST", delete, body)
    assert "not XML" in verdict(MINIO, "POST", delete, "<Delete>")
    assert "only with its body" in verdict(MINIO, "POST", delete)
    # The checked body's own hash is what gets signed; other requests sign what the engine declares.
    checked = classify(MINIO, TABLE, S3Request("POST", delete, {}, inside))
    assert checked.payload_sha256 == hashlib.sha256(inside.encode()).hexdigest()
    assert classify(MINIO, TABLE, S3Request("PUT", target, {})).payload_sha256 is None


def test_session_policy_confines_to_the_prefix() -> None:
    policy = session_policy(S3Scope.of("s3://lake/wh/sales/t1/"), write=False, partition="aws-cn")
    assert [s["Sid"] for s in policy["Statement"]] == ["ReadTableFiles", "ListTableFiles", "LocateBucket"]
    assert policy["Statement"][0]["Resource"] == ["arn:aws-cn:s3:::lake/wh/sales/t1/*"]
    assert policy["Statement"][1]["Condition"] == {
        "StringLike": {"s3:prefix": ["wh/sales/t1", "wh/sales/t1/*"]}
    }
    written = session_policy(TABLE, write=True)
    assert written["Statement"][-1]["Action"] == [
        "s3:PutObject",
        "s3:DeleteObject",
        "s3:AbortMultipartUpload",
        "s3:ListMultipartUploadParts",
    ]


@pytest.mark.parametrize("prefix", ["wh/t*", "wh/t?x", "wh/${aws:username}"])
def test_locations_iam_would_read_as_patterns_are_refused(prefix: str) -> None:
    with pytest.raises(InvalidRequestError, match="cannot be scoped"):
        session_policy(S3Scope("lake", prefix), write=False)


@pytest.mark.parametrize("location", ["s3://lake", "s3://lake/", "file:///tmp/x"])
def test_only_prefixes_below_a_bucket_have_a_scope(location: str) -> None:
    with pytest.raises(InvalidRequestError):
        S3Scope.of(location)


LISTING = "http://minio:9000/lake?list-type=2"


@pytest.mark.parametrize(
    ("query", "reason"),
    [
        # S3 reads the first `prefix`, a dict the last: the first would list the whole bucket.
        ("&prefix=&prefix=wh/sales/t1/", "'prefix' is repeated"),
        ("&prefix=wh/sales/t1/&prefix=", "'prefix' is repeated"),
        ("&prefix=wh/sales/t1/&%70refix=", "'prefix' is repeated"),
        ("&prefix=wh/sales/t1/&Prefix=", "'Prefix' is repeated"),
        ("&prefix=wh/sales/t1/&list-type=1", "'list-type' is repeated"),
        ("&prefix=wh/sales/t1/&&max-keys=5", "empty parameter"),
        ("&prefix=wh/sales/t1/+x", "must be percent-encoded"),
        ("&prefix=wh/sales/t1/;prefix=", "must be percent-encoded"),
        ("&prefix=wh/sales/t1/ x", "must be percent-encoded"),
        ("&prefix=wh/sales/t1/%zz", "malformed percent-encoding"),
        ("&prefix=wh/sales/t1/%ff", "not UTF-8"),
        ("&prefix=wh/sales/t1/%0a", "control character"),
        # A sub-resource in another case is not the listing's parameter: never signed.
        ("&Prefix=wh/sales/t1/", "sub-resource 'Prefix'"),
        ("&prefix=wh/sales/t1/&ACL", "sub-resource 'ACL'"),
    ],
)
def test_listings_s3_could_read_otherwise_are_refused(query: str, reason: str) -> None:
    assert reason in verdict(MINIO, "GET", LISTING + query)


def test_object_parameters_are_read_once() -> None:
    target = "http://minio:9000/lake/wh/sales/t1/data/f.parquet"
    assert verdict(MINIO, "GET", target + "?versionId=1") == "read"
    assert "'versionid' is repeated" in verdict(MINIO, "GET", target + "?versionId=1&versionid=2")
    assert "'uploadId' is repeated" in verdict(MINIO, "PUT", target + "?partNumber=1&uploadId=a&uploadId=b")
    assert "must be percent-encoded" in verdict(MINIO, "GET", "http://minio:9000/lake/wh/sales/t1/a+b")


def test_listings_in_canonical_form_are_signed() -> None:
    # botocore percent-encodes `/` in parameter values; S3 decodes it.
    assert verdict(MINIO, "GET", LISTING + "&prefix=wh%2Fsales%2Ft1%2Fdata%2F&encoding-type=url") == "read"
    assert verdict(MINIO, "GET", LISTING + "&prefix=wh/sales/t1/a%2Bb%20c&max-keys=5") == "read"
    assert verdict(MINIO, "GET", "http://minio:9000/lake?uploads&prefix=wh/sales/t1/") == "read"
    assert verdict(MINIO, "GET", "http://minio:9000/lake/wh/sales/t1/a%2Bb%20c") == "read"


def headers_verdict(uri: str, headers: dict[str, list[str]], method: str = "PUT") -> str:
    found = classify(MINIO, TABLE, S3Request(method, uri, headers))
    return found.refused or ("write" if found.write else "read")


def test_headers_s3_could_read_otherwise_are_refused() -> None:
    target = "http://minio:9000/lake/wh/sales/t1/data/copy"
    inside, outside = "lake/wh/sales/t1/data/f", "lake/wh/sales/t2/f"
    assert headers_verdict(target, {"x-amz-copy-source": [inside]}) == "write"
    # The check read the first value; the signer would join both and S3 read them otherwise.
    refused = headers_verdict(target, {"x-amz-copy-source": [inside, outside]})
    assert "exactly one value" in refused
    twice = {"x-amz-copy-source": [inside], "X-Amz-Copy-Source": [outside]}
    assert "header x-amz-copy-source is repeated" in headers_verdict(target, twice)
    # A name S3 could trim or fold into the copy-source header.
    assert "not an HTTP token" in headers_verdict(target, {"x-amz-copy-source ": [outside]})
    assert "exactly one value" in headers_verdict(target, {"x-amz-acl": []})
    assert "control character" in headers_verdict(target, {"x-amz-meta-a": ["1\r\nx-amz-acl: public-read"]})


def test_a_host_header_must_be_the_uris() -> None:
    # botocore signs a given Host instead of the URI's: virtual-hosted, the host is the bucket.
    virtual = "http://lake.minio:9000/wh/sales/t1/data/f.parquet"
    assert headers_verdict(virtual, {"Host": ["lake.minio:9000"]}, "GET") == "read"
    assert headers_verdict(virtual, {"host": ["LAKE.minio:9000"]}, "GET") == "read"
    assert "Host header" in headers_verdict(virtual, {"Host": ["other.minio:9000"]}, "GET")
    path_style = "http://minio:9000/lake/wh/sales/t1/data/f.parquet"
    assert "Host header" in headers_verdict(path_style, {"Host": ["other.minio:9000"]}, "GET")
