"""`fvt_prior`: FVT's rows, bit for bit, and the train split's unigram log-probabilities, which the init stage adds
to the output bias with a fitted weight (vocabtransfer.init.output_bias: the control for what a learned initialisation
may have learned from token frequencies alone)."""

from __future__ import annotations

from vocabtransfer.data.token_ids import unigram_counts
from vocabtransfer.init import output_bias
from vocabtransfer.init.methods.fvt import fvt
from vocabtransfer.plan.method_options import FvtOptions, FvtPriorOptions
from vocabtransfer.init.methods.registry import TransferProblem, TransferResult, register


@register("fvt_prior")
def fvt_prior(problem: TransferProblem, options: FvtPriorOptions) -> TransferResult:
    result = fvt(problem, FvtOptions())
    counts = unigram_counts(problem.resources["prior_ids"], problem.target_tokenizer)
    result.output_prior = output_bias.log_unigram(counts)
    result.stats = {**result.stats, "method": "fvt_prior", "prior_tokens": int(counts.sum())}
    return result
