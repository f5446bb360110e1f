"""Cedarberg: a policy-first, secure Apache Iceberg REST catalog gateway.

The one import namespace of the product. Its subpackages keep their place at the top of the
source tree (`gateway/`, `catalog/`, `kms/`, `pipelines/`); `src/cedarberg/` links to them, so
an editable install, a wheel and mypy all see them as `cedarberg.gateway`, `cedarberg.catalog`,
`cedarberg.kms` and `cedarberg.pipelines`.
"""
