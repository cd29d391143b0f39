"""The scheduler as a service: ``hadar serve`` and its client.

The runtime's engine, policies and Ray executor, fed by jobs submitted over
an HTTP API while it runs (``api``), recorded in SQLite under the state
directory (``store``, ``record``) so that a restart resumes every job, with
a live dashboard served by the same server (``dashboard/``). Needs the
``runtime`` and ``service`` extras; the client (``client``) needs neither.
"""
