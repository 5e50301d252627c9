"""The idle-polling pilot of 2026-11-25 (docs/costmodel.md, "What did not narrow sFlow's
interval"): ``cosample`` holding a PM QoS CPU latency request of 0 (``/dev/cpu_dma_latency``)
when QOS=1, so idle vCPUs poll (cpuidle state POLL) instead of halting into the hypervisor;
unchanged otherwise. Not part of the package; kept so the pilot can be rerun:

    QOS=1 flock /tmp/cosample-ovs.lock .venv/bin/python docs/data/pilots/qos_wrapper.py calibrate \
        --testbed --prefix pq --method cpu --mechanisms sflow --target-ci 0.1 --max-time 120 \
        --warmup 3 --seed 301 --no-progress -d qos1-s301.csv -o qos1-s301.json
"""

import os
import struct
import sys

if os.environ.get("QOS") == "1":
    fd = os.open("/dev/cpu_dma_latency", os.O_WRONLY)
    os.write(fd, struct.pack("i", 0))
from cosample.cli import main

sys.exit(main(sys.argv[1:]))
