"""The tokenizer stage: one target tokenizer per family, in the source tokenizer's conventions."""

from __future__ import annotations

import json
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import shared_file
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from vocabtransfer.pipeline import paths
from vocabtransfer.app.params import validate_params
from vocabtransfer.errors import VocabTransferError
from vocabtransfer.model.hub import load_tokenizer
from vocabtransfer.app.runner import run_stage
from vocabtransfer.data.families import canonical_unigram
from vocabtransfer.data.families import BYTE_TOKENS, detect_family
from vocabtransfer.data.corpus_lines import iter_text_batches
from vocabtransfer.data.tokenizer import load_target_tokenizer, train_tokenizer

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
SENTENCE = "Yesu alimwambia, Nenda ukamwite mume wako."


def _lines(lang: str, n: int) -> list[str]:
    with open(shared_file(f"pretrain_text/{lang}.txt"), encoding="utf-8") as f:
        return [next(f).rstrip("\n") for _ in range(n)]


@pytest.fixture(scope="module")
def sw_lines() -> list[str]:
    return _lines("sw", 3000)


def _batches(lines, size=500):
    return [lines[i : i + size] for i in range(0, len(lines), size)]


@pytest.fixture(scope="module")
def minilm():
    return load_tokenizer(MINILM)


# --- tiny source tokenizers in other families, trained on English text ----------------------


@pytest.fixture(scope="module")
def xlmr_like(tmp_path_factory):
    """Unigram with the ▁ Metaspace convention, <s> <pad> </s> <unk> first and <mask> last (as XLM-R)."""
    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Replace(Regex(" {2,}"), " ")])
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Metaspace()])
    tok.decoder = decoders.Metaspace()
    tok.train_from_iterator(
        [_lines("en", 1500)],
        trainers.UnigramTrainer(
            vocab_size=300, special_tokens=["<s>", "<pad>", "</s>", "<unk>"], unk_token="<unk>", show_progress=False
        ),
    )
    mask = AddedToken("<mask>", lstrip=True, special=True, normalized=False)
    tok.add_special_tokens([mask])
    tok.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="<pad>",
        cls_token="<s>",
        sep_token="</s>",
        mask_token=mask,
        model_max_length=514,
    )
    path = tmp_path_factory.mktemp("xlmr_like")
    hf.save_pretrained(path)
    return AutoTokenizer.from_pretrained(path)


