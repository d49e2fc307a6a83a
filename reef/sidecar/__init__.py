"""The engine sidecar: follows the release chain and hot-loads weights into one engine."""
