"""What a policy decision's audit record carries so that it can be decided again: `cedar_request`.

A decision record names its principal, action and resource; `cedar_request` adds exactly what
Cedar decided on, as the engine was given it, so a change preview (`gateway.authz.redecide`) can
decide the same request under another policy set without guessing anything:

    "cedar_request": {
      "principal": {"type": "Cedarberg::User", "id": "key:etl"},
      "resource": {"type": "Cedarberg::Table", "id": "default/sales/orders"},
      "context": {"auth_method": "gateway-token", "client_address": "127.0.0.1", ...},
      "entities": [[the principal and its groups], [the resource and its ancestors]]
    }

The entities are the principal's (its groups, and its attributes as tags: `tls_subject`, the
`api_key_id` that proved it, an OIDC issuer's claims) and the resource's (its ancestors with
their grants and properties as read for the decision); the context is the request's Cedar context
(changes, refs, property keys, client address, auth method, `via` for a delegated principal).
The action is the record's `action`.

Cost: the entity lists are rendered once per principal object and per resource object by the
decision itself (`PolicyEngine.principal_json`, `Resource.entities_json`); here each distinct text
is scrubbed once, entity arrays entity by entity (a new namespace or table brings one new entity;
its ancestors, with their grants, are its siblings'), and each distinct request is rendered once
and kept (bounded, `ByteBoundedLru`), so a repeated request adds the context's serialisation and
one cache lookup (a few microseconds) and about 1.5 KB to its line. A replayed read writes its
plan's line as it was rendered, at no cost at all.

Invariants:
- **No secret reaches the log**: every string is scrubbed as the record's structured fields are
  (`audit.scrub_text`, free_form=False) and every value under a key that names a secret is
  ``[REDACTED]``, except `PUBLIC_KEYS` (the gateway's own names for public values: the id of the
  API key that proved a principal, a delegation's subject token type). A request that lost
  anything to the scrubber is never re-decided (`redecide` reports it as not re-decidable).
- **Bounded**: a request whose rendering exceeds `MAX_REQUEST_BYTES` is recorded as
  ``{"omitted": "..."}`` (not re-decidable), so one large resource cannot make every line large.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping
from typing import Any, Final

import orjson

from cedarberg.gateway.audit import MAX_STRING, REDACTED, may_hold_secret, names_secret, scrub_text
from cedarberg.gateway.authz.entities import EntityUid
from cedarberg.gateway.byte_lru import ByteBoundedLru

__all__ = ["MAX_REQUEST_BYTES", "PUBLIC_KEYS", "decided_request"]

MAX_REQUEST_BYTES: Final = 64 * 1024
# Names the gateway sets itself whose values are public, though the names look secret: the id of
# the API key that proved a principal (a tag), and the type URN of a delegation's subject token
# (`actAs` context: `urn:ietf:params:oauth:token-type:jwt`, never the token).
PUBLIC_KEYS: Final = frozenset({"api_key_id", "subject_token_type"})
_MAX_DEPTH: Final = 8
_OMITTED: Final = orjson.Fragment(
    orjson.dumps({"omitted": f"the request is larger than {MAX_REQUEST_BYTES} bytes"})
)

# Scrubbed renderings by their raw text: the principal and resource entity lists repeat from
# request to request (the same string objects, whose hash is kept), contexts nearly so.
_CACHE_ENTRIES: Final = 8192
_CACHE_BYTES: Final = 16 * 1024**2
_CACHE_ENTRY_BYTES: Final = MAX_REQUEST_BYTES
_scrubbed: ByteBoundedLru[tuple[int, str | bytes], bytes] = ByteBoundedLru(
    _CACHE_ENTRIES, _CACHE_BYTES, _CACHE_ENTRY_BYTES
)
# Whole renderings by everything they are made of: a principal's repeated request is one lookup.
_requests: ByteBoundedLru[tuple[EntityUid, str, EntityUid, str, bytes], bytes] = ByteBoundedLru(
    _CACHE_ENTRIES, _CACHE_BYTES, 2 * _CACHE_ENTRY_BYTES
)
_lock = threading.Lock()


def _clean(value: Any, depth: int = 0) -> Any:
    if isinstance(value, str):
        return scrub_text(value, free_form=False)
    if value is None or isinstance(value, bool | int | float):
        return value
    if depth >= _MAX_DEPTH:
        return "[nested too deep]"
    if isinstance(value, Mapping):
        return {
            scrub_text(str(key), free_form=False): REDACTED
            if key not in PUBLIC_KEYS and names_secret(str(key))
            else _clean(item, depth + 1)
            for key, item in value.items()
        }
    if isinstance(value, list | tuple):
        return [_clean(item, depth + 1) for item in value]
    return scrub_text(str(value), free_form=False)


# A JSON text's strings (no escapes: see `_left_as_is`) and brackets, in order.
_STRINGS_AND_BRACKETS: Final = re.compile(r'"[^"\\]*"|[\[\]{}]')
_OPENING: Final = frozenset("[{")
_CLOSING: Final = frozenset("]}")


def _left_as_is(text: str, depth: int) -> bool:
    """Whether `_clean` would give back what JSON `text`, found at `depth`, already holds: it has
    no escape (so every string and key is written literally in it), no string longer than the
    scrubber's cut, nothing either secret search finds anywhere in it (so in none of its strings
    or keys), and no container at or past the depth kept. A new resource's entity usually is:
    checking it is one pass of three searches instead of a scrub of each of its strings."""
    if "\\" in text or len(text) > MAX_STRING or may_hold_secret(text):
        return False
    open_containers = deepest = 0
    for part in _STRINGS_AND_BRACKETS.findall(text):
        if part in _OPENING:
            open_containers += 1
            deepest = max(deepest, open_containers)
        elif part in _CLOSING:
            open_containers -= 1
    return depth + deepest <= _MAX_DEPTH


def _scrubbed_json(text: str | bytes, depth: int = 0) -> bytes:
    """`text` (JSON, found at `depth` of the request) with every string scrubbed, as JSON;
    computed once per distinct text."""
    key = (depth, text)
    with _lock:
        found = _scrubbed.get(key)
    if found is not None:
        return found
    decoded = text.decode() if isinstance(text, bytes) else text
    if _left_as_is(decoded, depth):
        rendered = decoded.encode() if isinstance(text, str) else text
    else:
        rendered = orjson.dumps(_clean(orjson.loads(text), depth))
    with _lock:
        # The key (the raw text) and the rendering: about twice the text.
        _scrubbed.put(key, rendered, 2 * len(rendered) + len(text))
    return rendered


def _scrubbed_entities(text: str) -> bytes:
    """A JSON array of entities, scrubbed as `_scrubbed_json` would, but entity by entity: a new
    resource's ancestors (its namespace, warehouse and catalog, with their grants) are those of
    the requests before it, so only the new entity is scrubbed."""
    with _lock:
        found = _scrubbed.get((0, text))
    if found is not None:
        return found
    entities = orjson.loads(text)
    if not isinstance(entities, list):
        return _scrubbed_json(text)
    rendered = b"[" + b",".join(_scrubbed_json(orjson.dumps(entity), 1) for entity in entities) + b"]"
    with _lock:
        _scrubbed.put((0, text), rendered, 2 * len(rendered) + len(text))
    return rendered


def decided_request(
    principal: EntityUid,
    principal_entities: str,
    resource: EntityUid,
    resource_entities: str,
    context: Mapping[str, Any],
) -> orjson.Fragment:
    """The `cedar_request` of a decision, ready for the audit line: `principal_entities` and
    `resource_entities` are JSON arrays of Cedar entities (as the engine was given them),
    `context` the Cedar context. Raises nothing for JSON the engine could decide on."""
    context_json = orjson.dumps(context)
    # Bounded before anything is scrubbed: a large resource costs neither the scrubbing nor a line.
    if len(principal_entities) + len(resource_entities) + len(context_json) > MAX_REQUEST_BYTES:
        return _OMITTED
    key = (principal, principal_entities, resource, resource_entities, context_json)
    with _lock:
        found = _requests.get(key)
    if found is None:
        found = _render(principal, principal_entities, resource, resource_entities, context_json)
        size = len(found) + len(principal_entities) + len(resource_entities) + len(context_json)
        with _lock:
            _requests.put(key, found, 2 * size)
    return orjson.Fragment(found) if found else _OMITTED


def _render(
    principal: EntityUid,
    principal_entities: str,
    resource: EntityUid,
    resource_entities: str,
    context_json: bytes,
) -> bytes:
    """The request as scrubbed JSON; empty when that is over `MAX_REQUEST_BYTES`."""
    parts = (
        b'{"principal":',
        _scrubbed_json(orjson.dumps(principal.to_json())),
        b',"resource":',
        _scrubbed_json(orjson.dumps(resource.to_json())),
        b',"context":',
        _scrubbed_json(context_json),
        b',"entities":[',
        _scrubbed_entities(principal_entities),
        b",",
        _scrubbed_entities(resource_entities),
        b"]}",
    )
    rendered = b"".join(parts)
    return b"" if len(rendered) > MAX_REQUEST_BYTES else rendered
