"""Errors of the kms package. Messages never contain key material or KMS credentials.

KmsError
├── KmsUnavailableError        the KMS cannot be reached or answers 5xx / throttles: retryable
├── KmsRefusedError            the KMS refused: key disabled or missing, permission denied,
│                              a wrapped key it cannot decrypt (incl. wrong context)
├── UnsupportedContextError    a provider was asked to bind associated data it cannot carry
├── UnknownProviderError       a KEK URI whose scheme is not in the closed registry
└── SealIntegrityError         a sealed document failed authentication or binding checks
    └── MalformedEnvelopeError a blob that is not a well-formed sealed document
"""

from __future__ import annotations


class KmsError(Exception):
    """Base of every error the kms package raises on purpose."""


class KmsUnavailableError(KmsError):
    pass


class KmsRefusedError(KmsError):
    pass


class UnsupportedContextError(KmsError):
    pass


class UnknownProviderError(KmsError):
    pass


class SealIntegrityError(KmsError):
    pass


class MalformedEnvelopeError(SealIntegrityError):
    pass
