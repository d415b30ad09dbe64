"""Every parser of what another program writes is total: for any text in a label or an
annotation, and any value where an object's schema allows any, it returns, or raises only its
own input error. Hypothesis over arbitrary strings (other scripts' digits, 5,000-digit numbers,
brackets nested 10,000 deep among them) and nested values."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tpfabric_core import gangs, labels
from tpfabric_core.diagnose.nccl_inspector import parse_nccl_inspector
from tpfabric_core.diagnose.nccl_ras import parse_nccl_ras
from tpfabric_core.diagnose.rdma_summary import pod_pairing
from tpfabric_core.diagnose.serve_trace import parse_serve_trace
from tpfabric_core.diagnose.straggler_report import parse_straggler_report
from tpfabric_core.errors import InputError
from tpfabric_core.fabric.link_publish import (
    DETAIL_ANNOTATION,
    FabricPublication,
    metadata_patch,
    read_detail,
)
from tpfabric_core.fabric.link_timeline import TIMELINE_ANNOTATION, read_timeline
from tpfabric_core.fabric_description import parse_fabric_description
from tpfabric_core.hostlist import HostlistError, expand_hostlist
from tpfabric_core.input_limits import bounded_json, whole_number
from tpfabric_core.jobset_ranks import jobset_layout
from tpfabric_core.placement.topology import ClusterTopology
from tpfabric_operator.gangs import serving
from tpfabric_operator.gangs.owners import pod_group_gang
from tpfabric_operator.gangs.pods import gang_pod
from tpfabric_operator.jobs.born_released import placement_state
from tpfabric_operator.jobs.kueue.admission import admission_of
from tpfabric_operator.jobs.pod_cache import entry_of
from tpfabric_scheduler.protocol import BadRequestError, parse_extender_args
from tpfabric_scheduler.store import ClusterStore, JobRecord, NodeRecord, PodRecord

#: every key the code reads from a label or an annotation of another program's object
KEYS = sorted(
    {
        value
        for module in (gangs, labels)
        for name, value in vars(module).items()
        if name.isupper() and isinstance(value, str) and "/" in value
    }
    | {
        DETAIL_ANNOTATION,
        TIMELINE_ANNOTATION,
        "tpfabric.io/job",
        "tpfabric.io/worker-index",
        "tpfabric.io/attempt",
        "tpfabric.io/failed-worker",
        "kueue.x-k8s.io/queue-name",
        "kueue.x-k8s.io/max-exec-time-seconds",
        *(f"topology.tpfabric.io/rail-{i}" for i in (0, 1, 7, 99999999)),
    }
)
TRICKY = [
    "²",
    "٣",
    "1" * 5000,
    "-1",
    " 7 ",
    "1e3",
    "0x10",
    "[" * 10_000,
    '{"rails": ' * 3000,
    "n[0-9999][0-9999][0-9999]",
    "",
]
text = st.one_of(st.text(max_size=40), st.sampled_from(TRICKY))
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(text, inner, max_size=4),
    max_leaves=20,
)
strings = st.dictionaries(st.one_of(st.sampled_from(KEYS), text), text, max_size=8)
SETTINGS = gangs.GangSettings(levels={"leaf": "topology.tpfabric.io/leaf", "spine": "s"})
fast = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def meta_of(labels_: dict[str, str], annotations: dict[str, str]) -> dict[str, Any]:
    return {
        "name": "p-0",
        "namespace": "team",
        "uid": "u",
        "labels": labels_,
        "annotations": annotations,
    }


@fast
@given(st.one_of(text, json_values))
def test_a_whole_number_is_read_from_anything_or_is_none(value: Any) -> None:
    number = whole_number(value)
    assert number is None or (isinstance(number, int) and number >= 0)


@fast
@given(strings, strings, json_values)
def test_a_pods_gang_is_read_from_any_labels_and_annotations(
    labels_: dict[str, str], annotations: dict[str, str], group: Any
) -> None:
    spec = {"schedulingGroup": {"podGroupName": group}}
    gangs.gang_of(meta_of(labels_, annotations), SETTINGS, spec=spec)


@fast
@given(strings, strings, st.sampled_from(["Pending", "Running", "Failed"]))
def test_the_operators_pod_readers_take_any_labels(
    labels_: dict[str, str], annotations: dict[str, str], phase: str
) -> None:
    pod = {
        "metadata": meta_of(labels_, annotations),
        "spec": {"containers": [{"name": "w", "resources": {"limits": {"nvidia.com/gpu": "²"}}}]},
        "status": {"phase": phase},
    }
    entry_of(pod)
    gang_pod(pod)
    serving.group_index(labels_)


@fast
@given(st.one_of(text, json_values.map(json.dumps)))
def test_the_fabric_health_detail_is_read_from_any_text(annotation: str) -> None:
    rails, problem = read_detail(annotation)
    assert isinstance(problem, str)
    assert all(rail.rail >= 0 for rail in rails)


@fast
@given(json_values)
def test_bounded_json_says_no_in_its_own_error(value: Any) -> None:
    with contextlib.suppress(ValueError):
        bounded_json(json.dumps(value), "x")


#: a job's ``status.placement`` (an object in the CRD's schema), whatever its fields hold
placements = st.dictionaries(
    st.one_of(st.sampled_from(["state", "nodes", "attempt", "domain", "level", "rails"]), text),
    json_values,
    max_size=6,
)


@fast
@given(strings, strings, placements)
def test_the_extenders_records_read_any_node_and_pod_labels_and_any_job_status(
    labels_: dict[str, str], annotations: dict[str, str], status: Any
) -> None:
    node_labels = {**labels_, "topology.tpfabric.io/health": "degraded"}
    NodeRecord.from_object({"metadata": {**meta_of(node_labels, annotations)}, "status": {}})
    PodRecord.from_object({"metadata": meta_of(labels_, annotations), "spec": {}, "status": {}})
    job = JobRecord.from_object(
        {"metadata": meta_of(labels_, annotations), "spec": {}, "status": {"placement": status}}
    )
    ClusterStore().placement_of(job)
    placement_state({"placement": status})


@fast
@given(st.dictionaries(text, strings, max_size=4))
def test_the_topology_is_built_from_any_node_labels(nodes: dict[str, dict[str, str]]) -> None:
    topology = ClusterTopology.from_node_labels(nodes)
    for node in nodes:
        if node in topology.node_names:
            assert len(topology.rail_leaves(node)) <= 64


@fast
@given(json_values, json_values, json_values)
def test_owner_objects_are_read_whatever_their_free_fields_say(
    replicas: Any, surge: Any, min_count: Any
) -> None:
    rolling = {"maxUnavailable": replicas, "maxSurge": surge}
    serving.lws_view(
        {"metadata": {}, "spec": {"replicas": replicas, "rolloutStrategy": {
            "rollingUpdateConfiguration": rolling}}}
    )  # fmt: skip
    pod_group_gang(
        {"spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}}}, SETTINGS.levels
    )


@fast
@given(st.lists(st.tuples(text, st.integers(0, 64), st.integers(0, 64)), max_size=4), text)
def test_a_jobsets_layout_is_read_from_any_replicated_jobs(
    replicated: list[tuple[str, int, int]], job: str
) -> None:
    jobset = {
        "spec": {
            "replicatedJobs": [
                {"name": n, "replicas": r, "template": {"spec": {"parallelism": p}}}
                for n, r, p in replicated
            ]
        }
    }
    jobset_layout(jobset, None)
    jobset_layout(jobset, job)


@fast
@given(json_values, text)
def test_kueues_verdict_is_read_from_any_workload_status(status: Any, queue: str) -> None:
    conditions = status if isinstance(status, list) else [status]
    admission_of({"metadata": {}, "status": {"conditions": [
        c if isinstance(c, dict) else {"type": "Admitted", "status": c} for c in conditions]}},
        queue)  # fmt: skip


@fast
@given(strings, strings)
def test_the_agent_compares_any_labels_and_annotations_it_finds_on_its_node(
    labels_: dict[str, str], annotations: dict[str, str]
) -> None:
    publication = FabricPublication("True", "LinksHealthy", "ok", "ok", '{"state":"ok"}')
    metadata_patch(publication, labels_, annotations)


@fast
@given(st.one_of(text, json_values.map(json.dumps)).map(str.encode))
def test_an_extender_request_is_read_or_refused_in_its_own_error(body: bytes) -> None:
    with contextlib.suppress(BadRequestError):
        parse_extender_args(body)


@fast
@given(text)
def test_a_hostlist_expands_or_says_no_in_its_own_error(expression: str) -> None:
    try:
        hosts = expand_hostlist(expression)
    except HostlistError:
        return
    assert len(hosts) <= 100_000


@fast
@given(st.one_of(text, json_values.map(json.dumps)))
def test_a_fabric_description_parses_or_says_no_in_its_own_error(source: str) -> None:
    with contextlib.suppress(InputError):
        parse_fabric_description(source)


def test_a_fabric_description_nested_deeper_than_the_cap_names_the_cap_and_the_line() -> None:
    with pytest.raises(InputError, match=r"^deep.yaml:3: lists and mappings nested more than 64"):
        parse_fabric_description("name: x\nblocks:\n" + "  " + "[" * 10_000, "deep.yaml")


def test_a_hostlist_of_ten_to_the_twelve_names_is_refused_before_any_is_made() -> None:
    with pytest.raises(HostlistError, match="more than the 100000 one expression may name"):
        expand_hostlist("n[0-9999][0-9999][0-9999]")


# -- what tpfabric diagnose reads -----------------------------------------------------------------


@fast
@given(st.one_of(text, json_values.map(json.dumps)))
def test_a_nodes_link_timeline_is_read_from_any_text(annotation: str) -> None:
    timeline, problem = read_timeline(annotation)
    assert isinstance(problem, str)
    assert timeline is not None or problem or not annotation


@fast
@given(st.one_of(text, json_values.map(json.dumps), json_values))
def test_a_pods_pairing_is_read_from_any_termination_message(message: Any) -> None:
    pod = {"status": {"initContainerStatuses": [
        {"name": "rdma-init", "state": {"terminated": {"message": message}}}]}}  # fmt: skip
    pairing, why = pod_pairing(pod)
    assert (pairing is None) == bool(why)


@fast
@given(json_values)
def test_a_pod_of_any_shape_gives_a_pairing_or_a_reason(status: Any) -> None:
    pod_pairing({"metadata": {"name": "p"}, "status": status})


@fast
@given(st.one_of(text, json_values.map(json.dumps)))
def test_each_job_side_input_parses_or_says_no_in_its_own_error(source: str) -> None:
    for parse in (
        lambda t: parse_nccl_ras(t, "ras.json"),
        lambda t: parse_nccl_inspector([("inspector.jsonl", t)]),
        lambda t: parse_straggler_report(t, "s.log"),
        lambda t: parse_serve_trace(t, "trace.json"),
    ):
        with contextlib.suppress(InputError):
            parse(source)


@fast
@given(st.lists(json_values, max_size=3))
def test_ras_documents_of_any_content_parse_or_say_no(documents: list[Any]) -> None:
    wrapped = [{"nccl_version": "2.29.1", "communicators": [d]} for d in documents]
    with contextlib.suppress(InputError):
        parse_nccl_ras("\n".join(json.dumps(d) for d in wrapped), "ras.json")
