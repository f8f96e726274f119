"""How winsim reads an install_boot_task block (boot.py), checked against
the blocks kwinctl renders today: its pinned scripts in tests/cli/snapshots
(root-free). The l2bridge block stops the running instance, ends an older
one's powershell.exe, starts the new one, and its loop repairs only its own
route in both stores; the transparent one stops but starts nothing, and its
script has no loop."""

import json
from pathlib import Path

import pytest

from winsim import boot
from winsim.host import HEADER

SNAPSHOTS = Path(__file__).resolve().parents[2] / "tests" / "cli" / "snapshots"


def boot_block(snapshot):
    """The header and block of the install_boot_task action in a pinned script."""
    text = (SNAPSHOTS / snapshot).read_text()
    headers, block = [], []
    for line in text.splitlines():
        if line.startswith(HEADER):
            if headers:
                headers[-1]["_block"] = "\n".join(block)
            headers.append(json.loads(line[len(HEADER):]))
            block = []
        else:
            block.append(line)
    if headers:
        headers[-1]["_block"] = "\n".join(block)
    return next(h for h in headers if h.get("kind") == "install_boot_task")


def test_l2bridge_install_stops_ends_and_starts():
    h = boot_block("cli__powershell__l2bridge_inventory.snap")
    assert boot.stops_registered(h)
    assert boot.kills_script_processes(h)
    assert boot.starts_registered(h)
    assert boot.script_of(h) == {"loops": True, "route_scoped": True,
                                 "route_stores": ["ActiveStore", "PersistentStore"]}


def test_transparent_install_stops_but_starts_nothing_and_does_not_loop():
    h = boot_block("cli__powershell__seed_inventory.snap")
    assert boot.stops_registered(h)
    # (its script starts wrapper tasks with Start-ScheduledTask: inside the
    # quoted script, not a statement of the block)
    assert not boot.starts_registered(h)
    assert not boot.script_of(h)["loops"]


@pytest.mark.parametrize("block,stops,starts", [
    ("Unregister-ScheduledTask -TaskName $n\nRegister-ScheduledTask -TaskName $n", False, False),
    ("Unregister-ScheduledTask -TaskName $n\nStop-ScheduledTask -TaskName $n\nRegister-ScheduledTask", False, False),
    ("Stop-ScheduledTask -TaskName $n\nUnregister-ScheduledTask\nRegister-ScheduledTask\nStart-ScheduledTask",
     True, True),
    ("Start-ScheduledTask -TaskName $n\nRegister-ScheduledTask -TaskName $n", False, False),
    ("Set-Content -Value 'Stop-ScheduledTask x\nStart-ScheduledTask y'\nRegister-ScheduledTask", False, False),
])
def test_order_of_the_blocks_statements(block, stops, starts):
    h = {"_block": block}
    assert boot.stops_registered(h) is stops
    assert boot.starts_registered(h) is starts


def test_old_route_repair_is_unscoped_and_active_only():
    h = {"_block": "Set-Content -Value '\n    Remove-NetRoute -AddressFamily IPv4 -DestinationPrefix ''10.0.0.0/24'' "
                   "-Confirm:$false\nwhile ($true) {\n}'"}
    assert boot.script_of(h) == {"loops": True, "route_scoped": False, "route_stores": ["ActiveStore"]}


def test_loop_seconds_knob():
    assert boot.loop_seconds({}) == 10
    assert boot.loop_seconds({"boot_loop_seconds": 1}) == 1
    assert boot.loop_seconds({"boot_loop_seconds": 0}) == 0.2
    assert boot.loop_seconds({"boot_loop_seconds": "x"}) == 10
