"""What one pod asks of a node and which nodes it may run on, by kube-scheduler's own rules.

Pure functions over a pod spec as the API returns it (a mapping with camelCase keys):

- :func:`parse_quantity` / :func:`resource_amount`: ``resource.Quantity`` text to an integer in
  kube-scheduler units (CPU in millicores, memory and storage in bytes, counts otherwise), rounded
  up as ``Quantity.MilliValue()`` / ``Value()`` round;
- :func:`pod_requests`: the pod's effective request per resource, as NodeResourcesFit computes it
  (``k8s.io/component-helpers/resource.PodRequests``): app containers and sidecars (init
  containers with ``restartPolicy: Always``) add up, each other init container needs its own
  request plus the sidecars started before it, the larger wins, then ``spec.overhead``; a
  container's request defaults to its limit; plus one pod slot;
- :func:`node_matcher`: ``nodeSelector`` AND required node affinity, as the NodeAffinity filter
  matches them (terms ORed, expressions ANDed; an empty or invalid term matches nothing);
- :func:`format_amount`: an amount for people (``16 cpu``, ``64Gi memory``, ``a pod slot``);
- :func:`label_selector`: a ``metav1.LabelSelector`` (of pods, of namespaces) as the API server
  matches it;
- :func:`host_ports` and :func:`repels_peers`: the cheap filters a gang plan must model because
  they limit its workers to one per node (NodePorts; InterPodAffinity's required anti-affinity
  with ``kubernetes.io/hostname`` that matches the gang's own workers).

Tolerations are :class:`~tpfabric_core.placement.snapshot.Toleration`. This module must never
look at node capacity, plan, or do I/O.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from tpfabric_core.pod_wiring import GPU_RESOURCE

__all__ = [
    "HOSTNAME_KEY",
    "LabelSelectorError",
    "NodeAffinityMatcher",
    "container_gpus",
    "format_amount",
    "host_ports",
    "label_selector",
    "node_matcher",
    "parse_quantity",
    "pod_gpus",
    "pod_requests",
    "repels_peers",
    "resource_amount",
]

#: the topology key of "one per node" pod (anti-)affinity
HOSTNAME_KEY = "kubernetes.io/hostname"

_QUANTITY = re.compile(
    r"^([+-]?)(\d+(?:\.\d*)?|\.\d+)(?:[eE]([+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]))?$"
)
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 1000),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
_MAX_EXPONENT = 30  # beyond any real capacity; keeps a hostile "1e999999" from building a huge int
_EXAMPLES = "e.g. 500m, 2, 1.5, 2Gi, 1G, 1e3, 100Ki"
_POD_LEVEL_RESOURCES = ("cpu", "memory")
_BYTE_RESOURCES = ("memory", "ephemeral-storage")


def _exact_quantity(value: object) -> Fraction:
    """Return the exact value of a Kubernetes quantity; ValueError on anything else."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        # one exception type for every unreadable quantity: callers skip it, never crash
        raise ValueError(f"{value!r} is not a Kubernetes quantity ({_EXAMPLES})")  # noqa: TRY004
    text = value.strip() if isinstance(value, str) else str(value)
    match = _QUANTITY.match(text)
    if match is None:
        raise ValueError(f"{value!r} is not a Kubernetes quantity ({_EXAMPLES})")
    sign, number, exponent, suffix = match.groups()
    amount = Fraction(number)
    if exponent is not None:
        power = int(exponent)
        if abs(power) > _MAX_EXPONENT:
            raise ValueError(f"quantity {value!r} is out of range")
        amount *= Fraction(10) ** power
    elif suffix in _BINARY:
        amount *= _BINARY[suffix]
    else:
        amount *= _DECIMAL[suffix or ""]
    return -amount if sign == "-" else amount


def _round_up(amount: Fraction) -> int:
    """Return ``amount`` rounded up away from zero, as ``Quantity.Value()`` rounds."""
    return math.ceil(amount) if amount >= 0 else -math.ceil(-amount)


def parse_quantity(value: object, *, cpu_millis: bool = False) -> int:
    """Return a quantity (``"500m"``, ``"2"``, ``"1.5"``, ``"2Gi"``, ``"1e3"``) as an integer.

    In base units (bytes, counts, cores) rounded up, or in thousandths (CPU millicores) with
    ``cpu_millis``. ValueError with the offending text on anything that is not a quantity.
    """
    amount = _exact_quantity(value)
    return _round_up(amount * 1000 if cpu_millis else amount)


def resource_amount(name: str, value: object) -> int:
    """Return the amount of resource ``name`` in kube-scheduler units: millicores for ``cpu``."""
    return parse_quantity(value, cpu_millis=name == "cpu")


