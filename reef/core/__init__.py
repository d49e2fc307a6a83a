"""The pure core: events, ids, topics, the error tree and the processor steps.

Standard library and ``reef.core`` only (tests/architecture/test_layers.py checks it).
"""
