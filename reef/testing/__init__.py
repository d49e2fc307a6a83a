"""Stand-in providers and process launchers for trying and testing a Reef deployment.

``reef demo``, the tutorials, the test suite (``tests/``) and the benchmarks (``bench/``)
share them; they never import the last two. The development-only tools (the local stack,
load and statistics, synthetic events) are in ``reef_dev``, outside the wheel. One
responsibility per module:

* :mod:`reef.testing.servers`: ``reef serve`` and the scripted upstream as real
  processes on loopback (spawning, readiness, stopping).
* :mod:`reef.testing.scripted_upstream`: the scripted stand-in for a paid LLM provider
  (``python -m reef.testing.scripted_upstream --port 0``).
* :mod:`reef.testing.scripted_tools`: the tool calls a prompt scripts it to answer with,
  in each dialect (for the real agent CLIs' tests).
* :mod:`reef.testing.harness_upstream`: the scripted stand-in as a tiny agent world
  whose answers depend on the harness (harness tests, the tutorial, benchmarks).
* :mod:`reef.testing.judge_upstream`: the scripted stand-in for a judge model.
"""
