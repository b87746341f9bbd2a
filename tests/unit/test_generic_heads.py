"""Generic task heads (evaluate/generic_heads.py) on a tiny Gemma 3 text decoder with random weights: transformers
5.23 has only a sequence-classification head for `gemma3_text`; the generic token-classification and span heads
give shapes and losses like transformers' own (checked by hand), round-trip through save_pretrained, learn a
separable token labelling under the Trainer, and let `finetune` run NER and QA on Gemma 3 end to end."""

from __future__ import annotations

import os

import pytest
import torch
import torch.nn.functional as F

from vocabtransfer.errors import VocabTransferError
from vocabtransfer.evaluate import finetune_eval
from vocabtransfer.evaluate import generic_heads

from helpers import bpe_tokenizer, tiny_gptj

from conftest import REPO

os.environ.setdefault("HF_HUB_OFFLINE", "1")
TOKEN, SPAN = "AutoModelForTokenClassification", "AutoModelForQuestionAnswering"


def tiny_gemma3(directory, tokenizer=None, vocab_size: int = 300):
    """Gemma3ForCausalLM (model type gemma3_text, tied embeddings) with random weights, saved with `tokenizer`."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    ids = (
        dict(
            pad_token_id=tokenizer.pad_token_id,
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
        )
        if tokenizer is not None
        else {"pad_token_id": 0}
    )
    torch.manual_seed(0)
    model = Gemma3ForCausalLM(
        Gemma3TextConfig(
            vocab_size=len(tokenizer) if tokenizer is not None else vocab_size,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=1,
            head_dim=16,
            max_position_embeddings=256,
            sliding_window=16,
            **ids,
        )
    )
    model.save_pretrained(directory)
    if tokenizer is not None:
        tokenizer.save_pretrained(directory)
    return model


@pytest.fixture(scope="module")
def gemma_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("gemma3")
    tiny_gemma3(directory)
    return directory


def _config(directory):
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(str(directory))


def test_gemma3_lacks_the_heads_and_gets_generic_ones(gemma_dir):
    """transformers has a sequence-classification head for gemma3_text and neither of the other two: those
    are the generic ones, named for the body; encoders and multimodal configs get none."""
    from transformers import BertConfig, Gemma3Config

    assert finetune_eval.missing_head("AutoModelForSequenceClassification", gemma_dir) is None
    for head, name in (
        (TOKEN, "GenericGemma3TextForTokenClassification"),
        (SPAN, "GenericGemma3TextForQuestionAnswering"),
    ):
        assert finetune_eval.missing_head(head, gemma_dir) is not None
        assert generic_heads.unsupported(head, _config(gemma_dir)) is None
        cls = generic_heads.head_class(head, _config(gemma_dir))
        assert cls.__name__ == name and cls is generic_heads.head_class(head, _config(gemma_dir))  # built once
    assert "SequenceClassification" in generic_heads.unsupported(
        "AutoModelForSequenceClassification", _config(gemma_dir)
    )
    assert "not a decoder-only" in generic_heads.unsupported(TOKEN, BertConfig())
    assert "multimodal" in generic_heads.unsupported(SPAN, Gemma3Config())
    with pytest.raises(VocabTransferError, match="bert"):
        generic_heads.head_class(TOKEN, BertConfig())


def test_token_head_shapes_and_loss_by_hand(gemma_dir):
    """Logits (batch, length, labels) from the body's weights (the causal checkpoint's `model.` weights,
    lm_head dropped); the loss is the mean cross-entropy over the positions whose label is not -100."""
    from transformers import AutoModelForCausalLM

    model = generic_heads.head_class(TOKEN, _config(gemma_dir)).from_pretrained(str(gemma_dir), num_labels=3).eval()
    causal = AutoModelForCausalLM.from_pretrained(str(gemma_dir))
    assert torch.equal(model.model.layers[0].mlp.up_proj.weight, causal.model.layers[0].mlp.up_proj.weight)
    assert not hasattr(model, "lm_head") and model.score.weight.shape == (3, 32)
    ids = torch.tensor([[5, 17, 42, 8, 99], [7, 7, 250, 3, 0]])
    labels = torch.tensor([[0, 2, -100, 1, 1], [-100, 1, 0, 2, -100]])
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=torch.ones_like(ids), labels=labels)
    assert out.logits.shape == (2, 5, 3)
    log_p = F.log_softmax(out.logits.double(), dim=-1)
    kept = [(b, t) for b in range(2) for t in range(5) if labels[b, t] != -100]
    by_hand = -sum(log_p[b, t, labels[b, t]] for b, t in kept) / len(kept)
    assert out.loss.item() == pytest.approx(by_hand.item(), rel=1e-5)


def test_span_head_shapes_and_loss_by_hand(gemma_dir):
    """Start and end logits (batch, length); the loss is the mean of the start and end cross-entropies, a
    position past the sequence clamped to its length and left out (as transformers' own QA heads do)."""
    model = generic_heads.head_class(SPAN, _config(gemma_dir)).from_pretrained(str(gemma_dir)).eval()
    ids = torch.tensor([[5, 17, 42, 8, 99, 4], [7, 7, 250, 3, 1, 2], [9, 10, 11, 12, 13, 14]])
    starts, ends = torch.tensor([1, 99, 4]), torch.tensor([2, 3, 6])  # 99 and 6: outside the 6 positions
    with torch.no_grad():
        out = model(input_ids=ids, start_positions=starts, end_positions=ends)
    assert out.start_logits.shape == out.end_logits.shape == (3, 6)
    log_s, log_e = F.log_softmax(out.start_logits.double(), -1), F.log_softmax(out.end_logits.double(), -1)
    start_loss = -(log_s[0, 1] + log_s[2, 4]) / 2  # example 1's start is ignored
    end_loss = -(log_e[0, 2] + log_e[1, 3]) / 2  # example 2's end is ignored
    assert out.loss.item() == pytest.approx(((start_loss + end_loss) / 2).item(), rel=1e-5)


@pytest.mark.parametrize("head", [TOKEN, SPAN])
def test_generic_head_round_trips_through_save_pretrained(gemma_dir, tmp_path, head):
    """save_pretrained writes the head's weights with the body's and its class and labels into config.json;
    generic_heads.from_pretrained gives back the same model: identical outputs."""
    from safetensors import safe_open

    labels = {"num_labels": 3, "id2label": {0: "O", 1: "B-PER", 2: "I-PER"}} if head == TOKEN else {}
    torch.manual_seed(3)
    model = generic_heads.head_class(head, _config(gemma_dir)).from_pretrained(str(gemma_dir), **labels).eval()
    model.save_pretrained(tmp_path / "saved")
    config = _config(tmp_path / "saved")
    assert config.architectures == [type(model).__name__]
    head_weight = "score.weight" if head == TOKEN else "qa_outputs.weight"
    with safe_open(str(tmp_path / "saved" / "model.safetensors"), "pt") as fh:
        assert head_weight in fh.keys() and "model.embed_tokens.weight" in fh.keys()
    if head == TOKEN:
        assert config.num_labels == 3 and config.id2label[1] == "B-PER"
    again = generic_heads.from_pretrained(tmp_path / "saved").eval()
    assert type(again) is type(model)
    ids = torch.tensor([[5, 17, 42, 8, 99, 4], [7, 7, 250, 3, 1, 0]])
    mask = torch.tensor([[1] * 6, [1] * 5 + [0]])
    with torch.no_grad():
        a, b = model(input_ids=ids, attention_mask=mask), again(input_ids=ids, attention_mask=mask)
    for key in ("logits",) if head == TOKEN else ("start_logits", "end_logits"):
        assert torch.equal(a[key], b[key])
    with pytest.raises(VocabTransferError, match="config.json"):
        generic_heads.from_pretrained(gemma_dir)  # a causal LM directory: not a generic head


def test_trainer_learns_a_separable_token_labelling(gemma_dir, tmp_path):
    """Twenty tokens, ids 3..12 label 0 and 13..22 label 1: 12 Trainer steps lower the loss to under half its start."""
    from transformers import Trainer, TrainingArguments, set_seed

    set_seed(0)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 23, (64, 8), generator=g)
    data = [
        {"input_ids": row.tolist(), "attention_mask": [1] * 8, "labels": (row >= 13).long().tolist()} for row in ids
    ]
    model = generic_heads.head_class(TOKEN, _config(gemma_dir)).from_pretrained(str(gemma_dir), num_labels=2)

    def loss() -> float:
        model.eval()
        with torch.no_grad():
            return model(input_ids=ids, attention_mask=torch.ones_like(ids), labels=(ids >= 13).long()).loss.item()

    before = loss()
    args = TrainingArguments(
        output_dir=str(tmp_path / "ckpt"),
        max_steps=12,
        per_device_train_batch_size=16,
        learning_rate=3e-3,
        seed=0,
        save_strategy="no",
        logging_strategy="no",
        report_to=[],
        disable_tqdm=True,
        use_cpu=True,
    )
    Trainer(model=model, args=args, train_dataset=data).train()
    after = loss()
    print(f"token labelling loss {before:.3f} -> {after:.3f}")
    assert after < 0.5 * before


