"""Handles on the local test stack's services (see reef_dev/stack and tests/stack_plugin.py,
whose fixtures hand them out): Kafka brokers and clusters to kill and restart, and the
S3 server with its credentials and a client."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from reef_dev.stack import kafka, process, seaweed
from reef_dev.stack.paths import StackSettings
from reef_dev.stack.process import Echo


@dataclass
class KafkaBroker:
    """One node of the local three-node cluster."""

    node_id: int
    port: int
    _settings: StackSettings = field(repr=False)
    _shape: kafka.KafkaShape = field(repr=False)
    _echo: Echo = field(repr=False)

    @property
    def bootstrap(self) -> str:
        return f"{kafka.HOST}:{self.port}"

    @property
    def _node(self) -> kafka.KafkaNode:
        return self._shape.node(self.node_id)

    def is_running(self) -> bool:
        return self._node.is_running()

    def kill(self) -> None:
        """SIGKILL the broker process (a crash: no controlled shutdown)."""
        process.kill(self._node.service)

    def stop(self) -> None:
        """Stop the broker gracefully (SIGTERM, controlled shutdown)."""
        process.stop(self._node.service)

    def start(self, *, wait: bool = True, timeout: float = 120.0) -> None:
        """Start the broker again; by default wait until it is back in the metadata."""
        kafka.start_node(self._settings, self._shape, self._node, echo=self._echo)
        if wait:
            kafka.wait_for_brokers(
                [self.bootstrap],
                {self.node_id},
                timeout=timeout,
                services=(self._node.service,),
                echo=self._echo,
            )


@dataclass
class KafkaCluster:
    """The local three-node cluster: RF 3, min.insync.replicas 2."""

    bootstrap: str
    brokers: tuple[KafkaBroker, ...]
    _settings: StackSettings = field(repr=False)

    def broker(self, node_id: int) -> KafkaBroker:
        for broker in self.brokers:
            if broker.node_id == node_id:
                return broker
        raise KeyError(node_id)

    def heal(self, timeout: float = 180.0) -> None:
        """Restart brokers that are down and wait until all three are in the metadata."""
        kafka.up(self._settings, "cluster", timeout=timeout, echo=self.brokers[0]._echo)


@dataclass
class S3Server:
    """An S3-compatible endpoint; the local SeaweedFS unless REEF_TEST_S3_ENDPOINT is set."""

    endpoint: str
    access_key: str
    secret_key: str
    bucket: str
    region: str
    managed: bool
    _settings: StackSettings = field(repr=False)
    _echo: Echo = field(repr=False)

    @property
    def _endpoint(self) -> seaweed.S3Endpoint:
        return seaweed.S3Endpoint(
            endpoint=self.endpoint,
            access_key=self.access_key,
            secret_key=self.secret_key,
            bucket=self.bucket,
            region=self.region,
        )

    @property
    def host(self) -> str:
        """``host:port`` of the endpoint (what ``minio.Minio`` takes)."""
        return self._endpoint.host

    @property
    def secure(self) -> bool:
        return self._endpoint.secure

    def client(self) -> Any:
        """A ``minio.Minio`` client (path-style) for this server."""
        return self._endpoint.minio_client()

    def is_running(self) -> bool:
        self._require_managed("is_running")
        return seaweed.service_for(self._settings).is_running()

    def stop(self) -> None:
        """Stop the S3 server process (SIGTERM, then SIGKILL)."""
        self._require_managed("stop")
        process.stop(seaweed.service_for(self._settings))

    def kill(self) -> None:
        """SIGKILL the S3 server process."""
        self._require_managed("kill")
        process.kill(seaweed.service_for(self._settings))

    def start(self, timeout: float = 90.0) -> None:
        """Start the S3 server again and wait for a bucket round trip."""
        self._require_managed("start")
        seaweed.up(self._settings, echo=self._echo, timeout=timeout)

    def _require_managed(self, what: str) -> None:
        if not self.managed:
            raise RuntimeError(
                f"cannot {what} the S3 server at {self.endpoint}: it was given by "
                "REEF_TEST_S3_ENDPOINT, not started by the test stack"
            )
