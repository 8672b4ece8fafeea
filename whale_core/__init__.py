"""WHALE: joint optimization of an LLM's weights and its harness by alternating block ascent.

`whale_core` is the plain library (no Prefect import). `flows/` and `tasks/` wire it into Prefect.
"""

__version__ = "0.1.0"
