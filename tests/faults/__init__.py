"""The fault suite: each test injects one fault into real processes on loopback
under a steady client load (reef_dev/load.py) and ends with the full consistency
check (tests/support/consistency.py); each records one ``FAULT-TABLE`` row."""
