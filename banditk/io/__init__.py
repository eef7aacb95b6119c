"""Files: priors, snapshots, traces; every write atomic, every read bounded and validated.

- ``prior``: :class:`Prior` and its drafter key;
- ``priorfile``: prior files (read with a cap, validate, write); snapshots, which hold a
  governor, are :mod:`banditk.governor.snapshot`;
- ``atomic``: atomic writes;
- ``trace``: the telemetry log's line format;
- ``recording``: recording a policy's steps as a trace.
"""
