"""`oracle view`: a local, read-only web app over run folders, matrix outputs and reports.

It lists the runs found under the folders it is given, the trials of each run (filtered by
query parameters, so a link is shareable), one trial with everything its record holds, the
controls of each task and the reports, whose rates link to the trials behind them. Nothing is
shown before it verifies: a trial folder against its manifest, a cell archive against its
signature and every rule of the reducer, a report against its signature. Pages are rendered
from templates with autoescaping, under a content security policy that runs no script: every
byte of a record may come from the agent.
"""
