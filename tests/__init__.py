"""Cedarberg test suite."""
