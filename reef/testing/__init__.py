"""Helpers for testing and benchmarking a Reef deployment (like ``django.test``).

Shared by the test suite (``tests/``), the benchmarks (``bench/``) and the tutorials;
never imports the first two. One responsibility per module:

* :mod:`reef.testing.servers`: ``reef serve`` and the scripted upstream as real
  processes on loopback (spawning, readiness, stopping).
* :mod:`reef.testing.scripted_upstream`: the scripted stand-in for a paid LLM provider
  (``python -m reef.testing.scripted_upstream --port 0``).
* :mod:`reef.testing.scripted_tools`: the tool calls a prompt scripts it to answer with,
  in each dialect (for the real agent CLIs' tests).
* :mod:`reef.testing.harness_upstream`: the scripted stand-in as a tiny agent world
  whose answers depend on the harness (harness tests, the tutorial, benchmarks).
* :mod:`reef.testing.load`: steady client load against a running deployment.
* :mod:`reef.testing.stats`: percentiles and slopes of measurements (soak verdicts).
* :mod:`reef.testing.events`: synthetic event builders (exchanges, reports, releases).
"""
