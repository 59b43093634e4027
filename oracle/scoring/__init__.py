"""Scoring: where a trial's predicates run, and the only evidence they are handed.

- `oracle.scoring.bundle`: a trial's evidence as bytes (the archive's own files), rebuilt into
  the `Evidence` a predicate reads;
- `oracle.scoring.judge`: a task's metrics as steps, each its own error boundary;
- `oracle.scoring.scorer`: the `Scorer` protocol and the in-process scorer (debugging);
- `oracle.scoring.sealed`, `oracle.scoring.worker`: the sealed scorer's processes;
- `oracle.scoring.pool`: warm scorers shared by a run, and `SealedScorer`, the default;
- `oracle.scoring.container`, `oracle.scoring.image`: the same scorer in a container of a
  Docker engine, and the image it runs, built from this machine's Python and the oracle.
"""
