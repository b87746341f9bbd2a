"""Pretraining batches: the mapped split checked, blocks drawn in a seeded order, masks seeded per sample.

A run's data is a function of its seed and of each sample's position in the run, never of the batch
or the process a sample falls in, so a resumed run and a data-parallel run see the samples and masks
of an uninterrupted one-process run:
- `StepBlocks`: sample i is block perm_e[i mod n] of pass e = i // n, perm_e a permutation seeded
  with seed + e (one int64 per block, recomputed when a pass begins);
- `StepCollator`: a masked-LM sample's masks are drawn from a generator seeded with
  seed * 1_000_003 + i, in the order `DataCollatorForLanguageModeling.torch_mask_tokens` draws them
  (the 15 % to predict, then 80 % of those to [MASK], then half the rest to a random token), so they
  equal that call on the sample alone; the drawing is per sample, everything else is one tensor
  operation over the batch.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from vocabtransfer.data.token_ids import TokenIds
from vocabtransfer.errors import VocabTransferError
from vocabtransfer.model.lmdata import Kind, LMCollator
from vocabtransfer.train import distill

MASK_SEED_STRIDE = 1_000_003  # sample i of a run with seed s draws its masks with seed s * stride + i


def read_ids(path: Path, tokenizer, vocab_size: int) -> TokenIds:
    """A pre-tokenised split, mapped (`data.token_ids`): written with `tokenizer`, every id inside the model's
    embeddings (checked chunk by chunk, nothing loaded)."""
    split = TokenIds(path, tokenizer)
    for chunk in split.chunks():
        hi = int(chunk.max()) if chunk.size else -1
        if hi >= vocab_size:
            raise VocabTransferError(
                f"{path}: token id {hi} is outside the model's vocabulary (size {vocab_size}); "
                "it was tokenised with another tokenizer, rerun the pretokenize stage"
            )
    return split


class StepBlocks:
    """Sample i of the run is block `perm_e[i mod n]` of pass e = i // n (perm_e seeded with seed + e).

    `blocks`: `packing.PackedBlocks` (read from the mapped split on demand) or `distill.PairBlocks`, whose
    `item(b)` is the sample's fields; the permutation of the current pass takes 8 bytes a block."""

    def __init__(self, blocks, length: int, seed: int):
        self.blocks, self.length, self.seed = blocks, length, seed
        self._perm: tuple[int, np.ndarray] | None = None

    def __len__(self) -> int:
        return self.length

    def visited(self) -> set[int]:
        """The indices of the blocks the run's samples take (all of them once it passes over every block)."""

        n = len(self.blocks)
        epochs, rest = divmod(self.length, n)
        if epochs:
            return set(range(n))
        return set(torch.randperm(n, generator=torch.Generator().manual_seed(self.seed))[:rest].tolist())

    def __getitem__(self, i: int) -> dict:

        epoch, j = divmod(int(i), len(self.blocks))
        if self._perm is None or self._perm[0] != epoch:
            perm = torch.randperm(len(self.blocks), generator=torch.Generator().manual_seed(self.seed + epoch))
            self._perm = (epoch, perm.numpy())
        return {**self.blocks.item(int(self._perm[1][j])), "index": int(i)}


class StepCollator:
    """`lmdata.LMCollator` whose masks are seeded by each sample's index in the run, so a sample gets
    the same masks whatever batch, and whichever data-parallel process, it falls in."""

    def __init__(self, tokenizer, kind: Kind, seed: int, teacher_pad: int = 0):

        self.lm = LMCollator(tokenizer, kind, seed)
        self.kind, self.seed, self.pad_id = kind, seed, tokenizer.pad_token_id or 0
        self.teacher_pad = teacher_pad
        self.special = torch.tensor(sorted(tokenizer.all_special_ids), dtype=torch.long)
        self.generator = torch.Generator()
        if kind == "masked":
            mlm = self.lm.mlm
            self.p_predict, self.p_mask = mlm.mlm_probability, mlm.mask_replace_prob
            # what torch_mask_tokens draws after [MASK]: nothing when every masked token is replaced
            self.p_random = (
                None
                if mlm.mask_replace_prob == 1 or mlm.random_replace_prob == 0
                else mlm.random_replace_prob / (1 - mlm.mask_replace_prob)
            )
            self.mask_id = tokenizer.convert_tokens_to_ids(tokenizer.mask_token)
            self.vocab = len(tokenizer)

    def __call__(self, items: list[dict]) -> dict:

        if self.kind == "masked":
            return self._masked(items)
        batch = self.lm([item["input_ids"] for item in items])
        if "pair" in items[0]:  # distill: the teacher's ids and both sides' chunks
            batch.update(distill.collate_teacher([item["pair"] for item in items], self.teacher_pad))
        return batch

    def _masked(self, items: list[dict]) -> dict:
        """Padded ids, attention mask and labels; sample k's draws fill row k up to its length, with the
        generator reseeded for it (the draws' shapes, order and probabilities are torch_mask_tokens')."""

        lengths = [len(item["input_ids"]) for item in items]
        rows, width = len(items), max(lengths)
        ids_np = np.full((rows, width), self.pad_id, dtype=np.int64)
        for k, (item, n) in enumerate(zip(items, lengths)):
            ids_np[k, :n] = item["input_ids"]
        ids = torch.from_numpy(ids_np)
        attention = (torch.arange(width) < torch.tensor(lengths)[:, None]).long()
        p_predict = torch.full((rows, width), self.p_predict).masked_fill_(torch.isin(ids, self.special), 0.0)
        constant = {p: torch.full((width,), p) for p in (self.p_mask, self.p_random) if p is not None}
        p_mask, p_random = constant[self.p_mask], constant.get(self.p_random)
        draws = torch.zeros((3, rows, width))
        words = torch.zeros((rows, width), dtype=torch.long)
        g, seed = self.generator, self.seed * MASK_SEED_STRIDE
        for k, (p_row, d0, d1, d2, w, n) in enumerate(
            zip(
                p_predict.unbind(0),
                draws[0].unbind(0),
                draws[1].unbind(0),
                draws[2].unbind(0),
                words.unbind(0),
                lengths,
            )
        ):
            g.manual_seed(seed + items[k]["index"])
            torch.bernoulli(p_row[:n], generator=g, out=d0[:n])
            torch.bernoulli(p_mask[:n], generator=g, out=d1[:n])
            if p_random is not None:
                torch.bernoulli(p_random[:n], generator=g, out=d2[:n])
                torch.randint(self.vocab, (n,), generator=g, out=w[:n])
        predicted, replaced = draws[0].bool(), draws[1].bool()
        replaced &= predicted
        random = draws[2].bool() & predicted & ~replaced
        inputs = ids.masked_fill(replaced, self.mask_id)
        inputs = torch.where(random, words, inputs)
        return {"input_ids": inputs, "attention_mask": attention, "labels": ids.masked_fill(~predicted, -100)}
