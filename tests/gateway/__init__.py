"""Tests of the HTTP gateway."""
