"""Cost model: measure and fit what sampling and mirroring cost an OVS server (paper Sec. III)."""
