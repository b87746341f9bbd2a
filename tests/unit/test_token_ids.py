"""Pre-tokenised splits as flat mapped arrays (data/token_ids.py) and the blocks packed from their
offsets (train/packing.py): the same blocks, in the same seeded order, as the list packing they
replace, on real text; a corrupt, truncated or foreign split is one clear error."""

from __future__ import annotations

import json
import os
import pickle

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import pytest
import torch

from helpers import Tok, bpe_tokenizer, text_lines, wordpiece_tokenizer
from vocabtransfer.data import token_ids
from vocabtransfer.data.token_ids import IdsWriter, TokenIds
from vocabtransfer.errors import VocabTransferError
from vocabtransfer.train import packing
from vocabtransfer.train.packing import PackedBlocks
from vocabtransfer.model.lmdata import LMCollator, special_tokens_around
from vocabtransfer.train.pretrain import StepBlocks, StepCollator


@pytest.fixture(scope="module")
def sw_wp():
    return wordpiece_tokenizer("sw")


@pytest.fixture(scope="module")
def sw_bpe():
    return bpe_tokenizer("sw")


def _ids(tokenizer, n: int = 2000) -> list[list[int]]:
    lines = text_lines("sw", n, start=300) + ["", "a </s>", "x" * 2000]  # empty, ends in eos, longer than a block
    return tokenizer(lines, add_special_tokens=False)["input_ids"]


# ------------------------------------------------------------------ the list packing this replaces, verbatim


def _old_pack(lines, seq_len, eos):
    blocks, block = [], []
    for ids in lines:
        if eos is not None and (not ids or ids[-1] != eos):
            ids = ids[: seq_len - 1] + [eos]
        if block and len(block) + len(ids) > seq_len:
            blocks.append(block)
            block = []
        block = block + ids
    if block:
        blocks.append(block)
    return blocks


def _old_pack_ids(tokenizer, sequences, seq_len, kind):
    prefix, suffix = special_tokens_around(tokenizer)
    room = seq_len - len(prefix) - len(suffix)
    return _old_pack(
        (prefix + [int(i) for i in line[:room]] + suffix for line in sequences),
        seq_len,
        tokenizer.eos_token_id if kind == "causal" else None,
    )


def _old_order(blocks, length, seed):
    """StepBlocks as it was: a Python list per pass."""
    perms, out = {}, []
    for i in range(length):
        epoch, j = divmod(i, len(blocks))
        if epoch not in perms:
            perms[epoch] = torch.randperm(len(blocks), generator=torch.Generator().manual_seed(seed + epoch)).tolist()
        out.append(blocks[perms[epoch][j]])
    return out


@pytest.mark.parametrize("name, kind", [("sw_wp", "masked"), ("sw_bpe", "causal")])
@pytest.mark.parametrize("seq_len", [12, 64, 128])
def test_blocks_and_order_equal_the_list_packing(request, tmp_path, monkeypatch, name, kind, seq_len):
    tokenizer = request.getfixturevalue(name)
    ids = _ids(tokenizer)
    token_ids.write_lines(tmp_path / "train", tokenizer, ids)
    monkeypatch.setattr(packing, "WINDOW", 97)  # many windows, blocks across their edges
    new = PackedBlocks(TokenIds(tmp_path / "train", tokenizer), tokenizer, seq_len, kind=kind)
    old = _old_pack_ids(tokenizer, ids, seq_len, kind)
    assert len(new) == len(old) > 10 and list(new) == old
    assert list(PackedBlocks(new.split, tokenizer, seq_len, kind=kind, lines=50)) == _old_pack_ids(
        tokenizer, ids[:50], seq_len, kind
    )
    length = 2 * len(old) + 7  # three passes, three permutations
    steps = StepBlocks(new, length, seed=11)
    assert [steps[i]["input_ids"].tolist() for i in range(length)] == _old_order(old, length, 11)


def test_split_files_are_plain_npy_of_the_smallest_dtype(tmp_path, sw_wp):
    ids = _ids(sw_wp, 300)
    token_ids.write_lines(tmp_path / "s", sw_wp, ids)
    flat, offsets = np.load(tmp_path / "s" / "ids.npy", mmap_mode="r"), np.load(tmp_path / "s" / "offsets.npy")
    assert flat.dtype == np.uint16 and offsets.dtype == np.uint32 and isinstance(flat, np.memmap)
    assert [flat[a:b].tolist() for a, b in zip(offsets[:-1], offsets[1:])] == ids
    assert (tmp_path / "s" / "ids.npy").stat().st_size == 128 + 2 * flat.size  # 2 bytes a token
    meta = json.loads((tmp_path / "s" / "meta.json").read_text())
    assert meta["lines"] == len(ids) and meta["tokens"] == flat.size and meta["vocab_size"] == len(sw_wp)
    split = TokenIds(tmp_path / "s", sw_wp)
    assert list(split.lines()) == ids and split.line(3).tolist() == ids[3]
    big = Tok(70_000)
    token_ids.write_lines(tmp_path / "big", big, [[69_999, 1], [], [65_536]])
    assert np.load(tmp_path / "big" / "ids.npy").tolist() == [69_999, 1, 65_536]
    assert TokenIds(tmp_path / "big", big).dtype == np.uint32


