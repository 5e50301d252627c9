"""Wire a ``Calibrator`` to real things: sFlow on the bridge with a counting collector, tc
mirrors, an iperf3 server and client on the endpoints, port counters, and (cpu method) the
accounting scope every iperf3 process joins. Everything started here stops at the end, also on
error and Ctrl-C."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import ExitStack
from typing import Any

import pandas as pd

from cosample.costmodel.accounting import started_pid
from cosample.costmodel.adaptive import AdaptiveRun
from cosample.costmodel.counters import device_packets, device_tx_packets, parse_port_stats
from cosample.costmodel.errors import HarnessError
from cosample.costmodel.flowgen import FlowgenClient, FlowSink
from cosample.costmodel.harness import Calibrator
from cosample.costmodel.iperf import IperfClient, IperfServer
from cosample.costmodel.localsample import CaptureReader, IpfixCounter, OvsSampleAction
from cosample.costmodel.mechanisms import MIRROR_PRIO, Mechanism, SflowSampling, TcMirror
from cosample.costmodel.trials import CalibrationSettings
from cosample.lab.sflow import SflowCollector


def iperf_client(
    exec_prefix: Sequence[str], protocol: str
) -> Callable[[Sequence[str], float], Any]:
    """The ``client`` callable for ``Calibrator``: iperf3 started through an endpoint's prefix."""

    def client(argv: Sequence[str], duration_s: float) -> IperfClient:
        return IperfClient(exec_prefix, argv, protocol, duration_s)

    return client


def flowgen_client(exec_prefix: Sequence[str]) -> Callable[[Sequence[str], float], Any]:
    """The ``client`` callable for a load of many or short flows (``costmodel.flowgen``)."""

    def client(argv: Sequence[str], duration_s: float) -> FlowgenClient:
        return FlowgenClient(exec_prefix, argv, duration_s)

    return client


def run_calibration(
    endpoints,
    ovs,
    settings: CalibrationSettings,
    show_progress: bool = True,
    scope=None,
    target=None,
    covariates=None,
) -> tuple[pd.DataFrame, dict]:
    """Wire a ``Calibrator`` to real things: an sFlow counter on 127.0.0.1, the tc mirror,
    an iperf3 server on the receiver, OVS port statistics; everything stops at the end.

    ``endpoints`` is a ``testbed.Endpoints``; ``ovs`` offers ``vsctl(*args)`` and ``ofctl(*args)``;
    ``scope`` (an ``accounting.AccountingScope``) counts the CPU time of the forwarding, required
    by the cpu method; ``target`` (an ``adaptive.Target``) measures until intervals are narrow
    instead of a fixed grid, deciding with ``covariates`` (mechanism -> name, see ``ancova``).
    Returns the rows and what the run adds to the metadata.
    """
    if settings.method == "cpu" and scope is None:
        raise HarnessError(
            "the cpu method needs to know whose CPU time to count: use --testbed, "
            "or name the cgroups of ovs-vswitchd and the VMs with --account-cgroup"
        )
    with ExitStack() as stack:
        mechanisms: dict[str, Mechanism] = {}
        copies: dict[str, Callable[[], int]] = {}
        if "sflow" in settings.mechanisms:
            # counting only: decoding every header in Python would steal the CPU being measured
            counter = stack.enter_context(SflowCollector(decode=False, receive_buffer=4 << 20))
            mechanisms["sflow"] = SflowSampling(ovs.vsctl, endpoints.bridge, counter.target)
            copies["sflow"] = lambda: counter.sample_count
        if "mirror" in settings.mechanisms:
            mechanisms["mirror"] = TcMirror(endpoints.sender_port, endpoints.mirror_target)
            copies["mirror"] = lambda: device_tx_packets(endpoints.mirror_target)
        if "mirror_vxlan" in settings.mechanisms:
            tunnel = endpoints.tunnel_target
            if not tunnel:
                raise HarnessError(
                    "mirror_vxlan needs a VXLAN device to mirror into "
                    "(--tunnel-target, or --testbed which builds one)"
                )
            mechanisms["mirror_vxlan"] = TcMirror(
                endpoints.sender_port, tunnel, prio=MIRROR_PRIO + 1, name="mirror_vxlan"
            )
            copies["mirror_vxlan"] = lambda: device_tx_packets(tunnel)
        _local_samplers(stack, settings, endpoints, ovs, mechanisms, copies)
        if scope is not None:
            stack.enter_context(scope)
        if "tc_sample" in mechanisms:
            reader = stack.enter_context(CaptureReader(endpoints.mirror_target))
            if scope is not None:
                scope.adopt(started_pid(reader.process))
        if settings.flows:
            # the sink holds the port for at most 3 times the campaign's estimate (then exits)
            server: FlowSink | IperfServer = stack.enter_context(
                FlowSink(endpoints.receiver_exec, settings.port + 1, 3 * settings.estimated_s + 600)
            )
            client = flowgen_client(endpoints.sender_exec)
        else:
            server = stack.enter_context(IperfServer(endpoints.receiver_exec, settings.port))
            client = iperf_client(endpoints.sender_exec, settings.protocol)
        if scope is not None:
            scope.adopt(started_pid(server.process), "receiver")
            client = _adopting(client, scope)

        def port_stats(port: str) -> tuple[int, int]:
            local = device_packets(port)  # the port's kernel device, when it is one of ours here
            if local is not None:
                return local
            return parse_port_stats(ovs.ofctl("dump-ports", endpoints.bridge, port))

        calibrator = Calibrator(
            settings,
            mechanisms,
            port_stats,
            copies,
            client,
            endpoints.receiver_ip,
            endpoints.sender_port,
            endpoints.receiver_port,
            accounting=scope.snapshot if scope is not None else None,
            budget_cpus=scope.budget_cpus if scope is not None else 1.0,
        )
        extra = {} if scope is None else scope.describe()
        if target is None:
            data = calibrator.run(show_progress)
            return data, {**extra, **_remeasured(calibrator)}
        adaptive = AdaptiveRun(calibrator, target, covariates=covariates)
        data = adaptive.run(show_progress)
        return data, {**extra, **adaptive.summary(), **_remeasured(calibrator)}


