"""Shared fixtures. The local stack fixtures (Kafka, S3) live in tests/stack_plugin.py."""

pytest_plugins = ["tests.stack_plugin"]
