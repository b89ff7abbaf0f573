"""irflow online stage: what users' behaviour says about two systems, and what an offline set can detect.

Analysis of an online A/B test at its randomisation unit (delta-method intervals, sample-ratio
mismatch, always-valid sequential p-values), team-draft interleaving of two systems' rankings with
simulated or logged clicks, and the statistical power of an offline evaluation set.
"""

from __future__ import annotations

__all__: list[str] = []
