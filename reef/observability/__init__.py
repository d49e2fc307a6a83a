"""Optional OpenTelemetry traces of exchanges and reports (``pip install reef[otel]``).

:mod:`reef.observability.genai` names the attributes (pure, no OpenTelemetry import);
:mod:`reef.observability.tracing` wraps the SDK, imported only when tracing is on.
"""
