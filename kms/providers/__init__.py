"""KMS providers, one module per KEK URI scheme (see `kms.registry`). Each module exposes
`open_provider(kek_uri, settings, local_key_dir) -> KeyProvider` and imports its SDK itself."""
