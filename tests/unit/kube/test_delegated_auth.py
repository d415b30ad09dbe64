"""Who may read metrics: the API server's TokenReview and SubjectAccessReview answers, cached
for a short while (fakes of the two review APIs; the real ones: tests/integration)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from kubernetes.client.rest import ApiException

from tpfabric_kube.delegated_auth import CACHE_SECONDS, MAX_ENTRIES, DelegatedAuth

PROMETHEUS = "system:serviceaccount:monitoring:prometheus"


class Reviews:
    """The API server's two reviews: ``users`` by token, ``allowed`` users and paths."""

    def __init__(self, users: dict[str, str], allowed: set[tuple[str, str]]) -> None:
        self.users, self.allowed = users, allowed
        self.calls: list[str] = []
        self.down = False

    def create_token_review(self, body: dict[str, Any]) -> Any:
        self.calls.append("TokenReview")
        if self.down:
            raise ApiException(status=503, reason="Service Unavailable")
        user = self.users.get(body["spec"]["token"])
        if user is None:
            return SimpleNamespace(status=SimpleNamespace(authenticated=False, user=None, error=""))
        found = SimpleNamespace(username=user, uid="u", groups=["system:authenticated"], extra={})
        return SimpleNamespace(status=SimpleNamespace(authenticated=True, user=found, error=""))

    def create_subject_access_review(self, body: dict[str, Any]) -> Any:
        self.calls.append("SubjectAccessReview")
        spec = body["spec"]
        allowed = (spec["user"], spec["nonResourceAttributes"]["path"]) in self.allowed
        return SimpleNamespace(status=SimpleNamespace(allowed=allowed, reason=""))


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def an_auth(reviews: Reviews, clock: Clock | None = None) -> DelegatedAuth:
    return DelegatedAuth(reviews, reviews, clock=clock or Clock())


def a_cluster() -> Reviews:
    return Reviews(
        {"prom-token": PROMETHEUS, "other-token": "system:serviceaccount:ns:other"},
        {(PROMETHEUS, "/metrics")},
    )


def test_a_request_without_a_bearer_token_gets_401_and_asks_the_api_server_nothing() -> None:
    reviews = a_cluster()
    auth = an_auth(reviews)
    for header in (None, "", "Basic dXNlcjpwdw==", "Bearer ", "Bearer"):
        decision = auth.decide(header, "/metrics")
        assert (decision.status, decision.allowed) == (401, False), header
    assert reviews.calls == []


def test_a_token_the_api_server_does_not_know_gets_401() -> None:
    assert an_auth(a_cluster()).decide("Bearer made-up", "/metrics").status == 401


def test_a_known_user_without_the_rbac_rule_gets_403_naming_the_rule() -> None:
    decision = an_auth(a_cluster()).decide("Bearer other-token", "/metrics")
    assert decision.status == 403
    assert (
        'system:serviceaccount:ns:other may not get /metrics (grant nonResourceURLs: ["/metrics"])'
        in (decision.reason)
    )


def test_a_user_granted_get_on_the_path_is_allowed() -> None:
    reviews = a_cluster()
    decision = an_auth(reviews).decide("Bearer prom-token", "/metrics")
    assert decision.allowed
    assert reviews.calls == ["TokenReview", "SubjectAccessReview"]
    assert not an_auth(reviews).decide("Bearer prom-token", "/debug").allowed  # by path


def test_answers_are_cached_for_a_while_then_asked_again() -> None:
    reviews, clock = a_cluster(), Clock()
    auth = an_auth(reviews, clock)
    for _ in range(5):
        assert auth.decide("Bearer prom-token", "/metrics").allowed
        assert auth.decide("Bearer other-token", "/metrics").status == 403
    assert len(reviews.calls) == 4  # each token reviewed once
    clock.now += CACHE_SECONDS + 0.1
    reviews.allowed.clear()  # the RBAC rule was removed meanwhile
    assert auth.decide("Bearer prom-token", "/metrics").status == 403
    assert len(reviews.calls) == 6


def test_an_api_server_that_cannot_answer_gives_503_and_is_asked_again_next_time() -> None:
    reviews = a_cluster()
    auth = an_auth(reviews)
    reviews.down = True
    decision = auth.decide("Bearer prom-token", "/metrics")
    assert decision.status == 503
    assert "Service Unavailable" in decision.reason
    reviews.down = False
    assert auth.decide("Bearer prom-token", "/metrics").allowed  # the error was not cached


def test_made_up_tokens_cannot_grow_the_cache_without_bound() -> None:
    auth = an_auth(a_cluster())
    for n in range(MAX_ENTRIES + 50):
        auth.decide(f"Bearer flood-{n}", "/metrics")
    assert len(auth._cache) == MAX_ENTRIES
    assert not any("flood-" in key for key, _ in auth._cache)  # hashes, never the tokens
