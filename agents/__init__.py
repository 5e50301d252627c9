"""Agents: apply each host's part of a cosample plan to Open vSwitch and keep it there.

Core (pure): ``plan.parse_plan`` validates a plan, ``desired.desired_state`` says what the host
must look like, ``reconcile.reconcile`` turns desired vs observed state into ordered
``commands``. Edges: ``host.LinuxOvsHost`` observes and applies on a real host,
``fakehost.FakeHost`` does the same in memory for tests, ``runner.Agent`` schedules it all.
"""
