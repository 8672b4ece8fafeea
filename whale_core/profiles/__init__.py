"""Run profiles shipped with WHALE: complete ``whale run --config`` files for a named model and task, each sized to
finish on a 2-core CPU in about an hour (docs/real-model.md has how each was sized and what it measured)."""
