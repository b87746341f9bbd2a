"""Stage `init`: initialise the target-vocabulary embeddings with one method and build the model.

For `--lang L --method M --pseed K` (pretraining seed K: the method draws its random rows with
`seed + 1000 (K - 1)`, see vocabtransfer.pipeline.names; a method without random rows has K = 1 only):
1. load the source model (results/source/model: with its trained LM head) and its tokenizer, the
   target tokenizer, the overlap table and the fastText auxiliary embeddings of the target tokens;
2. build a `TransferProblem` and the method's options (params `init.<base>` as the class it registers,
   e.g. `OmpOptions`; for a factorised method `base+svd` a `FactorizedOptions` with `init.svd` too) and
   run `get_method(M)(problem, options)` on the input embeddings, and again on the output embeddings
   when the source model's are untied (`TransferProblem.matrix` says which); for random / overlap with
   `scale: calibrated`, the rows they drew (`TransferResult.random_rows`) shrunk toward the source mean by the
   factor `init.calibrate` measures on the target model and the first training lines (stats.json
   `random_scale`; docs/methods.md#random); for fvt_prior, the output bias's prior weight fitted (stats.json
   `output_prior`);
3. write results/L/init/M/pseedK/ atomically: embeddings.safetensors (`input_embeddings`,
   `output_embeddings` when untied), one `<name>.safetensors` per extra tensor of the method
   (coordinates, primitives; `output_<name>` for the output pass), model/ (the source model with
   the new embeddings and the target tokenizer, loadable with AutoModelFor… alone) and stats.json
   (for a method registered `auxiliary_rows=True` — focus, ofa, omp, snmf — and its variants
   `target_rows`: how many rows came from the overlap, from fastText dictionary vectors, from
   subword vectors, and random ones; for omp in a donor's space, from the overlap and from the donor).

The LM head's output bias (BERT `cls.predictions.bias`) is indexed by token id, so it is moved like the embeddings:
the source bias copied for target tokens that overlap a source token, the mean source bias for every other (neither
favoured nor penalised on average); fvt_prior then adds its fitted unigram prior (vocabtransfer.init.output_bias).
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from vocabtransfer import io
from vocabtransfer.init import output_bias
from vocabtransfer.model import modeling
from vocabtransfer.model.hub import load_tokenizer
from vocabtransfer.model.lmdata import Kind
from vocabtransfer.errors import VocabTransferError
from vocabtransfer.pipeline import names
from vocabtransfer.pipeline.paths import data_path
from vocabtransfer.pipeline.stage_spec import Context
from vocabtransfer.data.overlap import checked_pairs, overlap_pairs
from vocabtransfer.init.source_snmf import load_factors
from vocabtransfer.init.methods.registry import TransferProblem
from vocabtransfer.plan import init_plans
from vocabtransfer.plan.methods import info
from vocabtransfer.init.methods import get_method
from vocabtransfer.plan.method_options import FactorizedOptions, RandomRowsOptions
from vocabtransfer.init import calibrate
from vocabtransfer.init.moments import source_moments
from vocabtransfer.model.line_bits import valid_lines

log = logging.getLogger(__name__)

# ctx.input keys every init job has; any other input is handed to the method as a resource
# (`calibration_text`: the train split, for `init.<method>.scale: calibrated`)
CORE_INPUTS = ("source_model", "tokenizer", "overlap", "fasttext", "snmf_factors", "calibration_text")


def options_record(method: str, options: Any) -> dict:
    """The options as stats.json records them: `init.<base>` without the keys other stages read, and
    for `base+fact` the factorisation's section under `factorization`."""
    base, factorization = (options.base, options.factorization) if names.split_method(method)[1] else (options, None)
    record = {k: v for k, v in asdict(base).items() if k not in info(method).stage_options}
    if factorization is not None:
        record["factorization"] = asdict(factorization)
    return record


