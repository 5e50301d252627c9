"""The pinning pilot of 2026-11-25 (docs/costmodel.md, "What did not narrow sFlow's interval"):
``cosample`` with ovs-vswitchd's threads pinned to CPU 0 and every iperf3 end to CPU 1 when
PIN=1, unchanged otherwise. Not part of the package; kept so the pilot can be rerun:

    PIN=1 flock /tmp/cosample-ovs.lock .venv/bin/python docs/data/pilots/pin_wrapper.py calibrate \
        --testbed --prefix pp --method cpu --mechanisms sflow --repetitions 6 --warmup 3 \
        --seed 41 --no-progress -d pin1-s41.csv -o pin1-s41.json
"""

import os
import sys

from cosample.costmodel import accounting

_enter, _adopt = accounting.CgroupScope.__enter__, accounting.CgroupScope.adopt
PIN = os.environ.get("PIN") == "1"


def pin_all(pid, cpus):
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            os.sched_setaffinity(int(tid), cpus)
        except OSError:
            pass


def enter(self):
    r = _enter(self)
    if PIN:
        pin_all(self.ovs_pid, {0})
    return r


def adopt(self, pid, role=None):
    _adopt(self, pid, role)
    if PIN:
        pin_all(pid, {1})


accounting.CgroupScope.__enter__, accounting.CgroupScope.adopt = enter, adopt
from cosample.cli import main

sys.exit(main(sys.argv[1:]))
