"""Task heads for decoders that transformers has none for: a linear layer over the body's last hidden states.

transformers 5.23 has token-classification and question-answering heads for GPT-2, Llama, Qwen2 and Gemma 1/2,
but for Gemma 3 (`gemma3_text`, the offline real source) only sequence classification, and for GPT-J no token
classification. Its own heads for these decoders are thin: `GemmaForTokenClassification` is
`transformers.modeling_layers.GenericForTokenClassification` mixed into `GemmaPreTrainedModel`. `head_class`
builds the same class for any decoder-only architecture:

  1. the body: `AutoModel`'s class for the config's model type (`Gemma3TextModel`);
  2. its `…PreTrainedModel` base (`Gemma3PreTrainedModel`): the weight initialisation, the attention
     backends, and the attribute the body lives under (`base_model_prefix`: `model`, `transformer`), so that
     `from_pretrained` on a `…ForCausalLM` directory loads the body's weights, drops `lm_head` and initialises
     the head (under the caller's seed) like transformers' own heads;
  3. transformers' mixin for the task: `GenericForTokenClassification` (dropout, then `score`: hidden size →
     `num_labels`; loss: cross-entropy over the positions whose label is not -100) or
     `GenericForQuestionAnswering` (`qa_outputs`: hidden size → 2, the start and end logits; loss: the mean
     of the start and end cross-entropies, positions clamped to the sequence length and ignored there).

The class is named `Generic<Body>For<Task>` (`GenericGemma3TextForTokenClassification`): the prefix says it is
this module's head, the `For<Task>` suffix selects transformers' loss for it. `save_pretrained` writes the
head's weights with the body's and the class name into config.json's `architectures` (next to `num_labels`
and `id2label`); `from_pretrained` (below) reads the directory back. transformers' `AutoModelFor…` classes do
not know these names: such a directory loads through this module (the pipeline saves none; `finetune_eval`
keeps no model).

A head applies to a decoder-only text model only (`unsupported` says why not otherwise): an encoder's head
would need its own pooling conventions, an encoder-decoder's body needs decoder inputs, and a multimodal
config (model type `gemma3`) is loaded through its text part (`gemma3_text`). A decoder's hidden state at a
token has seen only the tokens before it, as with transformers' own decoder heads: QA reads the question
before the context, NER labels each word from its left context.
"""

from __future__ import annotations

import functools

import transformers
from transformers.models.auto import modeling_auto
from transformers import AutoConfig, modeling_layers, PreTrainedModel


from vocabtransfer.errors import VocabTransferError

# the task's transformers head (an `AutoModelFor…` name) -> the transformers mixin that builds it on a body
MIXINS = {
    "AutoModelForTokenClassification": "GenericForTokenClassification",
    "AutoModelForQuestionAnswering": "GenericForQuestionAnswering",
}


def unsupported(head: str, config) -> str | None:
    """Why no generic `head` (an `AutoModelFor…` name) applies to the architecture of `config`, None when one does."""

    model_type = config.model_type
    if head not in MIXINS:
        return (
            f"no generic {head.removeprefix('AutoModelFor')} head exists (the generic heads: "
            f"{', '.join(h.removeprefix('AutoModelFor') for h in MIXINS)})"
        )
    # decoder-only: a causal LM and no masked LM (BERT and XLM-R have both), not an encoder-decoder
    if (
        config.is_encoder_decoder
        or model_type not in modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
        or model_type in modeling_auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES
    ):
        return f"model type {model_type!r} is not a decoder-only language model (the generic heads are for those)"
    if config.get_text_config() is not config:
        return (
            f"model type {model_type!r} is multimodal; fine-tune its text model (e.g. gemma3_text for gemma3) "
            "to use the generic heads"
        )
    if model_type not in modeling_auto.MODEL_MAPPING_NAMES:
        return f"transformers has no AutoModel body for model type {model_type!r} to put a generic head on"
    return None


def _pretrained_base(body_cls):
    """The architecture's `…PreTrainedModel` (the class in the body's MRO right below `PreTrainedModel`)."""

    for cls in body_cls.__mro__:
        if PreTrainedModel in cls.__bases__:
            return cls
    return PreTrainedModel


def head_class(head: str, config) -> type[PreTrainedModel]:
    """The generic `head` class for `config`'s architecture (`GenericGemma3TextForTokenClassification`);
    one clear error when `unsupported` says it does not apply."""
    why = unsupported(head, config)
    if why is not None:
        raise VocabTransferError(f"generic head: {why}")
    return _build(head, config.model_type)


@functools.cache
def _build(head: str, model_type: str) -> type[PreTrainedModel]:

    body_cls = getattr(transformers, modeling_auto.MODEL_MAPPING_NAMES[model_type])
    base = _pretrained_base(body_cls)
    mixin = getattr(modeling_layers, MIXINS[head])
    name = f"Generic{body_cls.__name__.removesuffix('Model')}For{head.removeprefix('AutoModelFor')}"

    def body(self):
        return getattr(self, self.base_model_prefix)

    return type(
        name,
        (mixin, base),
        {
            "__module__": __name__,
            "__doc__": f"{mixin.__name__} (transformers) on {body_cls.__name__}: a linear layer over its last hidden "
            f"states ({__name__}).",
            "config_class": body_cls.config_class,
            # where the body's weights live in a checkpoint of this architecture (`model.`, `transformer.`)
            "base_model_prefix": base.base_model_prefix or "model",
            "input_modalities": ("text",),
            # the QA mixin assumes `embed_tokens`; every body answers get/set_input_embeddings
            "get_input_embeddings": lambda self: body(self).get_input_embeddings(),
            "set_input_embeddings": lambda self, value: body(self).set_input_embeddings(value),
        },
    )


def from_pretrained(path, **kwargs):
    """A directory saved from a generic head, loaded with the head its config.json names in `architectures`."""

    config = AutoConfig.from_pretrained(str(path))
    name = (config.architectures or [""])[0]
    heads = [h for h in MIXINS if name.startswith("Generic") and name.endswith(h.removeprefix("AutoModel"))]
    if not heads:
        raise VocabTransferError(
            f"{path}/config.json: architectures names {name!r}, not a generic head of "
            f"{__name__}; load it with its transformers class"
        )
    return head_class(heads[0], config).from_pretrained(str(path), **kwargs)
