"""Helpers for testing and benchmarking a Reef deployment (like ``django.test``).

Shared by the test suite (``tests/``) and the benchmarks (``bench/``); never imports
either. One responsibility per module:

* :mod:`reef.testing.servers`: ``reef serve`` and the scripted upstream as real
  processes on loopback (spawning, readiness, stopping).
* :mod:`reef.testing.scripted_upstream`: the scripted stand-in for a paid LLM provider
  (``python -m reef.testing.scripted_upstream --port 0``).
* :mod:`reef.testing.load`: steady client load against a running deployment.
* :mod:`reef.testing.stats`: percentiles and slopes of measurements (soak verdicts).
* :mod:`reef.testing.events`: synthetic event builders (exchanges, reports, releases).
"""
