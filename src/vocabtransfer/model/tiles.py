"""Column ranges of the vocabulary tiles that hold a kept logit: the fused head's CPU pass
(`fused_head.chunked_pass`) and its Triton pass (`fused_head_triton.fused_pass`) both skip the
columns of the tiles where the selfish objective keeps nothing in a chunk of rows."""

from __future__ import annotations


def kept_runs(alive: list, tile: int, vocab: int) -> list[tuple[int, int]]:
    """Merged column ranges [start, end) of the tiles flagged in `alive` (tile t covers columns
    t·tile … (t+1)·tile − 1, the last one cut at `vocab`); all columns when at least three quarters of
    the tiles are flagged, where skipping the others saves less than the extra products cost."""
    if sum(bool(a) for a in alive) * 4 >= 3 * len(alive):
        return [(0, vocab)]
    out: list[tuple[int, int]] = []
    for t, on in enumerate(alive):
        start, end = t * tile, min(vocab, (t + 1) * tile)
        if on and out and out[-1][1] == start:
            out[-1] = (out[-1][0], end)
        elif on:
            out.append((start, end))
    return out
