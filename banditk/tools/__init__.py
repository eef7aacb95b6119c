"""Tools for people: the ``banditk`` command and what it runs.

- ``cli``: the ``banditk`` command (demo, prior show/validate/import/merge, fit);
- ``demo``: the governor learning K on an embedded synthetic stream;
- ``synthetic``: a telemetry stream with known truth, for the demo and the tests;
- ``report``: the posterior as a text table;
- ``soak``: a long run of the governor on a changing stream, for leaks and drift.
"""
