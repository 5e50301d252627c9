"""The plan-aware sFlow collector: turns every sample back into its origin server's traffic.

Stages joined by plain records (goflow2/pmacct style, INTCollector's split of fast and normal
paths): ``decode`` (bytes -> typed records), ``attribution`` (record -> origin server and the
probability the plan selected it), ``estimate`` (windowed Horvitz-Thompson sums and their 95 %
intervals), ``snapshot`` (the JSON the controller reads), and the effects: UDP ingest, HTTP
(metrics and snapshot), event detection and sFlow re-export. See docs/collector.md.
"""
