"""The closed loop: measure what each server carries, re-plan, publish only when it matters.

``cosample controller run`` reads an inventory (servers, bridges, tunnels, VM ports, capacities
and calibrations; no traffic), each cycle reads the collectors' snapshots, smooths the measured
traffic, plans with the exact solver, decides with a pure function whether the new plan is worth
publishing, and publishes it signed, with strictly increasing versions. See docs/controller.md.
"""
