"""`omp`: new tokens as sparse, signed combinations of overlapping tokens, found by orthogonal
matching pursuit in the auxiliary (fastText) space: tokensurgeon-style (Goddard & Fernandes Neto, 2025,
"Training-Free Tokenizer Transplantation via Orthogonal Matching Pursuit", arXiv 2506.06607), not
tokensurgeon, which codes the new tokens in a donor model's embeddings (a model already using the target
tokenizer); here the space is the fastText vectors of the small target corpus (docs/methods.md), or, method
`omp_donor`, the donor's, as tokensurgeon does (below: "In the donor's space").

1. Overlapping tokens copy their source row and new tokens without a fastText vector get FOCUS's
   random rows (`focus_embeddings` with `new_ids` = those tokens: the same rows, for the same seed,
   as `focus` gives them; params `fasttext.oov` decides which tokens have a vector).
2. Atoms: the overlapping tokens that have a fastText vector, unit-normalised (â_j); signals: the
   other new tokens' vectors, unit-normalised (x̂). Both are normalised so that the fastText norms,
   which follow frequency and whether a vector came from the dictionary or from character
   n-grams, do not scale the new rows: a new token whose vector points at an atom copies that
   atom's source row, whatever the two norms (tokensurgeon combines raw donor embeddings instead).
3. OMP for `block_size` new tokens at a time, all of them in each tensor operation (`batch_omp`,
   in float64: scikit-learn's Cholesky OMP, batched). Per step every token (a) takes the atom j
   with the largest |α_j|, α = Â r being the correlations of the atoms with its residual r (so
   k = 1 picks the nearest atom in the sense of OMP: the largest |cosine| with x̂, either sign);
   (b) grows the Cholesky factor L of the Gram matrix of its selected atoms G[I, I] by one row
   (from G[I, j] = Â_I â_j); (c) solves L Lᵀ γ_I = (Â x̂)_I: γ_I are the least-squares
   coefficients of x̂ on the selected atoms, signed and unconstrained (not a convex mix, unlike
   FOCUS). A token stops before k atoms when its largest correlation² or the new atom's squared
   distance to the span of the selected ones is below float64's epsilon (scikit-learn's rules);
   in a d-dimensional fastText space that happens at d atoms at the latest.
4. The new row is Σ_j γ_j E_src(j): the same coefficients on the source rows of the atoms
   (`OmpRows.put`). With `norm: atoms` it is then rescaled to the mean source-row norm of its atoms,
   weighted by |γ_j|: Σ_j |γ_j| ‖E_src(j)‖ / Σ_j |γ_j|. Signed least-squares coefficients are not
   bounded (with 64 atoms in a 100-dim fastText space they fit x̂ almost exactly, Σ|γ| ≈ 3 on Gemma 3),
   so the combined rows can be several times longer than any source row; where the LM head is tied to
   the embeddings, as in Gemma, such a row's logit swamps the softmax wherever the token is a candidate
   (measured on Gemma 3 → sw, 200 valid lines: 6.46 bits per byte with the raw rows, behind random's
   4.60; config/gemma.yaml). tokensurgeon applies the raw combination, the default here (`combination`).

Options (params `init.omp`, `OmpOptions` with their defaults in vocabtransfer.plan.method_options): `k`, the most atoms
per token (64: tokensurgeon's OMP default since mergekit's v2, and the setting its paper reports; the
`-k 8` before v2 was the nearest-neighbour surgeon's), at most the overlapping tokens with a vector; `block_size`
(new tokens per batch; memory and speed only); `norm` (`combination` or `atoms`, step 4).

In the donor's space (method `omp_donor`, params `init.omp_donor`, `OmpDonorOptions`: the same three; params
`tokenizer.donor_model`, the model that owns the target
tokenizer, whose embeddings stage donor writes, vocabtransfer.init.donor): overlapping tokens copy their source
row; the atoms are the donor rows of the overlapping tokens and the signals the donor rows of every other target
token, both as they are, not unit-normalised (tokensurgeon combines raw donor rows: a token whose donor row is
2 a - 0.5 b of two atoms' rows gets 2 A - 0.5 B of their source rows); steps 3-4 as above, and no row is drawn
at random (every target token has a donor row). The init stage runs the method once per source matrix
(`TransferProblem.matrix`): the source's input embeddings are coded in the donor's input space, an untied source's
output embeddings in the donor's output space where the donor's are untied too, else in its one space (a tied
donor). The stats' `residual_mean` is then relative, ‖x - Σ γ_j a_j‖ / ‖x‖; the cost is the fastText case's with
d the donor's hidden size.

Complexity, with n atoms, m tokens to combine, fastText dimension d, hidden size D and k atoms:
the correlations take k dense products (m x d) @ (d x n), m n d k in all; the Cholesky rows, the
orthonormal directions and the residuals m k² d; one triangular solve per token at the end, m k² / 2 (a
solve per step, as scikit-learn does, took half the time on Gemma-sized problems); the combination m k D.
On Gemma 3's 262,144-token source to a 32,000-token sw tokenizer (1,759 atoms, 6,879 tokens, d = 100,
k = 64) that is about 15 s of one core (benchmarks/init_scale.py). Memory: block_size x n
for the correlations and block_size x k x (k + d) for the factors and selected atoms, all float64.
The full n x n Gram matrix is never formed (Rubinstein et al.'s Batch-OMP precomputes it): its
updates α = Â x̂ - G[:, I] γ_I cost m n k² / 2 fewer flops when k / 2 < d, but as sparse products
or gathers of G's rows they ran 1.6-4x slower on CPU than the dense product above (2 cores, n = 1626
and 10000, d = 100, b = 1024, t = 32), and G needs n² memory.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
import typing
from dataclasses import asdict, replace

import numpy as np
import torch

from vocabtransfer import io
from vocabtransfer.errors import VocabTransferError
from vocabtransfer.log import progress_logged
from vocabtransfer.init.methods.registry import TransferProblem, TransferResult, register
from vocabtransfer.init.omp_solver import batch_omp, sparse_rows
from vocabtransfer.init.methods.focus import (
    FocusInputs,
    check_problem,
    focus_embeddings,
    has_vector,
    special_overlap_stats,
)
from vocabtransfer.plan.donor_vocab import vocabulary_sha256
from vocabtransfer.plan.method_options import OmpDonorOptions, OmpOptions
from vocabtransfer.data.overlap import checked_pairs

log = logging.getLogger(__name__)

NORMS = typing.get_args(typing.get_type_hints(OmpOptions)["norm"])  # params init.omp.norm (module doc, step 4)


@register("omp")
def omp(problem: TransferProblem, opts: OmpOptions = OmpOptions()) -> TransferResult:
    """OMP rows for the new tokens with a fastText vector, FOCUS's rows for the rest (module doc)."""
    check_problem(problem, "omp")
    rows = OmpRows(FocusInputs.of(problem), opts, seed=problem.seed, device=problem.device, lang=problem.lang)
    for ids, signals in rows.blocks():  # 3.-4. OMP per block (params init.omp.k) and the combination
        rows.put(ids, signals, *batch_omp(rows.atoms, signals, opts.k))
    embeddings, stats = rows.result()
    stats.update(special_overlap_stats(problem, "omp", "OMP combination or random row"))
    stats.update(method="omp", options=asdict(opts))
    log.info(
        "omp: %d copied, %d OMP combinations of %.1f of %d atoms on average (relative residual %.3f), "
        "%d random (no fastText vector) in %.1f s",
        stats["copied"],
        stats["omp_combined"],
        stats["atoms_mean"],
        stats["anchors"],
        stats["residual_mean"],
        stats["random"],
        stats["seconds"],
    )
    return TransferResult(embeddings=embeddings.cpu(), stats=stats)