def read_overlap(path: Path, n_target: int, n_source: int) -> tuple[np.ndarray, np.ndarray]:
    """(target ids, source ids) of the overlapping pairs, checked against both vocabularies."""
    target, source = overlap_pairs(io.read_parquet(path, ["target_id", "source_id"]))
    return checked_pairs(target, source, n_target, n_source, where=str(path))


def read_auxiliary(path: Path, n_target: int):
    """(embeddings V x d, mask V bool, subword V bool or None) of the fasttext stage; `subword` (rows
    whose vector came from character n-grams) exists only when it ran with fasttext.oov subword."""
    tensors = io.load_tensors(path, ["embeddings", "mask"])
    emb, mask = tensors["embeddings"].float(), tensors["mask"].bool()
    subword = tensors["subword"].bool() if "subword" in tensors else None
    if emb.shape[0] != n_target or mask.shape != (n_target,):
        raise VocabTransferError(
            f"{path}: embeddings {tuple(emb.shape)} / mask {tuple(mask.shape)} do not have one row "
            f"per target token ({n_target}); rerun the fasttext stage"
        )
    if subword is not None and (subword.shape != (n_target,) or bool((subword & ~mask).any())):
        raise VocabTransferError(
            f"{path}: tensor 'subword' {tuple(subword.shape)} must be a ({n_target},) bool marking "
            "rows that have a vector (mask); delete the file and rerun the fasttext stage"
        )
    bad = mask & ~emb.isfinite().all(dim=1)
    if bool(bad.any()):
        raise VocabTransferError(
            f"{path}: the vector of target id {int(bad.nonzero()[0])} contains NaN or "
            "infinite values; delete the file and rerun the fasttext stage"
        )
    return emb, mask, subword


def target_rows(
    method: str, n_target: int, overlap_target_ids: np.ndarray, aux_mask, subword, donor: bool = False
) -> dict | None:
    """Where the target rows come from for a method registered `auxiliary_rows=True` (focus, ofa, omp,
    snmf and their factorised variants), counts that add up to n_target: `overlap` (copied source
    rows), `dictionary` / `subword` (a combination driven by a fastText dictionary / character n-gram
    vector) and `random` (no vector); with `donor` (omp_donor, in the donor's space) `overlap` and `donor`, every other
    row coded from its donor row. None for other methods.

    ofa and snmf also copy special tokens that match a source special token by role; the fasttext
    stage gives special tokens no vector, so such a token outside the overlap counts as random here.
    """
    if not info(method).auxiliary_rows:
        return None
    overlap = np.zeros(n_target, dtype=bool)
    overlap[np.asarray(overlap_target_ids, dtype=np.int64)] = True
    if donor:
        return {"overlap": int(overlap.sum()), "donor": int((~overlap).sum())}
    has = aux_mask.numpy().astype(bool) & ~overlap
    sub = subword.numpy().astype(bool) & has if subword is not None else np.zeros(n_target, dtype=bool)
    return {
        "overlap": int(overlap.sum()),
        "dictionary": int((has & ~sub).sum()),
        "subword": int(sub.sum()),
        "random": int((~overlap & ~has).sum()),
    }


def _check_result(result, method: str, shape: tuple[int, int], which: str):

    emb = getattr(result, "embeddings", None)
    if not isinstance(emb, torch.Tensor) or tuple(emb.shape) != shape:
        got = tuple(emb.shape) if isinstance(emb, torch.Tensor) else type(emb).__name__
        raise VocabTransferError(
            f"method {method!r}: returned {which} embeddings of shape {got}, expected {shape} "
            "(target vocabulary x hidden size); this is a bug in the method"
        )
    if not torch.isfinite(emb).all():
        raise VocabTransferError(
            f"method {method!r}: {which} embeddings contain NaN/Inf; this is a bug in the method "
            "or its params (init section) are degenerate"
        )
    return emb.detach().float().cpu().contiguous()


