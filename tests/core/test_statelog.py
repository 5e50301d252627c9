"""Daemons log a problem once, when it appears, and once when it is gone (cosample/statelog.py);
the controller's and the agent's loops use it, so a state lasting an hour is one line."""

from __future__ import annotations

import logging

from cosample.statelog import StateLog, problem_key


def test_each_problem_once_and_its_end(caplog):
    log = StateLog(logging.getLogger("test.statelog"))
    with caplog.at_level(logging.INFO, logger="test.statelog"):
        for age in (95, 125, 155):  # the same staleness, its age growing: one line
            log.update([f"http://c1:9478: snapshot is {age} s old (limit 90 s); collector stale"])
        log.update(["http://c1:9478: signature does not verify"])  # a new state: a new line
        log.update([])
    lines = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert lines == [
        ("WARNING", "http://c1:9478: snapshot is 95 s old (limit 90 s); collector stale"),
        ("WARNING", "http://c1:9478: signature does not verify"),
        ("INFO", "resolved: http://c1:9478: snapshot is 95 s old (limit 90 s); collector stale"),
        ("INFO", "resolved: http://c1:9478: signature does not verify"),
    ]


def test_amounts_alone_do_not_make_a_new_problem():
    assert problem_key("waited 30 s of 60.5s, 1e+09 pps") == problem_key("waited 90 s of 7s, 3 pps")
    # but who and what do: servers, collectors' addresses, versions, kinds of failure
    for one, other in (
        ("s1: measured 5 pps", "s2: measured 5 pps"),
        ("http://192.0.2.10:9478: cannot fetch", "http://192.0.2.11:9478: cannot fetch"),
        ("plan version 7: signature does not verify", "plan version 8: signature does not verify"),
        ("cannot fetch", "not found"),
    ):
        assert problem_key(one) != problem_key(other), (one, other)
