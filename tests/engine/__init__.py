"""Tests of the local serving engine (reef/engine): tiny model, HTTP API, hot reload."""