def format_amount(name: str, amount: int) -> str:
    """Return ``amount`` of ``name`` for people: ``16 cpu``, ``500m cpu``, ``64Gi memory``."""
    if name == "cpu":
        return f"{amount // 1000} cpu" if amount % 1000 == 0 else f"{amount}m cpu"
    if name == "pods":
        return "a pod slot" if amount == 1 else f"{amount} pod slots"
    if name in _BYTE_RESOURCES or name.startswith("hugepages-"):
        decimal = sorted(((s, int(f)) for s, f in _DECIMAL.items() if f > 1), key=lambda x: -x[1])
        scales = [*reversed(_BINARY.items()), *decimal]
        for suffix, factor in scales:
            if amount >= factor and amount % factor == 0:
                return f"{amount // factor}{suffix} {name}"
        return f"{amount} bytes of {name}"
    return f"{amount} {name}"


Exact = dict[str, Fraction]


def _add(total: Exact, more: Mapping[str, Fraction]) -> None:
    for name, amount in more.items():
        total[name] = total.get(name, Fraction(0)) + amount


def _maximum(total: Exact, other: Mapping[str, Fraction]) -> None:
    for name, amount in other.items():
        if name not in total or amount > total[name]:
            total[name] = amount


def _requests_of(resources: Mapping[str, Any] | None) -> Exact:
    """Return the exact requests of a ``resources`` block, a request defaulting to its limit."""
    resources = resources or {}
    merged = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
    return {name: _exact_quantity(value) for name, value in merged.items()}


def pod_requests(pod_spec: Mapping[str, Any]) -> dict[str, int]:
    """Return the pod's effective request per resource, kube-scheduler units, ``pods`` = 1.

    ``max(sum(app containers) + sum(sidecars), max over init containers of (its request +
    sidecars declared before it))`` per resource, then pod-level requests for cpu/memory when the
    pod sets them, plus ``spec.overhead``. ValueError on a malformed quantity.
    """
    total: Exact = {}
    for container in pod_spec.get("containers") or []:
        _add(total, _requests_of(container.get("resources")))
    sidecars: Exact = {}
    init_peak: Exact = {}
    for container in pod_spec.get("initContainers") or []:
        own = _requests_of(container.get("resources"))
        if container.get("restartPolicy") == "Always":
            _add(total, own)
            _add(sidecars, own)
            _maximum(init_peak, sidecars)
        else:
            running = dict(own)
            _add(running, sidecars)
            _maximum(init_peak, running)
    _maximum(total, init_peak)
    pod_level = pod_spec.get("resources") or {}
    explicit = {
        name: _exact_quantity(value) for name, value in (pod_level.get("requests") or {}).items()
    }
    for name, value in (pod_level.get("limits") or {}).items():
        if name not in explicit and name not in total:
            explicit[name] = _exact_quantity(value)  # defaulted from the pod-level limit
    for name in _POD_LEVEL_RESOURCES:
        if name in explicit:
            total[name] = explicit[name]
    _add(total, {k: _exact_quantity(v) for k, v in (pod_spec.get("overhead") or {}).items()})
    result = {
        name: _round_up(amount * 1000 if name == "cpu" else amount)
        for name, amount in total.items()
    }
    result["pods"] = result.get("pods", 0) + 1
    return result


def pod_gpus(pod_spec: Mapping[str, Any]) -> int:
    """Return the GPUs a pod takes, as kube-scheduler counts them (:func:`pod_requests`: its
    containers' sum, an init container's peak); 0 when a quantity is malformed (the API server
    refuses such a pod)."""
    try:
        return pod_requests(pod_spec).get(GPU_RESOURCE, 0)
    except ValueError:
        return 0


def container_gpus(container: Mapping[str, Any]) -> int:
    """Return the GPUs one container takes (its request, else its limit); 0 when malformed."""
    try:
        return _round_up(_requests_of(container.get("resources")).get(GPU_RESOURCE, Fraction(0)))
    except ValueError:
        return 0


# -- node selection ------------------------------------------------------------------------------

_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_NAME_PART = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_INT = re.compile(r"^[+-]?\d+$")
_INT64 = (-(2**63), 2**63 - 1)

LabelTest = Callable[[Mapping[str, str]], bool]
FieldTest = Callable[[str], bool]


class _InvalidTermError(ValueError):
    """A node selector term the API server's matcher would reject (it then matches nothing)."""


def _valid_key(key: str) -> bool:
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return False
    return bool(name) and len(name) <= 63 and bool(_NAME_PART.match(name))


def _int64(text: object) -> int | None:
    if not isinstance(text, str) or not _INT.match(text):
        return None
    number = int(text)
    return number if _INT64[0] <= number <= _INT64[1] else None


