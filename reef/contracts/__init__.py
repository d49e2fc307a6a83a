"""The contract suites of Reef's ports, for anyone who writes an adapter of one.

Each suite is a pytest class of tests every adapter of the port must pass; Reef runs them
against its own adapters, and an integrator runs them against theirs:

* :mod:`reef.contracts.log`: the event log (:class:`reef.log.base.EventLog`; Reef's
  embedded SQLite log and Kafka);
* :mod:`reef.contracts.artifacts`: the artifact store (local folder, S3);
* :mod:`reef.contracts.state`: a processor host's state (in memory, SQLite rows, RocksDB
  restored from its changelog);
* :mod:`reef.contracts.keyring`: the key ring of sealed records.

Subclass a suite in a ``test_*.py`` module and give it the fixture its docstring names::

    from reef.contracts.log import LogContract

    class TestMyLog(LogContract):
        @pytest.fixture
        async def log(self, tmp_path):
            ...  # a started adapter, closed after the test

The suites need ``pip install 'reef[contracts]'`` (pytest and pytest-asyncio); their
async tests carry ``pytest.mark.asyncio``, so they run in pytest-asyncio's strict mode
and in its auto mode alike. Nothing else in Reef imports them.
"""
