"""The gang webhook's certificates: made, judged for renewal with a clock, never cert-manager."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from unittest import mock

import pytest
from cryptography import x509
from kubernetes import client
from kubernetes.client.rest import ApiException

from tpfabric_operator.webhook.certs import (
    CertKeeper,
    issue_ca,
    issue_serving,
    renewal_due,
    service_names,
)

pytestmark = pytest.mark.unit

NOW = dt.datetime(2026, 12, 4, tzinfo=dt.UTC)
NAMES = service_names("tpfabric-gang-webhook", "tpfabric-system")


def test_the_serving_certificate_names_the_service_and_is_signed_by_the_ca() -> None:
    ca = issue_ca(NOW)
    serving = issue_serving(ca, NAMES, NOW)
    cert = x509.load_pem_x509_certificate(serving.cert)
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == [
        "tpfabric-gang-webhook",
        "tpfabric-gang-webhook.tpfabric-system",
        "tpfabric-gang-webhook.tpfabric-system.svc",
        "tpfabric-gang-webhook.tpfabric-system.svc.cluster.local",
    ]
    ca_cert = x509.load_pem_x509_certificate(ca.cert)
    cert.verify_directly_issued_by(ca_cert)  # raises when not
    assert renewal_due(ca, serving, NAMES, NOW) == ""


@pytest.mark.parametrize(
    ("days", "why"),
    [(334, ""), (336, "the serving certificate ends soon"), (3621, "the CA ends within 30 days")],
)
def test_renewal_is_due_a_month_before_the_end(days: int, why: str) -> None:
    ca = issue_ca(NOW)
    serving = issue_serving(ca, NAMES, NOW)
    later = NOW + dt.timedelta(days=days)
    assert renewal_due(ca, serving, NAMES, later).startswith(why)


def test_a_new_service_name_another_ca_or_no_secret_renews() -> None:
    ca = issue_ca(NOW)
    serving = issue_serving(ca, NAMES, NOW)
    assert (
        renewal_due(ca, serving, service_names("other", "ns"), NOW) == "the Service's names changed"
    )
    assert (
        renewal_due(issue_ca(NOW), serving, NAMES, NOW) == "the serving certificate is not the CA's"
    )
    assert renewal_due(None, None, NAMES, NOW) == "no certificate yet"
    broken = type(ca)(b"not a certificate", ca.key)
    assert renewal_due(broken, serving, NAMES, NOW).startswith("the Secret holds no valid")


def test_a_missing_secret_the_account_may_not_create_says_the_chart_makes_it(
    tmp_path: Path,
) -> None:
    keeper = CertKeeper(
        client.ApiClient(client.Configuration()),
        namespace="tpfabric-system",
        secret="tpfabric-gang-webhook-tls",
        service="tpfabric-gang-webhook",
        configuration="tpfabric-gangs",
        cert_dir=tmp_path,
    )
    keeper.core = mock.Mock(  # type: ignore[assignment]
        read_namespaced_secret=mock.Mock(side_effect=ApiException(status=404)),
        create_namespaced_secret=mock.Mock(side_effect=ApiException(status=403)),
    )
    with pytest.raises(RuntimeError, match="the chart makes it"):
        keeper.ensure()
    assert not (tmp_path / "tls.key").exists()
