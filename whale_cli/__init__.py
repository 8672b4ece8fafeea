"""The ``whale`` command line, above the library and the flows: `whale_cli.app` registers one module per command.

Single legs (no orchestration): ``whale eval``, ``whale train`` (a weights leg), ``whale search`` (a harness leg).
Whole runs through Prefect + MLflow: ``whale run``, ``whale resume``, ``whale rerun`` (`whale_cli.run`), ``whale
deploy``, ``whale ui``, ``whale compare``; ``whale runs`` lists the archive; ``whale config`` prints the full default
configuration that ``--config``/``--set`` change; ``whale models`` lists and installs named models. Shared options and
helpers: `whale_cli.common`. User errors are one line, ``error: <message>``, exit code 2 (`whale_cli.guard`).

Only this package imports `flows` (inside the commands that start one); `whale_core` never imports `whale_cli`.
"""
