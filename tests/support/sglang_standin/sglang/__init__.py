"""A TEST STAND-IN for the ``sglang`` package, not SGLang: SGLang needs CUDA and cannot run here.

Put on ``PYTHONPATH`` only by ``tests/engine/test_sglang_launch.py``. Its
:mod:`sglang.launch_server` serves Reef's own engine, which implements SGLang's HTTP
protocol, on the port it is given. What a test with it proves: that ``reef engine
--backend sglang`` builds the command, finds ``sglang`` importable, waits for readiness,
announces the URL, forwards SIGTERM and ends with the child's status, and that Reef's
engine client drives whatever answers SGLang's protocol there. What it does not prove:
anything about SGLang itself (its flags beyond ``--model-path/--host/--port``, its start-up,
its answers).
"""
