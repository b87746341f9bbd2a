"""The training objectives, each declared once without importing torch: `Objective` (its name, its summary, whether
it reads `pretrain.selfish.margin`, the fused head's kernel it trains its own tokens with, whether the source model
teaches it and with what fixed weight, and a lazy reference to its loss on logits in vocabtransfer.model.losses)
and `OBJECTIVES`, their registry, in the order the schema and the report list them.

Every list of objective names is derived from it: `OBJECTIVE_NAMES` (the schema's `pretrain.objectives` choices and
the objective in the `pretrain.pairs` pattern, plan/pretrain_params.py; the `objective` wildcard), `TEACHER_OBJECTIVES`
(the runs that read the source model as a teacher and that the rate tuning leaves out), `KERNELS` (the objectives
the fused head computes, model/fused_head.py) and the report's order (report/read.py). Adding an objective is its
entry here, with its loss on logits (in model/losses.py) where it needs one of its own, plus its subsection of
`pretrain` when it has options; the names are read as this module is imported (the schema is generated from them),
so an objective is declared here, not registered at run time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from vocabtransfer.registry import Registry, reference_parts, resolve


@dataclass(frozen=True)
class Objective:
    """A training objective: its loss on logits (N, V) (`on_logits`, its `loss` reference resolved); on hidden states
    through a linear head it is `fused_head.linear_objective_loss(..., objective=<its kernel>)`."""

    name: str
    summary: str
    # its loss on logits, `"vocabtransfer.model.losses:<function>"`: (logits, labels, *, margin, ignore_index,
    # reduction) -> loss; imported when a loss is first computed (the model layer's, with torch)
    loss: str
    uses_margin: bool = False  # it reads pretrain.selfish.margin
    kernel: str = "standard"  # the fused head's objective for one model's own tokens: an objective that is its own
    teacher: bool = False  # trained against the source model as a teacher (train/distill.py); causal LMs only
    alpha: float | None = None  # a teacher objective's fixed weight of the chunk term (None: pretrain.distill.alpha)

    def on_logits(self, *args: Any, **kwargs: Any) -> Any:
        """Its loss on logits: the function `loss` names (vocabtransfer.model.losses), called with these arguments."""
        function: Callable[..., Any] = resolve(self.loss)
        return function(*args, **kwargs)


def _fault(objective: Any) -> str | None:
    """Why `objective` cannot join the registry (None: it can)."""
    if not isinstance(objective, Objective):
        return "an objective is an Objective"
    if not all(reference_parts(objective.loss)):
        return f"its loss {objective.loss!r} is no 'package.module:function' reference"
    own = objective.kernel == objective.name
    if not own and (objective.kernel not in OBJECTIVES or OBJECTIVES[objective.kernel].kernel != objective.kernel):
        return f"its kernel {objective.kernel!r} is no objective declared before it that is its own kernel"
    return None


OBJECTIVES: Registry[Objective] = Registry("objective", check=_fault)
for _objective in (
    Objective(
        "standard",
        "softmax cross-entropy over the whole vocabulary",
        "vocabtransfer.model.losses:standard_loss",
    ),
    Objective(
        "selfish",
        "cross-entropy over the tokens at most `margin` below the target's logit",
        "vocabtransfer.model.losses:selfish_loss",
        uses_margin=True,
        kernel="selfish",
    ),
    # on one model's logits (the analyses, which have no teacher) distill is its LM part: cross-entropy
    Objective(
        "distill",
        "alpha x chunk-likelihood matching to the source model through its own tokenizer + (1 - alpha) x cross-entropy",
        "vocabtransfer.model.losses:standard_loss",
        teacher=True,
    ),
    # distill's chunk term alone (alpha = 1): tokenkit's pure ALM, the student's own tokens get no cross-entropy
    Objective(
        "alm",
        "chunk-likelihood matching to the source model through its own tokenizer alone (distill at alpha = 1)",
        "vocabtransfer.model.losses:standard_loss",
        teacher=True,
        alpha=1.0,
    ),
):
    OBJECTIVES.register(_objective.name)(_objective)

# the names, in the registry's order
OBJECTIVE_NAMES: tuple[str, ...] = tuple(OBJECTIVES)
# the objectives trained against the source model as a teacher: their pretrain jobs read it, rate tuning skips them
TEACHER_OBJECTIVES: tuple[str, ...] = tuple(name for name, o in OBJECTIVES.items() if o.teacher)
# the objectives that read pretrain.selfish.margin (its subsection's rerun keys are theirs)
MARGIN_OBJECTIVES: tuple[str, ...] = tuple(name for name, o in OBJECTIVES.items() if o.uses_margin)
# the fused head's objectives (its kernels): those that are their own kernel
KERNELS: tuple[str, ...] = tuple(name for name, o in OBJECTIVES.items() if o.kernel == name)