# ---------------------------------------------------------------------------------------------
# the embeddings


def omp_embeddings(
    inputs: FocusInputs,
    opts: OmpOptions = OmpOptions(),
    *,
    seed: int = 42,
    device: str | torch.device = "cpu",
    lang: str = "",
) -> tuple[torch.Tensor, dict]:
    """`omp`'s rows and stats from arrays rather than a `TransferProblem` (tests, benchmarks): `inputs`,
    `seed` and `device` as `methods.focus.focus_embeddings`'s, `opts` is params `init.omp`, `lang` names the
    language in messages."""
    rows = OmpRows(inputs, opts, seed=seed, device=device, lang=lang)
    for ids, signals in rows.blocks():
        rows.put(ids, signals, *batch_omp(rows.atoms, signals, opts.k))
    return rows.result()


class OmpRows:
    """The target rows of one omp run, block by block (module doc): built with the copies and FOCUS's
    random rows (steps 1-2), then `put` the OMP combination of each block of `blocks` (steps 3-4);
    `result` gives ((target_size, D) float32 on `device`, stats): copied, omp_combined and random rows,
    anchors (atoms to choose from), atoms_mean / atoms_max per token, stopped_early (tokens that used
    fewer than k atoms), residual_mean (mean ‖x̂ - Σ γ_j â_j‖ of the unit signals), coef_abs_sum_mean
    (mean Σ|γ_j|), norm, combined_norm_mean / combined_norm_max (the combined rows' norms before any
    rescaling), source_norm_mean (the atoms' source rows), seconds."""

    def __init__(self, inputs: FocusInputs, opts: OmpOptions, *, seed: int, device: str | torch.device, lang: str):
        self.start = time.perf_counter()
        source_embeddings, auxiliary_mask = inputs.source_embeddings, inputs.auxiliary_mask
        target_size = inputs.target_size
        self.opts, self.seed = opts, seed
        self.device = device = torch.device(device)
        k = opts.k
        aux = torch.as_tensor(inputs.auxiliary)
        mask_shape = tuple(torch.as_tensor(auxiliary_mask).shape)
        if aux.dim() != 2 or aux.shape[0] != target_size or mask_shape != (target_size,):
            raise VocabTransferError(
                f"auxiliary embeddings: expected ({target_size}, d) vectors and a ({target_size},) "
                f"mask, got {tuple(aux.shape)} and {mask_shape}; recompute the auxiliary "
                "embeddings for this target tokenizer"
            )
        self.aux = aux = aux.to("cpu", torch.float32)
        t_ov, s_ov = checked_pairs(
            inputs.target_ids_overlap,
            inputs.source_ids_overlap,
            target_size,
            source_embeddings.shape[0],
            where="overlap",
        )
        has_vec = has_vector(aux, auxiliary_mask)
        is_new = np.ones(target_size, dtype=bool)
        is_new[t_ov] = False
        self.omp_ids = np.flatnonzero(is_new & has_vec)
        anchor_t, anchor_s = t_ov[has_vec[t_ov]], s_ov[has_vec[t_ov]]
        where = f" ({lang})" if lang else ""
        if self.omp_ids.size and k > anchor_t.size:
            raise VocabTransferError(
                f"init.omp.k={k}: larger than the {anchor_t.size} overlapping tokens with a fastText vector{where}, "
                f"the atoms OMP picks from; set init.omp.k to at most {anchor_t.size}, or grow the overlap "
                "(overlap.fuzzy_match_all, overlap.match_symbols) or the fastText vocabulary (fasttext.min_count)"
            )

        # 1. copies and FOCUS's random rows (no OMP row is touched)
        checked = replace(inputs, target_ids_overlap=t_ov, source_ids_overlap=s_ov, auxiliary=aux)
        self.out, self.fstats = focus_embeddings(
            checked, seed=seed, device=device, new_ids=np.flatnonzero(is_new & ~has_vec)
        )
        d = aux.shape[1]
        if self.omp_ids.size and k > d:
            log.warning(
                "init.omp.k=%d exceeds the fastText dimension %d%s: at most %d atoms are independent, so every "
                "token stops there",
                k,
                d,
                where,
                d,
            )

        # 2. unit atoms and their source rows
        atoms = torch.nn.functional.normalize(aux[torch.from_numpy(anchor_t)].to(device, torch.float64), dim=1)
        self.anchors(atoms, source_embeddings, anchor_s)

    def anchors(self, atoms: torch.Tensor, source_embeddings: torch.Tensor, anchor_s: np.ndarray) -> None:
        """The atoms (n, d) OMP picks from, their source rows (source ids `anchor_s`) and the per-block records."""
        self.atoms = atoms
        self.anchor_src = source_embeddings.detach()[torch.from_numpy(anchor_s).to(source_embeddings.device)].to(
            self.device, torch.float64
        )
        if self.opts.norm not in NORMS:
            raise VocabTransferError(f"init.{self.opts.KEY}.norm={self.opts.norm!r}: must be one of {', '.join(NORMS)}")
        self.anchor_norm = self.anchor_src.norm(dim=1)
        # per block, on the CPU: support sizes, residual norms, |coefficient| sums, row norms before `norm` rescales
        self.counts: list[torch.Tensor] = []
        self.residuals: list[torch.Tensor] = []
        self.coef_sums: list[torch.Tensor] = []
        self.raw_norms: list[torch.Tensor] = []

    def blocks(self):
        """(target ids, their unit signals) of each block of `block_size` tokens to combine."""
        block_size = self.opts.block_size
        for s in progress_logged(range(0, self.omp_ids.size, block_size), "OMP", log):
            ids = torch.from_numpy(self.omp_ids[s : s + block_size])
            yield ids, torch.nn.functional.normalize(self.aux[ids].to(self.device, torch.float64), dim=1)

    def put(
        self, ids: torch.Tensor, signals: torch.Tensor, idx: torch.Tensor, coef: torch.Tensor, count: torch.Tensor
    ) -> None:
        """Step 4 for one block: Σ γ_j E_src(j) from `batch_omp`'s choice, rescaled with `norm: atoms`."""
        valid = torch.arange(self.opts.k, device=self.device) < count[:, None]
        combination = sparse_rows(idx, coef, valid, self.atoms.shape[0], torch.float64)
        rows = combination @ self.anchor_src
        raw = rows.norm(dim=1)
        if self.opts.norm == "atoms":  # step 4: the |γ|-weighted mean norm of the atoms' source rows
            weight = coef.abs() * valid
            target = (weight * self.anchor_norm[idx]).sum(dim=1) / weight.sum(dim=1).clamp_min(1e-300)
            rows = rows * torch.where(raw > 0, target / raw.clamp_min(1e-300), 1.0)[:, None]
        self.out[ids.to(self.device)] = rows.float()
        self.raw_norms.append(raw.cpu())
        self.residuals.append((signals - combination @ self.atoms).norm(dim=1).cpu())
        self.counts.append(count.cpu())
        self.coef_sums.append(coef.abs().sum(dim=1).cpu())

    def result(self) -> tuple[torch.Tensor, dict]:
        count = torch.cat(self.counts).double() if self.counts else torch.zeros(0, dtype=torch.float64)
        k, fstats, raw_norms = self.opts.k, self.fstats, self.raw_norms

        def mean(parts: list[torch.Tensor]) -> float:
            return round(float(torch.cat(parts).double().mean()), 4) if parts else 0.0

        stats = {
            "copied": fstats["copied"],
            "omp_combined": int(self.omp_ids.size),
            "random": fstats["random"],
            "random_reason": fstats["random_reason"],
            "anchors": int(self.atoms.shape[0]),
            "k": int(k),
            "atoms_mean": round(float(count.mean()), 3) if count.numel() else 0.0,
            "atoms_max": int(count.max()) if count.numel() else 0,
            "stopped_early": int((count < k).sum()),
            "residual_mean": mean(self.residuals),
            "coef_abs_sum_mean": mean(self.coef_sums),
            "norm": self.opts.norm,
            "combined_norm_mean": mean(raw_norms),
            "combined_norm_max": round(float(torch.cat(raw_norms).max()), 4) if raw_norms else 0.0,
            "source_norm_mean": round(float(self.anchor_norm.mean()), 4) if self.anchor_norm.numel() else 0.0,
            "seed": int(self.seed),
            "device": str(self.device),
            "seconds": round(time.perf_counter() - self.start, 3),
        }
        return self.out, stats