def _label_test(expression: Mapping[str, Any]) -> LabelTest:
    """Return the test of one ``matchExpressions`` entry; _InvalidTermError if malformed."""
    key = expression.get("key")
    operator = expression.get("operator")
    values = expression.get("values") or []
    if not isinstance(key, str) or not _valid_key(key) or not isinstance(values, list):
        raise _InvalidTermError(f"invalid key {key!r} or values")
    if operator in ("In", "NotIn"):
        if not values or not all(
            isinstance(v, str) and len(v) <= 63 and _LABEL_VALUE.match(v) for v in values
        ):
            raise _InvalidTermError(f"{operator} needs valid label values")
        wanted = frozenset(values)
        if operator == "In":
            return lambda node: key in node and node[key] in wanted
        return lambda node: key not in node or node[key] not in wanted
    if operator in ("Exists", "DoesNotExist"):
        if values:
            raise _InvalidTermError(f"{operator} takes no values")
        if operator == "Exists":
            return lambda node: key in node
        return lambda node: key not in node
    if operator in ("Gt", "Lt"):
        bound = _int64(values[0]) if len(values) == 1 else None
        if bound is None:
            raise _InvalidTermError(f"{operator} needs exactly one integer value")

        def compare(node: Mapping[str, str]) -> bool:
            found = _int64(node.get(key))
            if found is None:
                return False
            return found > bound if operator == "Gt" else found < bound

        return compare
    raise _InvalidTermError(f"unknown operator {operator!r}")


class LabelSelectorError(ValueError):
    """A ``metav1.LabelSelector`` the API server would refuse; names the field at fault."""


_SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


def label_selector(selector: Mapping[str, Any] | None) -> LabelTest:
    """Return the test of a ``metav1.LabelSelector`` on an object's labels: every
    ``matchLabels`` pair and every ``matchExpressions`` entry (In, NotIn, Exists, DoesNotExist)
    must hold; an empty selector (or None) selects everything, as ``LabelSelectorAsSelector``.

    Raises :class:`LabelSelectorError` naming the field at fault for a selector the API server
    would refuse (an unknown operator, a bad key or value, values where none belong).
    """
    if selector is None:
        return lambda _labels: True
    if not isinstance(selector, Mapping):
        raise LabelSelectorError("the selector is not a mapping (matchLabels, matchExpressions)")
    unknown = sorted(set(selector) - {"matchLabels", "matchExpressions"})
    if unknown:
        raise LabelSelectorError(f"{unknown[0]}: not a field of a label selector")
    wanted = selector.get("matchLabels")
    wanted = {} if wanted is None else wanted
    expressions = selector.get("matchExpressions")
    expressions = [] if expressions is None else expressions
    if not isinstance(wanted, Mapping):
        raise LabelSelectorError("matchLabels: not a mapping of label keys to values")
    if not isinstance(expressions, list):
        raise LabelSelectorError("matchExpressions: not a list")
    for key, value in wanted.items():
        if not isinstance(key, str) or not _valid_key(key):
            raise LabelSelectorError(f"matchLabels: {key!r} is not a label key")
        if not isinstance(value, str) or len(value) > 63 or not _LABEL_VALUE.match(value):
            raise LabelSelectorError(f"matchLabels.{key}: {value!r} is not a label value")
    tests: list[LabelTest] = []
    for index, expression in enumerate(expressions):
        where = f"matchExpressions[{index}]"
        if not isinstance(expression, Mapping):
            raise LabelSelectorError(f"{where}: not a mapping (key, operator, values)")
        if expression.get("operator") not in _SELECTOR_OPERATORS:
            raise LabelSelectorError(
                f"{where}.operator: {expression.get('operator')!r} is none of "
                f"{', '.join(_SELECTOR_OPERATORS)}"
            )
        try:
            tests.append(_label_test(expression))
        except _InvalidTermError as err:
            raise LabelSelectorError(f"{where}: {err}") from None
    pairs = tuple(wanted.items())
    return lambda labels: (
        all(labels.get(k) == v for k, v in pairs) and all(test(labels) for test in tests)
    )


def _field_test(expression: Mapping[str, Any]) -> FieldTest:
    """Return the test of one ``matchFields`` entry on the node name; _InvalidTermError if bad."""
    key = expression.get("key")
    operator = expression.get("operator")
    values = expression.get("values") or []
    if operator not in ("In", "NotIn") or not isinstance(values, list) or len(values) != 1:
        raise _InvalidTermError("matchFields takes In or NotIn with exactly one value")
    value = values[0]
    is_name = key == "metadata.name"
    if operator == "In":
        return lambda name: (name if is_name else "") == value
    return lambda name: (name if is_name else "") != value


@dataclass(frozen=True, slots=True)
class _Term:
    """One parsed node selector term: every label test and field test must hold."""

    labels: tuple[LabelTest, ...]
    fields: tuple[FieldTest, ...]

    def matches(self, name: str, node_labels: Mapping[str, str]) -> bool:
        return all(test(node_labels) for test in self.labels) and all(
            test(name) for test in self.fields
        )


