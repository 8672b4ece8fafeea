"""What a run leaves behind and how it is found again.

- `archive`: the archive of a run (harness candidates, evaluations, legs) in SQLite or PostgreSQL, the source of truth;
- `lineage`: the MLflow mirror of the archive (a run per leg, harness texts, checkpoints as logged models);
- `refs`: small references to policies and harnesses that travel between orchestration steps;
- `checkpoints`: a trained policy on disk (the `Checkpoint` record written next to its adapter) and its content id;
- `db_templates`: migrated database templates a new home's databases start from.
"""