# ---------------------------------------------------------------------------------------------
# the donor's space (module doc, "In the donor's space")


@register("omp_donor")
def omp_donor(problem: TransferProblem, opts: OmpDonorOptions = OmpDonorOptions()) -> TransferResult:
    """omp in the donor's space: every target token outside the overlap coded in the donor's space, the code applied
    to the source rows of its atoms (module doc)."""
    path = problem.resources.get("donor")
    where = problem.lang or "target"
    if path is None:
        raise VocabTransferError(
            f"init method omp_donor ({where}): no donor embeddings were given; set tokenizer.donor_model, whose "
            "embeddings stage donor writes to results/source/donor/embeddings.safetensors for the init job"
        )
    space, which = donor_space(Path(path), problem.matrix, problem.target_tokenizer)
    embeddings, stats = donor_embeddings(
        problem.source_embeddings,
        space,
        problem.overlap_target_ids,
        problem.overlap_source_ids,
        opts,
        seed=problem.seed,
        device=problem.device,
        lang=problem.lang,
    )
    stats.update(special_overlap_stats(problem, "omp_donor", "OMP combination of its donor row"))
    stats.update(method="omp_donor", options=asdict(opts), matrix=problem.matrix, donor_matrix=which)
    log.info(
        "omp_donor (%s, the donor's %s space for the source's %s embeddings): %d copied, %d OMP combinations of %.1f "
        "of %d atoms on average (relative residual %.3f) in %.1f s",
        where,
        which,
        problem.matrix,
        stats["copied"],
        stats["omp_combined"],
        stats["atoms_mean"],
        stats["anchors"],
        stats["residual_mean"],
        stats["seconds"],
    )
    return TransferResult(embeddings=embeddings.cpu(), stats=stats)


