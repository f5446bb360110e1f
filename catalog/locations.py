"""Storage locations: normalisation and the "inside the warehouse" rule.

Engines spell the same place differently (Spark writes `file:/x` under a `file:///x` table), so
locations are compared only after `normalize`. A location that climbs with `..` or carries a query
or fragment is refused outright rather than interpreted.
"""

from __future__ import annotations

import posixpath
import re
from urllib.parse import quote, urlsplit

from cedarberg.catalog.errors import InvalidRequestError, LocationNotAllowedError

SUPPORTED_SCHEMES = frozenset({"file", "s3", "s3a", "s3n", "gs", "abfs", "abfss"})
# s3a/s3n are Hadoop's spellings of the same object store paths as s3.
_SCHEME_ALIASES = {"s3a": "s3", "s3n": "s3"}
# The directory under an object's location where a soft drop parks its metadata files (until
# undrop or purge): registration refuses a file in it, a rebuild skips it.
PARKING_DIR = "cedarberg-dropped"
# One regular-expression search, not a Python loop over every character: a commit normalises
# each of its roots several times.
_CONTROL_CHARACTER = re.compile(r"[\x00-\x1f]")


def normalize(location: str) -> str:
    """Return the canonical form of a location: `file:///abs/path` or `scheme://bucket/key`.

    Raises InvalidRequestError for relative, unsupported or climbing locations.
    """
    if not location or _CONTROL_CHARACTER.search(location):
        raise InvalidRequestError("location must be a non-empty string without control characters")
    if location.startswith("/"):
        location = "file://" + location
    parts = urlsplit(location)
    scheme = parts.scheme.lower()
    if scheme not in SUPPORTED_SCHEMES:
        raise InvalidRequestError(f"unsupported location scheme: {scheme or '(none)'}")
    if parts.query or parts.fragment:
        raise InvalidRequestError("location must not have a query or fragment")
    path = parts.path
    if ".." in path.split("/"):
        raise InvalidRequestError("location must not contain '..'")
    if scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise InvalidRequestError("file locations must be local")
        if not path.startswith("/"):
            raise InvalidRequestError("file locations must be absolute")
        clean = posixpath.normpath(path)
        clean = "/" if clean == "/" else clean.rstrip("/")
        if clean.startswith("//"):
            clean = "/" + clean.lstrip("/")
        return "file://" + clean
    if not parts.netloc:
        raise InvalidRequestError(f"{scheme} locations need a bucket")
    key = posixpath.normpath("/" + path.lstrip("/")) if path.strip("/") else ""
    key = "" if key == "/" else key
    return f"{_SCHEME_ALIASES.get(scheme, scheme)}://{parts.netloc}{key}"


def is_within(location: str, prefix: str) -> bool:
    """True if `location` is `prefix` or below it, after normalisation of both."""
    loc, root = normalize(location), normalize(prefix)
    return loc == root or loc.startswith(root.rstrip("/") + "/")


def require_within(location: str, prefix: str, what: str = "location") -> str:
    """Return the normalised location, or raise LocationNotAllowedError if it is outside prefix."""
    if not is_within(location, prefix):
        raise LocationNotAllowedError(f"{what} {location!r} is outside the allowed location {prefix!r}")
    return normalize(location)


_PLAIN_SEGMENT = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.=-]*")


def segment(name: str) -> str:
    """A path segment for a catalog name: kept readable when plain, percent-encoded otherwise."""
    if _PLAIN_SEGMENT.fullmatch(name):
        return name
    # Dots are encoded too, so a name such as ".." can never climb out of its parent.
    return quote(name, safe="").replace(".", "%2E")


def join(base: str, *names: str) -> str:
    """Join catalog names as path segments under a normalised base."""
    out = normalize(base).rstrip("/")
    for name in names:
        out += "/" + segment(name)
    return out


def to_local_path(location: str) -> str:
    """The filesystem path of a `file:` location."""
    norm = normalize(location)
    if not norm.startswith("file://"):
        raise InvalidRequestError(f"not a local location: {location!r}")
    return norm[len("file://") :]
