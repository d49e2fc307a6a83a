"""Reef's development tools, not part of the product wheel.

What building and testing Reef needs and a deployment does not:

* :mod:`reef_dev.stack`: the local stack (Kafka KRaft, SeaweedFS S3, a schema registry,
  an OpenTelemetry Collector), fetched, built and run by ``scripts/stack up|down|status|env``;
  the test suite's fixtures (``tests/stack_plugin.py``) start it too.
* :mod:`reef_dev.load`: steady client load against a running deployment.
* :mod:`reef_dev.stats`: percentiles and slopes of measurements (soak verdicts).
* :mod:`reef_dev.events`: synthetic event builders (exchanges, reports, releases).
* :mod:`reef_dev.agent_session`: synthetic agent sessions (bodies that grow turn by turn).
* :mod:`reef_dev.chat_templates`: the chat templates of the model folders tests build.

It imports Reef; Reef never imports it (tests/architecture/test_layers.py).
"""
