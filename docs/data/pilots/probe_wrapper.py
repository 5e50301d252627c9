"""The reference-work pilot of 2026-11-25 (docs/costmodel.md, "What did not narrow sFlow's
interval"): ``cosample`` with a paced reference process beside the calibration, outside the
accounting cgroup, whose threads' CPU time per phase is recorded as the role ``probe``
(``cpu_probe``): 2,000 chunks of fixed pure-Python work per second, so its cost per chunk
follows the machine's speed and not the forwarding. Not part of the package; kept so the pilot
can be rerun:

    flock /tmp/cosample-ovs.lock .venv/bin/python docs/data/pilots/probe_wrapper.py calibrate \\
        --testbed --prefix pp --method cpu --mechanisms sflow --repetitions 6 --warmup 3 \\
        --seed 1 --no-progress -d sflow-probe.csv -o sflow-probe.json
"""

import subprocess
import sys
import time


def probe(rate: float = 2000.0, work: int = 150) -> None:
    start, k = time.monotonic(), 0
    while True:
        s = 0
        for i in range(work):
            s += i * i
        k += 1
        delay = start + k / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)


if __name__ == "__main__" and sys.argv[1:] == ["--probe"]:
    probe()
elif __name__ == "__main__":
    from cosample.costmodel import accounting

    enter, leave = accounting.CgroupScope.__enter__, accounting.CgroupScope.__exit__

    def entered(self):
        result = enter(self)
        self._probe = subprocess.Popen([sys.executable, __file__, "--probe"])
        self._accounting.role_pids["probe"] = self._probe.pid
        return result

    def left(self, *exc_info):
        self._probe.terminate()
        self._probe.wait(5)
        return leave(self, *exc_info)

    accounting.CgroupScope.__enter__, accounting.CgroupScope.__exit__ = entered, left
    from cosample.cli import main

    sys.exit(main(sys.argv[1:]))