def test_gptj_token_head_loads_its_body_under_transformer(tmp_path):
    """GPT-J keeps its body under `transformer.` (not `model.`): the generic head loads those weights."""
    from transformers import AutoModelForCausalLM

    directory = tiny_gptj(tmp_path / "gptj", bpe_tokenizer("sw"))
    assert finetune_eval.missing_head(TOKEN, directory) is not None
    model = generic_heads.head_class(TOKEN, _config(directory)).from_pretrained(str(directory), num_labels=2)
    causal = AutoModelForCausalLM.from_pretrained(str(directory))
    assert type(model).__name__ == "GenericGPTJForTokenClassification" and model.base_model_prefix == "transformer"
    assert torch.equal(model.transformer.h[0].mlp.fc_in.weight, causal.transformer.h[0].mlp.fc_in.weight)
    assert model.get_input_embeddings() is model.transformer.wte


@pytest.fixture(scope="module")
def gemma_with_tokenizer(tmp_path_factory):
    directory = tmp_path_factory.mktemp("gemma3_tok")
    tiny_gemma3(directory, bpe_tokenizer("sw", vocab_size=400))
    return directory


@pytest.mark.parametrize(
    "name, spec, head_class",
    [
        (
            "ner",
            {"train": {"path": "masakhaner2/swa/train.txt"}, "test": {"path": "masakhaner2/swa/test.txt"}},
            "GenericGemma3TextForTokenClassification",
        ),
        (
            "qa",
            {
                "train": {"path": "tydiqa_goldp/swahili_tydiqa_train.json"},
                "test": {"path": "tydiqa_goldp/swahili_tydiqa_dev.json"},
            },
            "GenericGemma3TextForQuestionAnswering",
        ),
        ("nli", {"train": {"path": "xnli/dev-sw.tsv"}}, "Gemma3TextForSequenceClassification"),  # transformers' own
    ],
)
def test_finetune_runs_on_gemma3(gemma_with_tokenizer, tmp_path, shared_data, monkeypatch, name, spec, head_class):
    """`finetune` on the tiny Gemma 3 with a handful of Swahili examples: NER and QA with the generic heads,
    NLI with transformers' own; scores for every test example, and the head named in the result."""
    from vocabtransfer.evaluate.tasks import get_task, load_splits
    from vocabtransfer.app.params import load_params

    monkeypatch.setenv("VOCABTRANSFER_DATA", str(shared_data))
    params = load_params(REPO / "params.yaml")
    small = {"max_train": 8, "max_test": 6, "max_length": 64, "batch_size": 4, "epochs": 1}
    task = get_task(name, {**params["eval"]["tasks"][name], **small, **({"doc_stride": 24} if name == "qa" else {})})
    splits = load_splits(task, spec, f"eval.tasks.{name}.data.sw", seed=42)
    result, trainer = finetune_eval.finetune(
        task=task, splits=splits, model_dir=gemma_with_tokenizer, seed=1, output_dir=tmp_path / "ckpt"
    )
    assert "not_run" not in result and result["head_class"] == head_class == type(trainer.model).__name__
    assert result["n_test"] == len(result["examples"]["ids"]) == len(result["examples"]["clusters"]) == 6
    assert set(result["metrics"]) >= {task.metric} and 0 <= result["metrics"][task.metric] <= 100
    assert result["n_train_features"] >= 8 and result["pad_token_set"] is None
