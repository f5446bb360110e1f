"""The offline key commands' audit records: `cedarberg keys create|revoke` append to the audit
log the gateway writes, so a key made or revoked without the admin API is on record too.

    with KeyAudit.open(settings) as audit:     # before the change: an unusable file stops it
        ... change the key store ...
        audit.key_changed("createApiKey", record.key_id, record.principal_id)

Only a file destination is written (`audit.destination` of the same settings `serve` reads): a
stdout destination is the gateway's own output stream, and the command's stdout is its answer
(the new key), so there the command writes nothing. A record is a ``mutation`` like the admin
API's, with ``principal`` null (no gateway principal acted), the key's id in ``resource`` and
``detail.key_id``, and ``detail.via`` naming the command and the operating-system user. Never the
secret. The record is synced before the command reports success.
"""

from __future__ import annotations

import getpass
import os
from types import TracebackType

from cedarberg.gateway.audit import AuditEvent, AuditLog, EventKind, Outcome
from cedarberg.gateway.config.settings import Settings

VIA = "cedarberg keys (offline)"


def _os_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a bare container): the number says who
        return str(os.getuid())


class KeyAudit:
    """The audit log of one offline key command (a no-op when the destination is stdout)."""

    def __init__(self, audit: AuditLog | None) -> None:
        self._audit = audit

    @classmethod
    def open(cls, settings: Settings) -> KeyAudit:
        """Open the configured audit file. Raises `OSError` if it cannot be opened: the command
        then changes nothing."""
        if settings.audit.destination == "stdout":
            return cls(None)
        try:
            return cls(AuditLog.open(settings.audit))
        except OSError as err:  # said as the audit log's failure, not the key store's
            raise OSError(
                err.errno, f"the audit log {settings.audit.destination}: {err.strerror or err}"
            ) from err

    def key_changed(self, action: str, key_id: str, key_principal: str) -> None:
        """Record that `action` (createApiKey, revokeApiKey) was done to key `key_id` and wait
        until the record is written. Raises `OSError` if it could not be."""
        if self._audit is None:
            return
        self._audit.record(
            AuditEvent(
                EventKind.MUTATION,
                request_id=None,
                principal=None,
                action=action,
                resource=f'Cedarberg::ApiKey::"{key_id}"',
                outcome=Outcome.SUCCESS,
                detail={"key_id": key_id, "key_principal": key_principal, "via": VIA, "os_user": _os_user()},
            ),
            keep=True,
        )
        if not self._audit.flush():
            raise OSError(f"the audit record of {action} {key_id} could not be written")

    def __enter__(self) -> KeyAudit:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if self._audit is not None:
            self._audit.close()
