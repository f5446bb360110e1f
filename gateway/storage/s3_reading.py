"""The one reading of an S3 request to be signed: its URI, query parameters and headers, as S3 reads
them, or a refusal when two implementations could read them differently.

The scope check (`sign_scope`) decides on this reading and the signer signs the request unchanged,
so the request must mean one thing to every party: the gateway's parser, botocore's signer (which
signs the query and the headers as given) and the S3 server (AWS, moto, MinIO... each with its own
parser). Hence:

- the URI holds only the characters RFC 3986 allows; `+` and `;` must be percent-encoded (a `+` is
  a space to some servers and a plus to others; `;` separated parameters for older parsers);
- a query parameter appears once: names are compared after percent-decoding and case-folding
  (`prefix=a&%70refix=b`, `prefix=a&Prefix=b`), because S3 reads the first of a repeated name and
  Python's dict the last, and a server that folds case would read the other one;
- percent-encoding is well formed and decodes to UTF-8 without control characters;
- a header name is an HTTP token given once (in any case) with exactly one value without control
  characters (a list of values is joined by the signer and read otherwise by S3);
- a `Host` header names the URI's own host: the signer signs a given `Host` instead of the URI's,
  and for virtual-hosted URIs the host is the bucket.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from urllib.parse import unquote

# RFC 3986 unreserved, reserved (but `+` and `;`) and `%`.
_URI = re.compile(r"[A-Za-z0-9\-._~:/?#\[\]@!$&'()*,=%]*")
_PERCENT = re.compile(r"%(?![0-9A-Fa-f]{2})")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# RFC 9110 token characters.
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")


class AmbiguousRequest(ValueError):
    """The request could be read in more than one way; the message says how, without values."""


def check_uri(uri: str) -> None:
    """Raises AmbiguousRequest for a URI with characters outside RFC 3986 or a raw `+` or `;`."""
    if not _URI.fullmatch(uri):
        raise AmbiguousRequest("the URI has characters that must be percent-encoded (+, ;, spaces, ...)")


def decode(raw: str) -> str:
    """One component, percent-decoded once. Raises AmbiguousRequest for malformed encoding, invalid
    UTF-8 or control characters."""
    if _PERCENT.search(raw):
        raise AmbiguousRequest("the URI has a malformed percent-encoding")
    try:
        decoded = unquote(raw, errors="strict")
    except UnicodeDecodeError:
        raise AmbiguousRequest("the URI has a percent-encoding that is not UTF-8") from None
    if _CONTROL.search(decoded):
        raise AmbiguousRequest("the URI has an encoded control character")
    return decoded


def query_parameters(raw_query: str) -> dict[str, str]:
    """The query's parameters, decoded (a bare name such as `?acl` has the value ""). Raises
    AmbiguousRequest for an empty pair or a name given twice."""
    parameters: dict[str, str] = {}
    folded: set[str] = set()
    if not raw_query:
        return parameters
    for pair in raw_query.split("&"):
        raw_name, _, raw_value = pair.partition("=")
        name = decode(raw_name)
        if not name:
            raise AmbiguousRequest("the query has an empty parameter")
        if name.lower() in folded:
            raise AmbiguousRequest(f"query parameter {name[:64]!r} is repeated")
        folded.add(name.lower())
        parameters[name] = decode(raw_value)
    return parameters


def header_values(headers: Mapping[str, Sequence[str]], netloc: str) -> dict[str, str]:
    """Each header's one value, by lower-case name. Raises AmbiguousRequest for a name that is not
    a token or is given twice, a header without exactly one value, a value with control characters,
    or a `Host` other than `netloc`."""
    single: dict[str, str] = {}
    for name, values in headers.items():
        if not _TOKEN.fullmatch(name):
            raise AmbiguousRequest("a header name is not an HTTP token")
        lower = name.lower()
        if lower in single:
            raise AmbiguousRequest(f"header {lower[:64]} is repeated")
        if len(values) != 1:
            raise AmbiguousRequest(f"header {lower[:64]} must have exactly one value")
        if _CONTROL.search(values[0].replace("\t", " ")):
            raise AmbiguousRequest(f"header {lower[:64]} has a control character")
        single[lower] = values[0]
    host = single.get("host")
    if host is not None and host.strip().lower() != netloc.lower():
        raise AmbiguousRequest("the Host header is not the URI's host")
    return single
