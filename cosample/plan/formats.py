"""The plan file's identity, defined once: written by ``planner.planfile``, checked by the agents.

Import-light (no numpy), so the agents on production hosts can import it without the solvers.
The format is documented in docs/formats.md; a reader refuses any other name or version.
"""

#: ``format`` of a plan file (``cosample plan -o``).
PLAN_FORMAT = "cosample.plan"
#: ``format`` of a plan set, two plans for a two-phase change (``cosample agent transition``).
PLANSET_FORMAT = "cosample.planset"
#: ``format`` of a plan's per-host report in columns (``planfile.host_report``: the controller's
#: plans carry only the fields agents read).
REPORT_FORMAT = "cosample.plan-report"
#: ``format_version`` of all of them; raise it when a reader of the old version would misread a file.
FORMAT_VERSION = 1
#: ``format`` of a per-host plan slice (``hosts/<name>`` beside the plan, cosample.plan.slices)
#: and of the signed head every slice of one publication carries.
SLICE_FORMAT, SLICE_HEAD_FORMAT = "cosample.slice", "cosample.slicehead"
#: The agents' safe state without a plan in force: local sFlow at 1-in-``SAFE_SAMPLING``, no
#: mirrors (the agents' ``safe_sampling`` default; the collector's ``--safe-sampling`` default:
#: the only 1-in-N it weighs then, docs/collector.md "What a sender may declare").
SAFE_SAMPLING = 4096