def donor_space(path: Path, matrix: str, target_tokenizer) -> tuple[torch.Tensor, str]:
    """(the donor's rows that code the source's `matrix`, which of the donor's they are): its output embeddings for the
    source's output embeddings where the donor has them (untied), else its input embeddings; checked to be of the
    target tokenizer's vocabulary (the sha256 stage donor recorded) and one finite row per target token."""
    found = vocabulary_sha256(target_tokenizer.get_vocab())
    recorded = str(io.tensor_metadata(path).get("vocab_sha256"))
    if recorded != found:
        raise VocabTransferError(
            f"{path}: the donor's embeddings are of another vocabulary (sha256 {recorded[:12]}…) than the target "
            f"tokenizer (sha256 {found[:12]}…); rerun stage donor (tokenizer.donor_model owns tokenizer.from's "
            "tokenizer) and the tokenizer stage"
        )
    tensors = io.load_tensors(path, ["input"])
    which = "output" if matrix == "output" and "output" in tensors else "input"
    space = tensors[which]
    if space.dim() != 2 or space.shape[0] != len(target_tokenizer) or not bool(space.isfinite().all()):
        raise VocabTransferError(
            f"{path}: the donor's {which} embeddings {tuple(space.shape)} are not one finite row per target token "
            f"({len(target_tokenizer)}); delete the file and rerun stage donor"
        )
    return space, which


