"""Measuring what the runs did: comparisons, figures, robustness and the run report.

- `compare` (records in `compare_records`): the (mode x seed) plan of ``whale compare`` and its report;
- `figures`: the report's matplotlib figures;
- `robustness`: the robustness matrix (checkpoints x harnesses, test split);
- `report`: a single run's report (test scores, curves).
"""
