"""The catalog's error hierarchy.

    CatalogError
    ├── InvalidRequestError            malformed or semantically invalid input
    │   ├── InvalidArgumentError       what Iceberg's reference refuses as IllegalArgumentException
    │   ├── MetadataValidationError    what Iceberg's reference refuses as ValidationException
    │   ├── LocationNotAllowedError    a location outside the table's allowed prefix
    │   ├── NoFileError                no regular file at a location a request names
    │   └── DocumentTooLargeError      a document over its documented size bound
    ├── UnprocessableError             well-formed but contradictory input
    ├── NotFoundError
    │   ├── NoSuchWarehouseError
    │   ├── NoSuchNamespaceError
    │   ├── NoSuchTableError
    │   ├── NoSuchViewError
    │   ├── NoSuchPlanIdError          an unknown, expired or someone else's scan plan
    │   └── NoSuchPlanTaskError        an unknown, expired or someone else's plan task
    ├── ConflictError
    │   ├── AlreadyExistsError
    │   ├── NamespaceNotEmptyError
    │   └── CommitFailedError          a failed requirement or a lost compare-and-swap
    ├── ForbiddenError                 the caller may not do this (e.g. scan these columns)
    ├── IdempotencyKeyReusedError      one caller's key, two different operations or requests
    ├── CommitStateUnknownError        the outcome of a commit cannot be known
    ├── StorageUnavailableError        the registry or warehouse cannot be reached
    │   ├── KeyServiceUnavailableError the KMS cannot be reached or refuses: fail closed
    │   └── BusyError                  at a concurrency bound: retry after `retry_after_seconds`
    └── IntegrityCheckError            a sealed document in the registry failed its checks

The catalog knows nothing of HTTP; the gateway maps each class to a status and an Iceberg
exception name in one table.
"""

from __future__ import annotations


class CatalogError(Exception):
    """Base of every error the catalog raises on purpose."""


class InvalidRequestError(CatalogError):
    pass


class InvalidArgumentError(InvalidRequestError):
    """Invalid input that Iceberg's reference implementation refuses with an
    IllegalArgumentException: Java clients raise that exception, with the message as sent."""


class MetadataValidationError(InvalidRequestError):
    """A change that Iceberg's reference implementation refuses with a ValidationException (the
    checks of its `TableMetadata.Builder`): its REST server answers 400 with that type and the
    message as worded here."""


class LocationNotAllowedError(InvalidRequestError):
    pass


class NoFileError(InvalidRequestError):
    pass


class DocumentTooLargeError(InvalidRequestError):
    """A request document (e.g. a metrics report) larger than its documented bound."""


class UnprocessableError(CatalogError):
    pass


class NotFoundError(CatalogError):
    pass


class NoSuchWarehouseError(NotFoundError):
    pass


class NoSuchNamespaceError(NotFoundError):
    pass


class NoSuchTableError(NotFoundError):
    pass


class NoSuchViewError(NotFoundError):
    pass


class NoSuchPlanIdError(NotFoundError):
    pass


class NoSuchPlanTaskError(NotFoundError):
    pass


class ForbiddenError(CatalogError):
    pass


class ConflictError(CatalogError):
    pass


class AlreadyExistsError(ConflictError):
    pass


class NamespaceNotEmptyError(ConflictError):
    pass


class CommitFailedError(ConflictError):
    pass


class IdempotencyKeyReusedError(CatalogError):
    pass


class CommitStateUnknownError(CatalogError):
    pass


class StorageUnavailableError(CatalogError):
    pass


class KeyServiceUnavailableError(StorageUnavailableError):
    pass


class BusyError(StorageUnavailableError):
    """Work refused at a concurrency bound rather than queued without bound."""

    def __init__(self, message: str, retry_after_seconds: int) -> None:
        super().__init__(message)
        self.retry_after_seconds = retry_after_seconds


class IntegrityCheckError(CatalogError):
    pass