@dataclass
class InitInputs:
    """What an init job reads (step 1): the source model's embedding matrices (`output` None when tied)
    and output bias, both tokenizers, the overlap pairs and the fastText vectors of the target tokens."""

    source_dir: Path
    target_dir: Path
    kind: Kind
    source_tok: Any
    target_tok: Any
    matrices: dict
    src_bias: Any  # (V_s,) or None
    target_ids: np.ndarray
    source_ids: np.ndarray
    aux: Any
    aux_mask: Any
    subword: Any  # (V_t,) bool or None

    @property
    def untied(self) -> bool:
        return self.matrices["output"] is not None


def read_inputs(ctx: Context) -> InitInputs:
    source_dir, target_dir = Path(ctx.input["source_model"]), Path(ctx.input["tokenizer"])
    model, kind = modeling.load_source_model(source_dir)
    source_tok = load_tokenizer(source_dir)
    target_tok = load_tokenizer(target_dir)
    matrices = modeling.embedding_matrices(model, source_tok)
    src_bias = modeling.output_bias(model)
    src_bias = src_bias[: len(source_tok)].detach().clone() if src_bias is not None else None
    del model
    target_ids, source_ids = read_overlap(Path(ctx.input["overlap"]), len(target_tok), len(source_tok))
    aux, aux_mask, subword = read_auxiliary(Path(ctx.input["fasttext"]), len(target_tok))
    return InitInputs(
        source_dir,
        target_dir,
        kind,
        source_tok,
        target_tok,
        matrices,
        src_bias,
        target_ids,
        source_ids,
        aux,
        aux_mask,
        subword,
    )


def run(ctx: Context) -> None:

    start = time.perf_counter()
    method_name = ctx.method
    method = get_method(method_name)  # unknown method: the registry's error, before any loading
    pseed = int(ctx.wildcards.get("pseed", 1))
    # the init stage's job planner (availability.init_runs, through the declaration: planning, not code)
    if pseed != 1 and {"method": method_name, "pseed": str(pseed)} not in ctx.stages["init"].combos(ctx.params):
        raise VocabTransferError(
            f"init {method_name} pseed{pseed}: not a job of these params (init.methods, and "
            "pretrain.seeds for a pretrained method whose rows depend on the seed)"
        )
    seed = names.seed_value(ctx.params, pseed)  # the random rows of this pretraining seed
    torch.manual_seed(seed)

    # 1. inputs, and the method's options: params init.<base>, typed (e.g. OmpOptions)
    x = read_inputs(ctx)
    base, fact = names.split_method(method_name)
    options = ctx.params.init.options(base)
    if fact:
        options = FactorizedOptions(options, ctx.params.init.options(fact))
    snmf = {}  # the shared source_snmf factors of each matrix, checked against it and init.snmf (read once)
    if "snmf_factors" in ctx.input:
        snmf = load_factors(ctx.input["snmf_factors"], x.matrices, ctx.params.init.snmf, seed=ctx.seed)
    resources = {k: Path(v) for k, v in ctx.input.items() if k not in CORE_INPUTS}
    dictionaries = getattr(options, "dictionaries", None) or {}  # wechsel's (its data file)
    if dictionaries.get(ctx.lang):
        resources["dictionary"] = data_path(dictionaries[ctx.lang])
    problem = TransferProblem(
        source_embeddings=x.matrices["input"],
        source_tokenizer=x.source_tok,
        target_tokenizer=x.target_tok,
        overlap_target_ids=x.target_ids,
        overlap_source_ids=x.source_ids,
        auxiliary=x.aux,
        auxiliary_mask=x.aux_mask,
        seed=seed,
        device=ctx.device,
        lang=ctx.lang,
        resources=resources,
        factors={"snmf": snmf["input"]} if snmf else {},
    )
    log.info(
        "init %s/%s: %d target tokens (%d overlap, %d with fastText vectors), %d source tokens, dim %d, %s "
        "output embeddings",
        ctx.lang,
        method_name,
        len(x.target_tok),
        len(x.target_ids),
        int(x.aux_mask.sum()),
        len(x.source_tok),
        x.matrices["input"].shape[1],
        "untied" if x.untied else "tied",
    )

    # 2. the method, on the input and (untied) output embeddings: {pass: (result, its checked rows, seconds)}
    passes = {}
    for which in ("input", "output") if x.untied else ("input",):
        t = time.perf_counter()
        result = method(
            replace(
                problem,
                source_embeddings=x.matrices[which],
                matrix=which,
                factors={"snmf": snmf[which]} if snmf else {},
            ),
            options,
        )
        rows = _check_result(result, method_name, (len(x.target_tok), x.matrices[which].shape[1]), which)
        passes[which] = (result, rows, time.perf_counter() - t)

    # 2b. the drawn rows at the scale asked for (random, overlap: init.<base>.scale), measured on the model
    held = {k: str(v) for k, v in resources.items()}
    record = {"options": options_record(method_name, options), "resources": held, "pseed": pseed, "seed": seed}
    # 2c. fvt_prior's output bias, its prior's weight fitted on the model (stats.json `output_prior`)
    passes, target_model, found = drawn_scale(ctx, x, passes, options, base, seed)
    record.update(found)

    # 3. the model with the new embeddings, and the artefacts
    write_outputs(ctx, x, method_name, passes, record, start=start, target_model=target_model)


