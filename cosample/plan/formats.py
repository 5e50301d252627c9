"""The plan file's identity, defined once: written by ``planner.planfile``, checked by the agents;
and how large a plan document its readers accept by default.

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

#: The agents' default limit on a fetched plan document (``max_plan_mib``): above a 10^5-server
#: two-phase plan set (about 100 MB) with room; the controller warns when it publishes more.
DEFAULT_MAX_PLAN_MIB = 256
#: The largest plan document ``collector run`` reads by default (``--max-plan-mib``), above the
#: agents' 256 MiB: the collector keeps the whole plan, which agents fetching slices do not; a
#: 10^6-server two-phase plan set is about 340 MB, and a collector that refused it would go on
#: attributing samples by the plan before after the agents moved. The controller warns when it
#: publishes more (``controller.publish.oversized``).
COLLECTOR_MAX_PLAN_MIB = 1024
