"""Two initialisations compared directly, not each against random: `omp − focus`, paired.

`method − random` says that each of two methods beats random; it does not say which of the two is
better, and the difference of two intervals is not the interval of the difference. The rows here pair
the two methods on the same clusters and seeds as the `− random` rows do (`Settings.bootstrap(a, b)`:
b − a), with the same nested interval and the Holm correction over this family:

* bits per byte of the valid lines, right after initialisation (`init`) and after pretraining with each
  objective both methods ran (`tables.bpb_runs`, clusters = lines);
* the valid loss after pretraining with each objective both ran (`tables.loss_runs`).

Negative: the first method needs fewer bits per byte (a lower loss) than the second.
"""

from __future__ import annotations

from vocabtransfer.report.tables import (
    OBJECTIVE_ORDER,
    Family,
    Row,
    _corrected,
    _objectives,
    bpb_runs,
    loss_runs,
)

PAIRS = (("omp", "focus"),)  # (first, second): rows read first − second
TITLE = "Head to head"  # the family's title starts so (the verdict finds it by it)


def head_to_head(lang, settings, first: str, second: str) -> Family | None:
    """The `first − second` rows of the module docstring; None where the two never ran side by side."""
    rows = []
    df = lang.bits_per_byte
    if df is not None and len(df):
        present = set(df["objective"])
        for objective in [o for o in OBJECTIVE_ORDER if o in present] + sorted(present - set(OBJECTIVE_ORDER)):
            a, b = bpb_runs(lang, second, objective), bpb_runs(lang, first, objective)
            if a is not None and b is not None:
                rows.append(
                    Row(
                        f"{first} − {second} ({objective})",
                        "bits per byte",
                        settings.bootstrap(a, b),
                        lower_is_better=True,
                    )
                )
    pretrained = {(m, o) for m, o, _ in lang.curves}
    for objective in _objectives(lang):
        if {(first, objective), (second, objective)} <= pretrained:
            a, b = loss_runs(lang, second, objective), loss_runs(lang, first, objective)
            if a is not None and b is not None:
                rows.append(
                    Row(
                        f"{first} − {second} ({objective})",
                        "valid loss",
                        settings.bootstrap(a, b),
                        lower_is_better=True,
                    )
                )
    if not rows:
        return None
    return Family(
        f"{TITLE}: {first} − {second}",
        f"Paired on the same lines (bits per byte) or clusters (valid loss) and seeds. Negative: {first} "
        f"needs fewer bits per byte / ends with a lower valid loss than {second} (better).",
        _corrected(rows, settings),
    )


def families(lang, settings) -> list[Family]:
    """`head_to_head` of every pair in PAIRS that ran."""
    return [f for f in (head_to_head(lang, settings, a, b) for a, b in PAIRS) if f is not None]