def target_bias(x: InitInputs):
    """The target model's output bias (module doc), None where the source has none."""
    if x.src_bias is None:
        return None
    return output_bias.transfer_bias(x.src_bias, len(x.target_tok), x.target_ids, x.source_ids)


def built_model(x: InitInputs, rows: dict):
    """The target model with these rows ({"input": (V, D), "output": (V, D) when untied}) and the transferred bias."""
    return modeling.build_target_model(
        x.source_dir, x.target_dir, rows["input"], rows.get("output"), bias=target_bias(x), kind=x.kind
    )


def drawn_scale(ctx: Context, x: InitInputs, passes: dict, options, base: str, seed: int):
    """Steps 2b and 2c: (passes, the target model built on the way or None, what stats.json records of it):
    random's and overlap's drawn rows at `init.<base>.scale` (`calibrated_passes`, `random_scale`); fvt_prior's
    bias fitted (vocabtransfer.init.output_bias, `output_prior`); other methods as they are."""
    if (log_prior := passes["input"][0].output_prior) is not None:
        model = built_model(x, {which: r for which, (_, r, _) in passes.items()})
        text = ctx.input["calibration_text"]
        return (
            passes,
            model,
            {"output_prior": output_bias.fit(model, x.target_tok, x.kind, text, log_prior, options, seed=seed)},
        )
    if not isinstance(options, RandomRowsOptions):
        return passes, None, {}
    if options.scale == "calibrated":
        passes, model, found = calibrated_passes(ctx, x, passes, options, base, seed)
        return passes, model, {"random_scale": found}
    return passes, None, {"random_scale": {"scale": "source", "factor": 1.0}}


