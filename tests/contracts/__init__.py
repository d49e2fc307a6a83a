"""Contract suites that only Reef's own test suite runs.

The suites of the ports an integrator may implement (log, artifacts, state, key ring)
ship with Reef in :mod:`reef.contracts`; this package holds the rest:

* :mod:`tests.contracts.host`: the processor hosts, as ``reef streams`` processes.
"""