def _parse_term(term: Mapping[str, Any] | None) -> _Term | None:
    """Return the parsed term, or None when it matches nothing (empty or malformed)."""
    if not term:
        return None
    expressions = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not expressions and not fields:
        return None
    try:
        return _Term(
            labels=tuple(_label_test(e) for e in expressions),
            fields=tuple(_field_test(f) for f in fields),
        )
    except (_InvalidTermError, AttributeError, TypeError):
        return None


@dataclass(frozen=True, slots=True)
class NodeAffinityMatcher:
    """A pod's hard node constraints: call it with ``(node name, node labels)``.

    ``node_selector`` pairs must all match; if ``required_terms`` is not None (the pod has
    required node affinity), at least one parsed term must match too (``None`` entries are
    terms that match nothing).
    """

    node_selector: tuple[tuple[str, str], ...] = ()
    required_terms: tuple[_Term | None, ...] | None = None

    @property
    def constrains(self) -> bool:
        """Return whether any node could be excluded (False: every node matches)."""
        return bool(self.node_selector) or self.required_terms is not None

    def __call__(self, name: str, node_labels: Mapping[str, str]) -> bool:
        """Return whether the pod may run on node ``name`` with labels ``node_labels``."""
        for key, value in self.node_selector:
            if node_labels.get(key) != value:
                return False
        if self.required_terms is None:
            return True
        return any(t is not None and t.matches(name, node_labels) for t in self.required_terms)

    def eligible(self, nodes: Mapping[str, Mapping[str, str]]) -> frozenset[str] | None:
        """Return the names in ``nodes`` the pod may run on; None when nothing constrains it."""
        if not self.constrains:
            return None
        return frozenset(name for name, node_labels in nodes.items() if self(name, node_labels))


def node_matcher(pod_spec: Mapping[str, Any]) -> NodeAffinityMatcher:
    """Return the matcher of a pod spec's ``nodeSelector`` and required node affinity."""
    selector = pod_spec.get("nodeSelector") or {}
    node_affinity = (pod_spec.get("affinity") or {}).get("nodeAffinity") or {}
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    terms: tuple[_Term | None, ...] | None = None
    if required is not None:
        listed: Sequence[Mapping[str, Any]] = (required or {}).get("nodeSelectorTerms") or []
        terms = tuple(_parse_term(term) for term in listed)
    return NodeAffinityMatcher(
        node_selector=tuple(sorted((str(k), str(v)) for k, v in selector.items())),
        required_terms=terms,
    )


def host_ports(pod_spec: Mapping[str, Any]) -> frozenset[tuple[str, int]]:
    """Return the (protocol, hostPort) pairs the pod takes on its node (the NodePorts filter).

    Every container's and init container's ports with a ``hostPort``; the protocol defaults to
    TCP. The host IP is ignored: two pods asking for one port on different IPs of a node are
    counted as a conflict, which only ever keeps a plan off a node kube-scheduler might allow.
    """
    taken = set()
    for key in ("containers", "initContainers"):
        for container in pod_spec.get(key) or []:
            for port in container.get("ports") or []:
                host = port.get("hostPort")
                if isinstance(host, int) and host > 0:
                    taken.add((str(port.get("protocol") or "TCP"), host))
    return frozenset(taken)


def repels_peers(
    pod_spec: Mapping[str, Any], namespace: str, peer_labels: Mapping[str, str]
) -> bool:
    """Return whether the pod's required pod anti-affinity keeps it off any node that runs a pod
    labelled ``peer_labels`` in ``namespace`` (a worker of its own gang): one per node.

    Only terms with ``topologyKey: kubernetes.io/hostname`` count (other keys spread a gang over
    whole domains, which a gang plan does not do; kube-scheduler's refusals cover those). A term
    applies to the pod's own namespace when it names no namespaces (a ``namespaceSelector`` is
    taken to include it); ``mismatchLabelKeys`` never matches a peer with the same values.
    A malformed selector matches nothing, as the API server's would.
    """
    anti = ((pod_spec.get("affinity") or {}).get("podAntiAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or []
    for term in anti:
        if not isinstance(term, Mapping) or term.get("topologyKey") != HOSTNAME_KEY:
            continue
        namespaces = term.get("namespaces") or []
        if namespaces and namespace not in namespaces:
            continue
        if term.get("mismatchLabelKeys"):
            continue
        selector = term.get("labelSelector")
        if not isinstance(selector, Mapping):
            continue  # no selector selects no pod
        try:
            selects = label_selector(selector)
        except LabelSelectorError:
            continue
        if selects(peer_labels):
            return True
    return False
