"""Which S3 requests the gateway signs for a table: only those that stay inside its location.

`classify` reads a request to be signed (method, URI, headers, body) the way S3 will: the bucket
from the host (virtual-hosted) or the first path segment (path-style) against the warehouse's
endpoint, the key percent-decoded. It answers whether the request reads or writes, or why it is
refused. Refused: other hosts or buckets, keys outside the prefix (`/` boundary: `t1` never covers
`t10`), `.`/`..`/empty segments, backslashes and control characters (encoded or not), listings
without a prefix inside the location, sub-resources other than the object and multipart ones
(ACLs, policies, tags, retention...), headers that set ACLs, grants, object locks or redirects,
copies from outside, and a multi-object delete whose body does not name only keys inside (or that
has no body). Before any of that, `s3_reading` reads the URI, query and headers once, refusing
whatever S3 could read otherwise than the gateway (repeated parameters or headers, `+`, malformed
encodings, a `Host` that is not the URI's): what is checked is what S3 interprets, and what is
signed is the request as checked.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit
from xml.etree import ElementTree

from cedarberg.gateway.storage.s3_reading import AmbiguousRequest, check_uri, header_values, query_parameters
from cedarberg.gateway.storage.s3_scope import S3Scope

READ_METHODS = frozenset({"GET", "HEAD"})
WRITE_METHODS = frozenset({"PUT", "POST", "DELETE", "PATCH"})
# Query parameters of plain object and multipart operations; anything else is a sub-resource.
_OBJECT_QUERY = frozenset({"versionId", "partNumber", "uploadId", "uploads", "x-id"})
_LIST_QUERY = frozenset(
    {
        "list-type", "prefix", "delimiter", "continuation-token", "start-after", "max-keys",
        "encoding-type", "fetch-owner", "marker", "uploads", "key-marker", "upload-id-marker",
        "max-uploads", "x-id",
    }
)  # fmt: skip
_BAD_KEY_CHARS = re.compile(r"[\x00-\x1f\x7f\\]")
# Headers that make a write change more than the object's bytes: who may read it (ACLs, grants),
# how long it may not be deleted (object lock), where it redirects. The warehouse's keys could do
# all of that; engines never need it.
_PERMISSION_HEADERS = ("x-amz-acl", "x-amz-grant-", "x-amz-object-lock-", "x-amz-website-redirect-location")
_NAMESPACE = re.compile(r"^\{[^}]*\}")


@dataclass(frozen=True, slots=True)
class SignVerdict:
    write: bool = False  # the request changes the table's files
    refused: str | None = None  # why it is not signed (None: sign it, given the access)
    # For a request whose body was checked (a multi-object delete): the SHA-256 of that body, to
    # sign instead of the hash the engine declares, so that no other body can use the signature.
    payload_sha256: str | None = None


def refuse(reason: str) -> SignVerdict:
    return SignVerdict(refused=reason)


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where the warehouse's S3 lives: `scheme://host[:port]` (S3-compatible) or AWS's regional
    hosts."""

    scheme: str
    host: str | None  # None: AWS S3
    region: str

    def bucket_and_path(self, scheme: str, netloc: str, path: str) -> tuple[str, str] | None:
        """(bucket, raw key path) of a URI on this endpoint, or None for another host."""
        netloc = netloc.lower()
        if self.host is not None:
            if scheme != self.scheme:
                return None
            path_style, virtual_suffix = {self.host}, "." + self.host
        else:
            if scheme != "https":
                return None
            path_style = {"s3.amazonaws.com", f"s3.{self.region}.amazonaws.com"}
            virtual_suffix = ""
        if netloc in path_style:
            bucket, _, rest = path.lstrip("/").partition("/")
            return bucket, rest
        if self.host is not None and netloc.endswith(virtual_suffix):
            return netloc[: -len(virtual_suffix)], path.lstrip("/")
        for suffix in (".s3.amazonaws.com", f".s3.{self.region}.amazonaws.com"):
            if self.host is None and netloc.endswith(suffix):
                return netloc[: -len(suffix)], path.lstrip("/")
        return None


def _canonical(key: str) -> bool:
    """A decoded key that every path-handling layer reads the same way: no `.`, `..` or empty
    segment, no backslash or control character."""
    return not _BAD_KEY_CHARS.search(key) and not any(part in ("", ".", "..") for part in key.split("/"))


