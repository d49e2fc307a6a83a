"""Services over the ports: the event store, projection, releases, replay, audit."""