def test_a_pickled_split_reopens_its_files(tmp_path, sw_wp):
    """A data-loader worker gets the split pickled: only its path travels, and the copy maps the files again."""
    ids = _ids(sw_wp, 50)
    token_ids.write_lines(tmp_path / "s", sw_wp, ids)
    split = TokenIds(tmp_path / "s", sw_wp)
    state = split.__getstate__()
    copy = pickle.loads(pickle.dumps(split))
    assert state == {"path": tmp_path / "s"} and copy.path == split.path and len(copy) == len(ids)
    assert list(copy.lines()) == ids and copy.dtype == np.uint16 and copy.meta == split.meta


def test_offsets_widen_to_uint64_past_the_uint32_bound(tmp_path, sw_wp, monkeypatch):
    """A split whose offsets pass the bound (4.29 billion tokens; 1000 here) is rewritten in uint64 mid-write
    and reads the same; a format-1 split (int64 offsets) still reads."""
    monkeypatch.setattr(token_ids, "OFFSET_BOUND", 1000)
    ids = _ids(sw_wp, 300)
    with IdsWriter(tmp_path / "s", sw_wp) as w:
        for a in range(0, len(ids), 7):  # batches of 7 lines: the bound is passed inside the run
            part = ids[a : a + 7]
            w.append(np.array([len(x) for x in part]), np.array([i for x in part for i in x]))
    offsets = np.load(tmp_path / "s" / "offsets.npy")
    assert offsets.dtype == np.uint64 and offsets[-1] > 1000 and offsets.size == len(ids) + 1
    assert json.loads((tmp_path / "s" / "meta.json").read_text())["offsets_dtype"] == "uint64"
    assert list(TokenIds(tmp_path / "s", sw_wp).lines()) == ids
    assert not list(tmp_path.glob("**/*.narrow"))
    np.save(tmp_path / "s" / "offsets.npy", offsets.astype(np.int64))
    meta = json.loads((tmp_path / "s" / "meta.json").read_text())
    del meta["offsets_dtype"]
    (tmp_path / "s" / "meta.json").write_text(json.dumps({**meta, "format": 1}))
    assert list(TokenIds(tmp_path / "s", sw_wp).lines()) == ids


def test_a_failed_write_leaves_nothing(tmp_path, sw_wp):
    with pytest.raises(KeyboardInterrupt):
        with IdsWriter(tmp_path / "train", sw_wp) as w:
            w.append(np.array([2, 1]), np.array([5, 6, 7]))
            raise KeyboardInterrupt
    assert list(tmp_path.iterdir()) == []


def _truncate(path):
    path.write_bytes(path.read_bytes()[:-10])


def _garbage(path):
    path.write_bytes(b"not an array\n" * 20)


@pytest.mark.parametrize(
    "breaker, file, words",
    [
        (_truncate, "ids.npy", ["ids.npy", "truncated or corrupt"]),
        (_garbage, "ids.npy", ["ids.npy", "not a readable .npy"]),
        (_truncate, "offsets.npy", ["offsets.npy", "truncated or corrupt"]),
        (_garbage, "meta.json", ["meta.json", "not a readable split header"]),
        (os.unlink, "meta.json", ["no pre-tokenised split here"]),
    ],
)
def test_broken_split_is_one_clear_error(tmp_path, sw_wp, breaker, file, words):
    token_ids.write_lines(tmp_path / "train", sw_wp, _ids(sw_wp, 100))
    breaker(tmp_path / "train" / file)
    with pytest.raises(VocabTransferError) as err:
        TokenIds(tmp_path / "train", sw_wp)
    message = str(err.value)
    assert "\n" not in message and "rerun the pretokenize stage" in message and str(tmp_path / "train") in message
    assert all(w in message for w in words), message


def test_split_of_another_tokenizer_is_refused(tmp_path, sw_wp, sw_bpe):
    token_ids.write_lines(tmp_path / "train", sw_bpe, _ids(sw_bpe, 100))
    with pytest.raises(
        VocabTransferError, match=r"train: written with another tokenizer .* rerun the pretokenize stage"
    ):
        TokenIds(tmp_path / "train", sw_wp)


def _old_collate(tokenizer, seed, items):
    """StepCollator's masked branch as it was: the whole DataCollatorForLanguageModeling call per sample."""
    lm, rows = LMCollator(tokenizer, "masked", seed), []
    for item in items:
        lm.mlm.generator = torch.Generator().manual_seed(seed * 1_000_003 + item["index"])
        rows.append(lm([item["input_ids"]]))
    width = max(r["input_ids"].shape[1] for r in rows)
    pad = {"labels": -100, "input_ids": tokenizer.pad_token_id or 0}
    return {
        key: torch.cat(
            [torch.nn.functional.pad(r[key], (0, width - r[key].shape[1]), value=pad.get(key, 0)) for r in rows]
        )
        for key in rows[0]
    }


def test_masks_equal_the_full_collator_call(tmp_path, sw_wp):
    ids = _ids(sw_wp, 600)
    token_ids.write_lines(tmp_path / "train", sw_wp, ids)
    steps = StepBlocks(PackedBlocks(TokenIds(tmp_path / "train", sw_wp), sw_wp, 64), 96, seed=5)
    collate = StepCollator(sw_wp, "masked", 5)
    for start in range(0, 96, 16):
        items = [steps[i] for i in range(start, start + 16)]
        new, old = collate(items), _old_collate(sw_wp, 5, items)
        assert list(new) == list(old) and all(torch.equal(new[k], old[k]) for k in old)
        assert (new["labels"] != -100).any()
