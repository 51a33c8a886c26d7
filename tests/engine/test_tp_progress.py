"""Progress files: a rank's position as another process reads it, and who lags behind."""

from __future__ import annotations

from twinserve.core.capture_schedule import CaptureItem
from twinserve.engine.tp.progress import Position, Progress, laggards


def test_positions_read_back_and_describe(tmp_path):
    lead, fol = Progress(str(tmp_path), 0), Progress(str(tmp_path), 1)
    assert Progress.read(str(tmp_path), 1).describe() == "startup"
    fol.capture(CaptureItem("pieces", 48))
    assert Progress.read(str(tmp_path), 1).describe() == "graph capture of pieces size 48"
    fol.enter("all-reduce")
    fol.leave()
    fol.enter("all-reduce")
    assert Progress.read(str(tmp_path), 1).describe() == "graph capture of pieces size 48, all-reduce #1 (layer 0)"
    for _ in range(2):
        lead.begin_step()
        fol.await_step()
        fol.begin_step()
    lead.enter("all-reduce")  # the embedding's
    lead.leave()
    lead.enter("all-reduce")
    p0, p1 = Progress.read(str(tmp_path), 0), Progress.read(str(tmp_path), 1)
    assert p0.describe() == "step 2, all-reduce #1 (layer 0)"
    assert p1.describe() == "step 2, forward (after 0 all-reduces)"
    assert laggards({0: p0, 1: p1}) == [1]
    fol.enter("all-reduce")
    fol.leave()
    fol.enter("all-reduce")
    assert laggards({0: Progress.read(str(tmp_path), 0), 1: Progress.read(str(tmp_path), 1)}) == []
    fol.leave()
    lead.leave()
    lead.enter("all-gather")
    assert Progress.read(str(tmp_path), 0).describe() == "step 2, all-gather #0 (the logits)"
    fol.await_step()
    assert Progress.read(str(tmp_path), 1).describe() == "step 3, waiting for the step's broadcast from rank 0"
    assert lead.collectives() == (2, 1)


def test_a_rank_that_never_reported_lags():
    assert laggards({0: Position(1, 3, "all-reduce"), 1: None}) == [1]
    assert Progress.read("/nonexistent-dir", 3) is None