@pytest.fixture(scope="module")
def gpt2_like(tmp_path_factory):
    """Byte-level BPE with <|endoftext|> as its only special token, added last (as GPT-2)."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=True)
    tok.train_from_iterator(
        [_lines("en", 1500)],
        trainers.BpeTrainer(vocab_size=400, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False),
    )
    tok.add_special_tokens(["<|endoftext|>"])
    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|endoftext|>",
        eos_token="<|endoftext|>",
        unk_token="<|endoftext|>",
        model_max_length=1024,
    )
    path = tmp_path_factory.mktemp("gpt2_like")
    hf.save_pretrained(path)
    return AutoTokenizer.from_pretrained(path)


@pytest.fixture(scope="module")
def llama2_like(tmp_path_factory):
    """SentencePiece-style BPE: ▁ Metaspace without splitting, byte_fallback, <s> prepended (as Llama-2)."""
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=False)
    tok.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    )
    tok.train_from_iterator(
        [_lines("en", 1500)],
        trainers.BpeTrainer(vocab_size=300, special_tokens=["<unk>", "<s>", "</s>"], show_progress=False),
    )
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", 1)]
    )
    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>", model_max_length=4096
    )
    path = tmp_path_factory.mktemp("llama2_like")
    hf.save_pretrained(path)
    return AutoTokenizer.from_pretrained(path)


def _save_and_reload(tok, path):
    tok.save_pretrained(path)
    return AutoTokenizer.from_pretrained(path)


def _ids(tok) -> dict[str, int]:
    return {t: tok.convert_tokens_to_ids(t) for t in tok.all_special_tokens}


# --- the stage, with the real MiniLM (WordPiece) source ---------------------------------------


@pytest.fixture
def stage_dir(tmp_path, monkeypatch, sw_lines):
    monkeypatch.chdir(tmp_path)
    for var in ("RAYON_NUM_THREADS", "TOKENIZERS_PARALLELISM"):  # the stage sets them from --threads
        monkeypatch.setenv(var, os.environ.get(var, ""))
    train = tmp_path / paths.fill(paths.CORPUS_TRAIN, lang="sw")
    train.parent.mkdir(parents=True)
    pq.write_table(pa.table({"text": sw_lines}), train)
    run_stage("source_model", _params(), {}, threads=1)  # results/source/base: what the stage reads the source from
    return tmp_path


def _params(**tokenizer):
    return validate_params(
        {
            "languages": ["sw"],
            "source_model": MINILM,
            "corpus": {"sources": {"sw": {"path": "pretrain_text/sw.txt"}}},
            "tokenizer": {"vocab_size": 500, "min_frequency": 2, **tokenizer},
        }
    )


def test_stage_trains_wordpiece_like_minilm(stage_dir, minilm):
    run_stage("tokenizer", _params(), {"lang": "sw"}, threads=2)
    out = stage_dir / paths.fill(paths.TOKENIZER, lang="sw")
    target = AutoTokenizer.from_pretrained(out)  # loads with transformers alone

    assert target.is_fast and len(target) == 500
    assert json.loads(target.backend_tokenizer.to_str())["model"]["type"] == "WordPiece"
    # MiniLM's special tokens, ids 0.. in the order of their MiniLM ids (0, 100, 101, 102, 103)
    assert _ids(target) == {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "[MASK]": 4}
    assert (target.cls_token, target.sep_token, target.pad_token, target.mask_token, target.unk_token) == (
        "[CLS]",
        "[SEP]",
        "[PAD]",
        "[MASK]",
        "[UNK]",
    )
    assert target.model_max_length == minilm.model_max_length == 512
    assert any(t.startswith("##") for t in target.get_vocab())
    # MiniLM's normalizer: lowercasing and accent stripping carry over
    for text in ("Héllo WÖRLD Çà", "Habari ZA Asubuhi"):
        assert target.backend_tokenizer.normalizer.normalize_str(
            text
        ) == minilm.backend_tokenizer.normalizer.normalize_str(text)
    assert target.tokenize("YESU ALIMWAMBIA") == target.tokenize("yesu alimwambia")
    # MiniLM's [CLS] … [SEP] template with the new ids, and a sensible round trip
    ids = target(SENTENCE)["input_ids"]
    assert ids[0] == 2 and ids[-1] == 3 and 1 not in ids
    assert target.decode(ids, skip_special_tokens=True) == SENTENCE.lower()
    # no padding or truncation inherited from MiniLM's tokenizer.json (fixed 128)
    assert len(target("a b", add_special_tokens=False)["input_ids"]) == 2

    stats = json.loads((out.parent / "tokenizer_stats.json").read_text())
    assert stats["family"] == "wordpiece" and stats["vocab_size_reached"] == 500 and stats["seconds"] > 0
    assert stats["train_lines"] == 3000

    # the same params give the same tokenizer
    first = (out / "tokenizer.json").read_bytes()
    run_stage("tokenizer", _params(), {"lang": "sw"}, threads=2)
    assert (out / "tokenizer.json").read_bytes() == first
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".")]  # no temporary left behind


def test_stage_rejects_corpus_without_text_column(stage_dir):
    pq.write_table(pa.table({"line": ["a b c"]}), stage_dir / paths.fill(paths.CORPUS_TRAIN, lang="sw"))
    with pytest.raises(VocabTransferError, match=r"train\.parquet: no `text` column \(has line\)"):
        run_stage("tokenizer", _params(), {"lang": "sw"}, threads=1)
    assert not (stage_dir / paths.fill(paths.TOKENIZER, lang="sw")).exists()


def test_iter_text_batches_streams_in_order(stage_dir, sw_lines):
    batches = list(iter_text_batches(stage_dir / paths.fill(paths.CORPUS_TRAIN, lang="sw"), batch_size=700))
    assert [len(b) for b in batches] == [700, 700, 700, 700, 200]
    assert [t for b in batches for t in b] == sw_lines


# --- other families -------------------------------------------------------------------------


def test_unigram_keeps_metaspace_and_xlmr_specials(xlmr_like, sw_lines, tmp_path):
    assert detect_family(xlmr_like) == ("unigram", "unigram")
    target = _save_and_reload(train_tokenizer(xlmr_like, _batches(sw_lines), vocab_size=600), tmp_path)

    assert len(target) == 600
    assert json.loads(target.backend_tokenizer.to_str())["model"]["type"] == "Unigram"
    assert _ids(target) == {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3, "<mask>": 4}
    assert target.added_tokens_decoder[4].lstrip  # <mask> keeps its AddedToken flags
    assert target.unk_token == "<unk>" and target.model_max_length == 514
    tokens = target.tokenize(SENTENCE)
    assert tokens[0].startswith("▁") and sum(t.startswith("▁") for t in tokens) == len(SENTENCE.split())
    ids = target(SENTENCE)["input_ids"]  # RobertaProcessing with remapped ids: <s> … </s>
    assert ids[0] == 0 and ids[-1] == 2 and 3 not in ids
    assert target.decode(ids, skip_special_tokens=True) == SENTENCE


def test_byte_level_bpe_has_full_byte_alphabet(gpt2_like, sw_lines, tmp_path):
    assert detect_family(gpt2_like) == ("bpe", "byte_level")
    target = _save_and_reload(train_tokenizer(gpt2_like, _batches(sw_lines), vocab_size=500), tmp_path)

    assert len(target) == 500
    assert _ids(target) == {"<|endoftext|>": 0}
    assert target.bos_token == target.eos_token == "<|endoftext|>"
    vocab = target.get_vocab()
    assert set(pre_tokenizers.ByteLevel.alphabet()) <= set(vocab)
    assert any(t.startswith("Ġ") for t in target.tokenize(SENTENCE))
    text = "Mwanzo ✓ 🙂 ŋ"  # characters never seen in training still round-trip
    ids = target(text)["input_ids"]
    assert target.decode(ids) == text


def test_sentencepiece_bpe_gets_byte_fallback_tokens(llama2_like, sw_lines, tmp_path):
    assert detect_family(llama2_like) == ("bpe", "sentencepiece")
    target = _save_and_reload(train_tokenizer(llama2_like, _batches(sw_lines), vocab_size=600), tmp_path)

    assert len(target) == 600  # the 256 byte tokens count in vocab_size
    assert _ids(target) == {"<unk>": 0, "<s>": 1, "</s>": 2}
    assert target.convert_ids_to_tokens(list(range(3, 259))) == BYTE_TOKENS
    # trained on whole words: `▁` only ever starts a token, although the source encodes without splitting
    assert not [t for t in target.get_vocab() if "▁" in t[1:]]
    text = "Yesu alisema ✓"
    tokens = target.tokenize(text)
    assert tokens[0].startswith("▁") and "<0xE2>" in tokens
    ids = target(text)["input_ids"]
    assert ids[0] == 1 and target.decode(ids, skip_special_tokens=True) == text


def test_explicit_family_uses_that_familys_conventions(minilm, sw_lines, tmp_path):
    target = _save_and_reload(train_tokenizer(minilm, _batches(sw_lines), family="unigram", vocab_size=400), tmp_path)
    spec = json.loads(target.backend_tokenizer.to_str())
    assert spec["model"]["type"] == "Unigram" and spec["decoder"]["type"] == "Metaspace"
    assert _ids(target) == {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "[MASK]": 4}
    assert target.tokenize("HABARI") == target.tokenize("habari")  # MiniLM's normalizer is kept
    ids = target(SENTENCE)["input_ids"]
    assert ids[0] == 2 and ids[-1] == 3


def test_canonical_unigram_orders_added_characters_and_ties():
    lowest = -9.123456789
    ladder = [lowest, lowest + 0.0001, lowest + 0.0001 + 0.0001]
    # the trainer added x, a, m with ladder scores in hash order; sorted, a m x get the ladder in turn;
    # "ab" and "ba" tie after rounding; "<unk>" is special
    vocab = [
        ["<unk>", 0.0],
        ["ba", -2.0000000000000004],
        ["ab", -2.0],
        ["x", ladder[0]],
        ["a", ladder[1]],
        ["m", ladder[2]],
        ["q", -5.0],
    ]
    spec = canonical_unigram({"model": {"type": "Unigram", "unk_id": 0, "vocab": vocab}}, n_special=1)
    assert spec["model"]["vocab"] == [
        ["<unk>", 0.0],
        ["ab", -2.0],
        ["ba", -2.0],
        ["q", -5.0],
        ["x", round(ladder[2], 6)],
        ["m", round(ladder[1], 6)],
        ["a", round(ladder[0], 6)],
    ]
    assert spec["model"]["unk_id"] == 0


def test_one_shot_iterator_is_rejected_for_wordpiece(minilm, sw_lines):
    with pytest.raises(TypeError, match="re-iterable"):
        train_tokenizer(minilm, iter(_batches(sw_lines)), vocab_size=300)


def test_vocab_size_too_small_for_byte_fallback(llama2_like, sw_lines):
    with pytest.raises(VocabTransferError, match="tokenizer.vocab_size: 200 leaves no room"):
        train_tokenizer(llama2_like, _batches(sw_lines), vocab_size=200)


# --- loading a target tokenizer -------------------------------------------------------------


@pytest.fixture(scope="module")
def saved_target(minilm, tmp_path_factory):
    path = tmp_path_factory.mktemp("target")
    train_tokenizer(minilm, [_lines("sw", 300)], vocab_size=200).save_pretrained(path)
    return path


def test_load_target_tokenizer_roundtrip(saved_target):
    tok = load_target_tokenizer(saved_target)
    assert tok.is_fast and len(tok) == 200


def _copy(src, dst):
    dst.mkdir()
    for f in src.iterdir():
        (dst / f.name).write_bytes(f.read_bytes())
    return dst


@pytest.mark.parametrize(
    "damage, message",
    [
        ("missing_dir", r"tokenizer directory not found"),
        ("missing_json", r"tokenizer\.json: file missing"),
        ("truncated_json", r"tokenizer\.json: corrupt tokenizer file"),
        ("bad_model", r"tokenizer\.json: corrupt tokenizer file"),
    ],
)
def test_load_target_tokenizer_errors(saved_target, tmp_path, damage, message):
    path = tmp_path / "tok"
    if damage != "missing_dir":
        _copy(saved_target, path)
    tokenizer_json = path / "tokenizer.json"
    if damage == "missing_json":
        tokenizer_json.unlink()
    elif damage == "truncated_json":
        tokenizer_json.write_bytes(tokenizer_json.read_bytes()[:1000])
    elif damage == "bad_model":
        spec = json.loads(tokenizer_json.read_text())
        spec["model"]["type"] = "NoSuchModel"
        tokenizer_json.write_text(json.dumps(spec))
    with pytest.raises(VocabTransferError, match=message) as info:
        load_target_tokenizer(path)
    text = str(info.value)
    assert "\n" not in text and str(path) in text and "run" in text


def test_gemma_family_keeps_the_head_and_byte_tokens_at_the_source_ids(gemma_tokenizer, sw_lines, tmp_path):
    """Gemma 3's tokenizer (BPE, byte fallback, a normaliser writing `▁`): the target keeps the source's
    238-entry head (specials, control tokens, newline and `▁` runs, HTML tags) and its 256 byte tokens at
    the same ids, the same normaliser, pre-tokenizer, decoder and post-processor, and none of the 6,176
    special tokens Gemma keeps after its vocabulary; it loads with AutoTokenizer alone and round-trips text
    that needs byte fallback."""
    src = gemma_tokenizer
    target = _save_and_reload(train_tokenizer(src, _batches(sw_lines[:3000]), vocab_size=2000), tmp_path / "tok")
    assert len(target) == 2000
    src_vocab, tgt_vocab = src.get_vocab(), target.get_vocab()
    head = {t: i for t, i in src_vocab.items() if i < 238 + 256}
    assert src_vocab["<0x00>"] == 238 and len(head) == 494
    assert {t: tgt_vocab.get(t) for t in head} == head
    for name in ("bos_token", "eos_token", "pad_token", "unk_token", "mask_token"):
        assert target.convert_tokens_to_ids(getattr(target, name)) == src.convert_tokens_to_ids(getattr(src, name))
    assert (
        tgt_vocab["<start_of_turn>"] == 105 and "<unused6241>" not in tgt_vocab and "<start_of_image>" not in tgt_vocab
    )
    spec, src_spec = (json.loads(t.backend_tokenizer.to_str()) for t in (target, src))
    for key in ("normalizer", "pre_tokenizer", "decoder", "post_processor"):
        assert spec[key] == src_spec[key], key
    assert spec["model"]["byte_fallback"] and spec["model"]["type"] == "BPE"
    flags = {a["content"]: a["special"] for a in spec["added_tokens"]}
    assert flags["<bos>"] and not flags["\n\n"] and not flags["<b>"]  # the source's flags, kept
    assert type(target).__name__ in ("PreTrainedTokenizerFast", "TokenizersBackend")
    text = "Habari za asubuhi! Ninapenda 😀 na 𝔘 <start_of_turn>user\n\n<b>x</b>"
    ids = target(text)["input_ids"]
    assert ids[0] == 2 and 105 in ids and src_vocab["\n\n"] in ids
    tokens = "|".join(target.convert_ids_to_tokens(ids))
    assert "|<0xF0>|<0x9D>|<0x94>|<0x98>|" in tokens  # 𝔘 through byte fallback, as in the source
    assert target.decode(ids, skip_special_tokens=False) == "<bos>" + text
    # the overlap (params overlap.match_bytes, as config/gemma.yaml sets it): the head and the byte tokens
    # match themselves, and `▁` words match Gemma's own pieces
    from vocabtransfer.data.overlap import compute_overlap

    table = compute_overlap(target, src, match_bytes=True).to_pydict()
    pairs = {t: s for t, s in zip(table["target_id"], table["source_id"]) if s is not None}
    assert all(pairs.get(i) == i for i in range(494))
    assert pairs[tgt_vocab["▁za"]] == src_vocab["▁za"]
    # the special tokens do not clash; a head in another order (what a tokenizer trained for another
    # source would have) does, and so does a source special token that the target has as an ordinary one
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    from vocabtransfer.data.families import special_token_clash

    assert special_token_clash(target, src) is None

    def edited(change) -> PreTrainedTokenizerFast:
        spec = json.loads(target.backend_tokenizer.to_str())
        change(spec)
        return PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(json.dumps(spec)))

    def swap_turns(spec):
        for entry in spec["added_tokens"]:
            entry["id"] = {105: 106, 106: 105}.get(entry["id"], entry["id"])
        vocab = spec["model"]["vocab"]
        vocab["<start_of_turn>"], vocab["<end_of_turn>"] = vocab["<end_of_turn>"], vocab["<start_of_turn>"]

    def unflag_eos(spec):
        next(e for e in spec["added_tokens"] if e["content"] == "<eos>")["special"] = False

    assert special_token_clash(edited(swap_turns), src) == (
        "the target does not keep the source's 238 head tokens at their ids: id 105 is '<end_of_turn>' in the target "
        "and '<start_of_turn>' in the source"
    )
    assert special_token_clash(edited(unflag_eos), src) == (
        "the source's special token '<eos>' (id 1) is an ordinary token of the target (id 1)"
    )
