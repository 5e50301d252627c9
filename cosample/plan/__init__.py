"""The plan's home: its format names, schema and reader, transitions, signing, fetching and
selection, shared by the planner (which writes plans), the agents (which apply them), the
collector and the controller (which read them). Import-light: no numpy, no solvers."""
