"""systemd's resource-control properties beyond hostagent's limits: read as systemd-run -p
reads them, shown back in systemd's words, sent as StartTransientUnit takes them."""

from __future__ import annotations

import pytest

from hostagent import resources
from hostagent.resources import ResourceProblem, Wire

G = 1 << 30


@pytest.mark.parametrize(
    ("name", "text", "wire"),
    [
        ("CPUQuota", "50%", Wire("CPUQuotaPerSecUSec", "t", 500_000, "50%")),
        ("CPUQuota", "250%", Wire("CPUQuotaPerSecUSec", "t", 2_500_000, "250%")),
        ("AllowedCPUs", "0-3,6", Wire("AllowedCPUs", "ay", bytes([0b0100_1111]), "0-3,6")),
        ("AllowedCPUs", "9 1,2", Wire("AllowedCPUs", "ay", bytes([0b110, 0b10]), "1-2,9")),
        ("AllowedMemoryNodes", "0", Wire("AllowedMemoryNodes", "ay", bytes([1]), "0")),
        ("IOWeight", "50", Wire("IOWeight", "t", 50, "50")),
        ("StartupCPUWeight", "10000", Wire("StartupCPUWeight", "t", 10000, "10000")),
        ("MemorySwapMax", "0", Wire("MemorySwapMax", "t", 0, "0")),
        ("MemoryLow", "512M", Wire("MemoryLow", "t", 512 << 20, "512M")),
        ("MemoryMin", "1000000", Wire("MemoryMin", "t", 1_000_000, "1000000")),  # kept exact
        ("MemorySwapMax", "50%", Wire("MemorySwapMax", "t", 2 * G, "50%")),
        ("MemorySwapMax", "infinity", Wire("MemorySwapMax", "t", (1 << 64) - 1, "infinity")),
        (
            "IOReadBandwidthMax",
            "/dev/sda 10M",
            Wire("IOReadBandwidthMax", "a(st)", [["/dev/sda", 10 << 20]], "/dev/sda 10M"),
        ),
        (
            "IODeviceWeight",
            "/dev/vdb 200",
            Wire("IODeviceWeight", "a(st)", [["/dev/vdb", 200]], "/dev/vdb 200"),
        ),
        ("ManagedOOMSwap", "kill", Wire("ManagedOOMSwap", "s", "kill", "kill")),
        ("CPUQuotaPeriodSec", "10ms", Wire("CPUQuotaPeriodUSec", "t", 10_000, "10ms")),
        ("CPUQuotaPeriodSec", "1", Wire("CPUQuotaPeriodUSec", "t", 1_000_000, "1s")),
        (
            "IODeviceLatencyTargetSec",
            "/dev/sda 25ms",
            Wire("IODeviceLatencyTargetUSec", "a(st)", [["/dev/sda", 25_000]], "/dev/sda 25ms"),
        ),
        ("TasksAccounting", "off", Wire("TasksAccounting", "b", False, "no")),
        ("CPUAccounting", "yes", Wire("CPUAccounting", "b", True, "yes")),
        ("StartupAllowedCPUs", "1", Wire("StartupAllowedCPUs", "ay", bytes([2]), "1")),
        (
            "IPAddressDeny",
            "any",
            Wire("IPAddressDeny", "a(iayu)", [[2, bytes(4), 0], [10, bytes(16), 0]], "any"),
        ),
        (
            "IPAddressAllow",
            "localhost 10.1.2.3/8",
            Wire(
                "IPAddressAllow",
                "a(iayu)",
                [
                    [2, bytes([127, 0, 0, 0]), 8],
                    [10, bytes(15) + b"\x01", 128],
                    [2, bytes([10, 0, 0, 0]), 8],
                ],
                "localhost 10.1.2.3/8",
            ),
        ),
    ],
)
def test_a_property_reads_as_systemd_reads_it(name: str, text: str, wire: Wire) -> None:
    assert resources.parse(name, text, physical=4 * G) == wire
    # shown back, it reads the same again
    assert resources.parse(name, wire.shown, physical=4 * G) == wire


@pytest.mark.parametrize(
    ("name", "text", "said"),
    [
        ("CPUQuota", "0%", "percentage"),
        ("CPUQuota", "half", "percentage"),
        ("AllowedCPUs", "3-1", "no CPUs"),
        ("AllowedCPUs", "0-99999", "no CPUs"),
        ("AllowedCPUs", "a", "numbers and ranges"),
        ("IOWeight", "0", "1 to 10000"),
        ("IOWeight", "10001", "1 to 10000"),
        ("MemoryLow", "lots", "not a size"),
        ("IOReadBandwidthMax", "10M", "a device and a value"),
        ("IOReadIOPSMax", "/dev/sda 0", "positive"),
        ("ManagedOOMSwap", "maybe", "auto or kill"),
        ("Delegate", "yes", "not a resource-control property"),
        ("CPUQuotaPeriodSec", "1h", "100ms or 1s"),
        ("MemoryAccounting", "maybe", "yes or no"),
        ("IPAddressDeny", "evil.example", "addresses such as"),
        ("IPAddressDeny", "", "addresses such as"),
    ],
)
def test_what_systemd_would_refuse_is_refused_saying_what_to_write(
    name: str, text: str, said: str
) -> None:
    with pytest.raises(ResourceProblem, match=said):
        resources.parse(name, text, physical=4 * G)


def test_a_devices_assignments_become_one_list_as_systemd_keeps_them() -> None:
    wires = resources.scope_properties(
        ["IOReadBandwidthMax=/dev/sda 1M", "CPUQuota=20%", "IOReadBandwidthMax=/dev/sdb 2M"],
        physical=4 * G,
    )
    assert [(w.name, w.value) for w in wires] == [
        ("IOReadBandwidthMax", [["/dev/sda", 1 << 20], ["/dev/sdb", 2 << 20]]),
        ("CPUQuotaPerSecUSec", 200_000),
    ]