def donor_embeddings(
    source_embeddings: torch.Tensor,
    donor: torch.Tensor,
    target_ids_overlap,
    source_ids_overlap,
    opts: OmpDonorOptions = OmpDonorOptions(),
    *,
    seed: int = 42,
    device: str | torch.device = "cpu",
    lang: str = "",
) -> tuple[torch.Tensor, dict]:
    """`omp_donor`'s rows and their stats from arrays (tests, benchmarks): `source_embeddings` (V_s, D)
    by source id, `donor` (V_t, d) the donor's rows by target id, the overlap's aligned target and source ids;
    `seed` is recorded only (no row is drawn), `lang` names the language in messages."""
    rows = DonorRows(source_embeddings, donor, (target_ids_overlap, source_ids_overlap), opts, seed, device, lang)
    for ids, signals in rows.blocks():
        rows.put(ids, signals, *batch_omp(rows.atoms, signals, opts.k))
    return rows.result()


class DonorRows(OmpRows):
    """`OmpRows` in the donor's space (module doc): the overlapping tokens' source rows copied, the atoms their donor
    rows and the signals every other target token's donor row, as they are; `residual_mean` relative."""

    def __init__(
        self,
        source_embeddings: torch.Tensor,
        donor: torch.Tensor,
        overlap: tuple[typing.Any, typing.Any],
        opts: OmpDonorOptions,
        seed: int,
        device: str | torch.device,
        lang: str,
    ):
        self.start = time.perf_counter()
        self.opts, self.seed, self.device = opts, seed, torch.device(device)
        self.donor = torch.as_tensor(donor).detach().to("cpu", torch.float32)
        target_size = self.donor.shape[0]
        target_ids, source_ids = overlap
        t_ov, s_ov = checked_pairs(target_ids, source_ids, target_size, source_embeddings.shape[0], where="overlap")
        is_new = np.ones(target_size, dtype=bool)
        is_new[t_ov] = False
        self.omp_ids = np.flatnonzero(is_new)
        if self.omp_ids.size and opts.k > t_ov.size:
            raise VocabTransferError(
                f"init.omp_donor.k={opts.k}: larger than the {t_ov.size} overlapping tokens"
                f"{f' ({lang})' if lang else ''}, the atoms OMP picks from in the donor's space; set "
                f"init.omp_donor.k to at most {t_ov.size}, or grow the overlap (overlap.fuzzy_match_all, "
                "overlap.match_symbols)"
            )
        source = source_embeddings.detach()
        self.out = torch.zeros((target_size, source.shape[1]), dtype=torch.float32, device=self.device)
        copied = source[torch.from_numpy(s_ov).to(source.device)].to(self.device, torch.float32)
        self.out[torch.from_numpy(t_ov).to(self.device)] = copied
        self.fstats = {"copied": int(t_ov.size), "random": 0, "random_reason": "none: every token has a donor row"}
        self.anchors(self.donor[torch.from_numpy(t_ov)].to(self.device, torch.float64), source, s_ov)

    def blocks(self):
        """(target ids, their donor rows as they are) of each block of `block_size` tokens to combine."""
        block_size = self.opts.block_size
        for s in progress_logged(range(0, self.omp_ids.size, block_size), "OMP (donor)", log):
            ids = torch.from_numpy(self.omp_ids[s : s + block_size])
            yield ids, self.donor[ids].to(self.device, torch.float64)

    def put(
        self, ids: torch.Tensor, signals: torch.Tensor, idx: torch.Tensor, coef: torch.Tensor, count: torch.Tensor
    ) -> None:
        """`OmpRows.put`, its residual made relative to the donor row's norm."""
        super().put(ids, signals, idx, coef, count)
        self.residuals[-1] = self.residuals[-1] / signals.norm(dim=1).clamp_min(1e-300).cpu()