def _key(raw: str) -> str | None:
    """The object key of a raw (percent-encoded) URI path; None when it is not canonical."""
    if not raw:
        return ""
    if re.search(r"%(?![0-9A-Fa-f]{2})", raw):
        return None
    try:
        key = unquote(raw, errors="strict")
    except UnicodeDecodeError:
        return None
    return key if _canonical(key) else None


@dataclass(frozen=True, slots=True)
class S3Request:
    """The request an engine asks to have signed (the spec's RemoteSignRequest, as far as the
    scope checks go)."""

    method: str
    uri: str
    headers: Mapping[str, Sequence[str]]
    body: str | None = None


def classify(endpoint: Endpoint, scope: S3Scope, request: S3Request) -> SignVerdict:
    """Whether to sign `request` for a table at `scope`, and whether it writes."""
    method, uri, headers, body = request.method.upper(), request.uri, request.headers, request.body
    if method not in READ_METHODS | WRITE_METHODS:
        return refuse(f"method {method} is never signed")
    try:
        check_uri(uri)
        parts = urlsplit(uri)
        # Sub-resources are bare names ("?acl", "?delete"): their value is "".
        query = query_parameters(parts.query)
        single = header_values(headers, parts.netloc)
    except AmbiguousRequest as err:
        return refuse(str(err))
    if parts.fragment:
        return refuse("the URI has a fragment")
    located = endpoint.bucket_and_path(parts.scheme.lower(), parts.netloc, parts.path)
    if located is None:
        return refuse("the URI is not on the warehouse's S3 endpoint")
    bucket, raw_path = located
    if bucket != scope.bucket:
        return refuse("the URI names another bucket")
    key = _key(raw_path)
    if key is None:
        return refuse("the object key is not in canonical form")
    names = set(query)
    write = method in WRITE_METHODS
    if key:
        return _object(scope, key, names, single, write)
    return _bucket(scope, method, query, names, body)


def _object(
    scope: S3Scope,
    key: str,
    names: set[str],
    headers: Mapping[str, str],
    write: bool,
) -> SignVerdict:
    if not scope.owns(key):
        return refuse("the object is outside the table location")
    if names - _OBJECT_QUERY:
        return refuse(f"sub-resource {sorted(names - _OBJECT_QUERY)[0]!r} is never signed")
    for name, value in headers.items():  # names in lower case
        if name.startswith(_PERMISSION_HEADERS):
            return refuse(f"header {name} is never signed")
        if name == "x-amz-copy-source":
            # "[/]bucket/key[?versionId=...]", percent-encoded
            source_path = value.split("?", 1)[0]
            source_bucket, _, raw_key = source_path.lstrip("/").partition("/")
            source = _key(raw_key)
            if source_bucket != scope.bucket or not source or not scope.owns(source):
                return refuse("the copy source is outside the table location")
    return SignVerdict(write=write)


def _bucket(
    scope: S3Scope, method: str, query: dict[str, str], names: set[str], body: str | None
) -> SignVerdict:
    if method == "HEAD" and not names:
        return SignVerdict()  # does the bucket exist: nothing of any table
    if method == "GET" and names == {"location"}:
        return SignVerdict()  # GetBucketLocation
    if method == "GET":
        if names - _LIST_QUERY:
            return refuse(f"sub-resource {sorted(names - _LIST_QUERY)[0]!r} is never signed")
        prefix = query.get("prefix")
        if prefix is None or not scope.owns_listing(prefix):
            return refuse("a listing must have a prefix inside the table location")
        return SignVerdict()
    if method == "POST" and names == {"delete"}:
        return _delete_objects(scope, body)
    return refuse("bucket-level requests other than listings inside the table are never signed")


def _delete_objects(scope: S3Scope, body: str | None) -> SignVerdict:
    if not body:
        return refuse("a multi-object delete is signed only with its body, to check its keys")
    try:
        # The body is bounded by max_body_bytes; expat refuses entity amplification (billion laughs).
        root = ElementTree.fromstring(body)  # noqa: S314
    except ElementTree.ParseError:
        return refuse("the multi-object delete body is not XML")
    keys = [el.text or "" for el in root.iter() if _NAMESPACE.sub("", el.tag) == "Key"]
    if not keys:
        return refuse("the multi-object delete names no key")
    for key in keys:
        if not _canonical(key) or not scope.owns(key):
            return refuse("the multi-object delete names a key outside the table location")
    return SignVerdict(write=True, payload_sha256=hashlib.sha256(body.encode()).hexdigest())
