"""CI's sample of the crash matrix (tests/crash_matrix.py; `make crash-matrix` runs every stage): one cheap stage,
drawn from the date, killed once at a point drawn from its run time and once inside a write, on the shared
workflow run; the same command then ends with the uninterrupted run's artefacts. This module sorts first in the
workflow group, so the reference is the run as it finished."""

from __future__ import annotations

import datetime

import pytest
from conftest import WORKFLOW_GROUP

import crash_matrix

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group(WORKFLOW_GROUP)]


def test_a_stage_killed_anywhere_then_rerun_ends_with_the_uninterrupted_artefacts(workflow_run, tmp_path):
    day = datetime.datetime.now(datetime.timezone.utc).date().isoformat()
    rows = []
    for stage in crash_matrix.sample(day):
        for name, at in crash_matrix.points(workflow_run.work, stage, 1, seed=0):
            rows.append(
                crash_matrix.run_point(
                    workflow_run.work, tmp_path / "trial", workflow_run.env, stage, name, at, tries=1
                )
            )
    print(crash_matrix.table(rows))
    # the kill inside a write always lands; a drawn time point after a fast job's end is said in its note
    assert rows and all(r.ok for r in rows) and any(r.killed for r in rows), crash_matrix.table(rows)
