"""Files: priors, snapshots, traces; every write atomic, every read bounded and validated.

- ``prior``: :class:`Prior` and its drafter key;
- ``priorfile``: prior and snapshot files (read, write, merge, import);
- ``atomic``: atomic writes;
- ``trace``: the telemetry log's line format;
- ``recording``: recording a policy's steps as a trace.
"""
