from __future__ import annotations

import pytest

from tpfabric_localcluster.processes import ComponentProcess


def a_component(argv: list[str]) -> ComponentProcess:
    return ComponentProcess(name="c", pid=1, create_time=0.0, log="c.log", argv=argv)


def test_a_components_port_is_read_from_its_flag() -> None:
    component = a_component(["kube-scheduler", "--port-range=1-2", "--secure-port=10259", "-v=1"])
    assert component.port("--secure-port") == 10259
    assert a_component(["python", "-m", "tpfabric_scheduler", "--port=4107"]).port() == 4107


def test_a_component_without_the_flag_has_no_port() -> None:
    with pytest.raises(StopIteration):
        a_component(["etcd", "--port-range=1-2"]).port()