def calibrated_passes(ctx: Context, x: InitInputs, passes: dict, options: RandomRowsOptions, base: str, seed: int):
    """(`passes` with the drawn rows shrunk by the measured factor, the target model built with them, the
    record for stats.json `random_scale`): `vocabtransfer.init.calibrate`, on the first
    `calibration_lines` lines of the train split."""

    masks = {}
    for which, (result, _, _) in passes.items():
        if result.random_rows is None or result.random_rows.shape != (len(x.target_tok),):
            raise VocabTransferError(
                f"init.{base}.scale: calibrated needs the method's random_rows, one bool per target token; "
                "this is a bug in the method"
            )
        masks[which] = np.asarray(result.random_rows, dtype=bool)
    rows = {which: r for which, (_, r, _) in passes.items()}
    centers = {which: source_moments(x.matrices[which].detach().to("cpu", torch.float32))[0] for which in passes}
    t = time.perf_counter()
    lines = valid_lines(ctx.input["calibration_text"], options.calibration_lines)
    model = built_model(x, rows)
    drawn = calibrate.Drawn(rows, masks, centers)
    found = calibrate.calibrate(
        model,
        x.target_tok,
        x.kind,
        lines,
        drawn,
        margin=options.calibration_margin,
        seed=seed,
        where=f"init.{base}",
    )
    new = {which: (result, drawn.at(which, found["factor"]), seconds) for which, (result, _, seconds) in passes.items()}
    record = {"scale": "calibrated", **found, "rows": int(masks["input"].sum()), "seconds": time.perf_counter() - t}
    log.info(
        "init %s/%s: drawn rows' spread x %.4g, initial loss %.3f on %d training tokens (ln V = %.3f)",
        ctx.lang,
        base,
        found["factor"],
        found["initial_loss"],
        found["tokens"],
        found["ln_vocab"],
    )
    return new, model, record


def write_outputs(
    ctx: Context,
    x: InitInputs,
    method_name: str,
    passes: dict,
    record: dict,
    *,
    start: float,
    target_model=None,
) -> None:
    """results/L/init/M/pseedK/ (module doc, step 3), written atomically; `record`: what stats.json records of the
    job beside the method's own (its options, resources, pretraining seed and seed, random_scale); `target_model`:
    the model already built with these rows (calibration's), else built here."""
    inp, out = passes["input"][1], passes["output"][1] if "output" in passes else None
    tensors = {"input_embeddings": inp, **({"output_embeddings": out} if out is not None else {})}
    extra = dict(passes["input"][0].extra)
    if "output" in passes:
        extra.update({f"output_{name}": value for name, value in passes["output"][0].extra.items()})
    n_target = len(x.target_tok)
    bias = target_bias(x)
    if target_model is None:
        target_model = modeling.build_target_model(x.source_dir, x.target_dir, inp, out, bias=bias, kind=x.kind)
    stats = {
        "lang": ctx.lang,
        "method": method_name,
        "kind": x.kind,
        "model_class": type(target_model).__name__,
        "source_model": str(x.source_dir),
        "target_tokenizer": str(x.target_dir),
        "source_vocab": len(x.source_tok),
        "target_vocab": n_target,
        "dim": int(inp.shape[1]),
        "overlap": int(len(x.target_ids)),
        "auxiliary_vectors": int(x.aux_mask.sum()),
        "auxiliary_subword_vectors": int(x.subword.sum()) if x.subword is not None else 0,
        "target_rows": target_rows(
            method_name, n_target, x.target_ids, x.aux_mask, x.subword, init_plans.in_donor_space(method_name)
        ),
        "untied_output_embeddings": x.untied,
        **record,
        "method_stats": passes["input"][0].stats,
        "output_method_stats": passes["output"][0].stats if "output" in passes else None,
        "output_bias": (
            "source bias copied for overlapping ids, mean source bias elsewhere"
            + (", plus beta x the train split's centred unigram log-probabilities" if "output_prior" in record else "")
            if bias is not None
            else None
        ),
        "extra_tensors": sorted(extra),
        "method_seconds": {which: seconds for which, (_, _, seconds) in passes.items()},
        "versions": io.versions(),
    }
    with io.atomic_output(ctx.output["init"], directory=True) as tmp:
        io.save_tensors(tensors, tmp / "embeddings.safetensors", metadata={"method": method_name, "lang": ctx.lang})
        for name, value in extra.items():
            io.save_tensors({name: value}, tmp / f"{name}.safetensors", metadata={"method": method_name})
        modeling.save_model_dir(target_model, x.target_tok, tmp / "model")
        stats["seconds"] = time.perf_counter() - start
        io.write_json(stats, tmp / "stats.json")
    log.info("init %s/%s done in %.1f s: %s", ctx.lang, method_name, stats["seconds"], ctx.output["init"])
