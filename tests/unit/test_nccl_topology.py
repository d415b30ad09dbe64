"""NCCL's own view checked against the pairing: the dump parser (NCCL's topology XML schema) and
the per-GPU verdict that ``tpfabric explain --nccl`` prints."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from tpfabric_cli.nccl_view import nccl_view, print_nccl_views
from tpfabric_core.errors import InputError
from tpfabric_core.nccl_topology import compare_with_plan, parse_topology_dump

IBM_DUMP = (
    Path(__file__).parent / "rdma_init" / "data" / "published" / "ibm-cloud-h100-topo.xml"
).read_text()


def planned(pairs: dict[str, str]) -> list[dict[str, str]]:
    return [{"gpu": gpu, "hca": hca} for gpu, hca in pairs.items()]


IBM_PAIRING = {
    "0000:a4:00.0": "mlx5_7",
    "0000:ae:00.0": "mlx5_6",
    "0000:b8:00.0": "mlx5_5",
    "0000:c2:00.0": "mlx5_4",
    "0000:cc:00.0": "mlx5_3",
    "0000:d6:00.0": "mlx5_2",
    "0000:e0:00.0": "mlx5_1",
    "0000:ea:00.0": "mlx5_0",
}


def test_a_published_nccl_dump_puts_each_gpu_beside_its_own_nic() -> None:
    checks = compare_with_plan(parse_topology_dump(IBM_DUMP, "dump"), planned(IBM_PAIRING))
    assert [(c.dev, c.rank, c.nccl, c.path) for c in checks][:2] == [
        (0, 0, ("mlx5_7",), "PIX"),
        (1, 1, ("mlx5_6",), "PIX"),
    ]
    assert all(check.agrees for check in checks)


def test_a_gpu_on_another_nic_than_planned_is_named_with_both() -> None:
    pairing = {**IBM_PAIRING, "0000:c2:00.0": "mlx5_5"}
    checks = compare_with_plan(parse_topology_dump(IBM_DUMP, "dump"), planned(pairing))
    wrong = [check for check in checks if not check.agrees]
    assert [check.words() for check in wrong] == [
        "GPU 3 (0000:c2:00.0): NCCL put GPU 3 on mlx5_4 (PIX), planned mlx5_5"
    ]


# Two NUMA nodes; GPU 0 and mlx5_0 share a switch; GPU 1 sits below a switch whose sibling
# switch holds mlx5_1 (PXB); the second CPU has a GPU and no NIC (its nearest is SYS).
SYNTHETIC = """<system version="1">
  <cpu numaid="0" affinity="0000ffff" arch="x86_64" vendor="GenuineIntel">
    <pci busid="0000:10:00.0" class="0x060400" link_speed="32.0 GT/s PCIe" link_width="16">
      <pci busid="0000:11:00.0" class="0x030200" link_speed="32.0 GT/s PCIe" link_width="16">
        <gpu dev="0" sm="90" rank="0" gdr="1"/>
      </pci>
      <pci busid="0000:12:00.0" class="0x020700" link_speed="32.0 GT/s PCIe" link_width="16">
        <nic>
          <net name="mlx5_0" dev="0" speed="400000" port="1" guid="0x1" gdr="1"/>
        </nic>
      </pci>
    </pci>
    <pci busid="0000:20:00.0" class="0x060400" link_speed="32.0 GT/s PCIe" link_width="16">
      <pci busid="0000:21:00.0" class="0x060400" link_speed="32.0 GT/s PCIe" link_width="16">
        <pci busid="0000:22:00.0" class="0x030200" link_speed="32.0 GT/s PCIe" link_width="16">
          <gpu dev="1" sm="90" rank="1" gdr="1"/>
        </pci>
      </pci>
      <pci busid="0000:23:00.0" class="0x060400" link_speed="32.0 GT/s PCIe" link_width="16">
        <pci busid="0000:24:00.0" class="0x020700" link_speed="32.0 GT/s PCIe" link_width="16">
          <nic>
            <net name="mlx5_1" dev="1" speed="400000" port="1" guid="0x2" gdr="1"/>
          </nic>
        </pci>
      </pci>
    </pci>
  </cpu>
  <cpu numaid="1" affinity="ffff0000" arch="x86_64" vendor="GenuineIntel">
    <pci busid="0000:90:00.0" class="0x030200" link_speed="32.0 GT/s PCIe" link_width="16">
      <gpu dev="2" sm="90" rank="2" gdr="1"/>
    </pci>
  </cpu>
</system>
"""


def test_nccls_path_types_follow_its_tree() -> None:
    topology = parse_topology_dump(SYNTHETIC, "dump")
    paths = {gpu.dev: topology.nearest(gpu) for gpu in topology.gpus}
    assert paths == {
        0: ("PIX", ("mlx5_0",)),
        1: ("PXB", ("mlx5_1",)),
        2: ("SYS", ("mlx5_0", "mlx5_1")),
    }


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("<system version='1'><cpu numaid='0'>", "not NCCL's topology XML"),
        ("<graphs version='1'/>", "is not NCCL's <system>"),
        ('<!DOCTYPE x [<!ENTITY a "b">]><system/>', "declares entities"),
    ],
)
def test_an_unreadable_dump_is_an_input_error(text: str, words: str) -> None:
    with pytest.raises(InputError, match=words):
        parse_topology_dump(text, "dump")


def test_a_pods_view_prints_its_verdict_per_gpu() -> None:
    report = json.dumps({"fabric": {"pairs": planned({**IBM_PAIRING, "0000:c2:00.0": "mlx5_5"})}})
    views = [
        nccl_view("job-worker-0", "0", report, IBM_DUMP),
        nccl_view("job-worker-1", "1", report, "<system version='1'>"),
    ]
    buffer = io.StringIO()
    print_nccl_views(views, Console(file=buffer, width=200, no_color=True))
    text = buffer.getvalue()
    assert "rank 0 job-worker-0: differs" in text
    assert "NCCL put GPU 3 on mlx5_4 (PIX), planned mlx5_5" in text
    assert "rank 1 job-worker-1: not checked: /tpfabric/nccl-topo-dump.xml: not NCCL's" in text
    assert views[0].document()["gpus"][3]["agrees"] is False