def _remeasured(calibrator: Calibrator) -> dict[str, int]:
    """What the paired runs measured again, and what they never measured (``measure_paired``)."""
    return {
        "empty_phases": calibrator.empty_phases,
        "restarted_loads": calibrator.restarted_loads,
        "unmeasured_phases": calibrator.unmeasured_phases,
    }


def _local_samplers(
    stack,
    settings: CalibrationSettings,
    endpoints,
    ovs,
    mechanisms: dict[str, Mechanism],
    copies: dict[str, Callable[[], int]],
) -> None:
    """The local samplers at any probability (``costmodel.localsample``): the OpenFlow
    ``sample`` action with IPFIX to a counter (without and with the exporter's cache), and the
    tc mirror into the local mirror target that a capture process reads (``tc_sample``; the
    reader joins the accounting scope, as an exporter would run on the host)."""
    for name, cached in (("sample_action", False), ("sample_action_cached", True)):
        if name in settings.mechanisms:
            counter = stack.enter_context(IpfixCounter())
            mechanisms[name] = OvsSampleAction(
                ovs.vsctl,
                ovs.ofctl,
                endpoints.bridge,
                endpoints.sender_port,
                counter.target,
                cached,
                settings.ipfix_cache_flows,
                settings.ipfix_active_timeout_s,
            )
            copies[name] = _messages_of(counter)
    if "tc_sample" in settings.mechanisms:
        mechanisms["tc_sample"] = TcMirror(
            endpoints.sender_port, endpoints.mirror_target, prio=MIRROR_PRIO + 2, name="tc_sample"
        )
        copies["tc_sample"] = lambda: device_tx_packets(endpoints.mirror_target)


def _messages_of(counter: IpfixCounter) -> Callable[[], int]:
    """The count of IPFIX data messages ``counter`` has received, read when called."""
    return lambda: counter.data_messages


def _adopting(
    client: Callable[[Sequence[str], float], Any], scope
) -> Callable[[Sequence[str], float], Any]:
    """A client whose process joins the accounting scope as soon as it starts (its first
    packets, before the harness starts counting, are the only work outside)."""

    def start(argv: Sequence[str], duration_s: float) -> Any:
        run = client(argv, duration_s)
        scope.adopt(run.process.pid, "sender")
        return run

    return start
