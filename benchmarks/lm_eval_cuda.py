"""The lm_eval stage (vocabtransfer.evaluate.harness.run) on a tiny random LlamaForCausalLM, once on CPU and once on
CUDA, over local_xnli_sw (multiple choice) and local_tydiqa_sw (generative): scores in [0, 1], item counts, and the
XNLI choices' log-likelihoods of the two devices compared. By hand, on a machine with a GPU:

    VOCABTRANSFER_DATA=../shared/data python benchmarks/lm_eval_cuda.py [LIMIT] [cpu,cuda]
"""

import json
import sys
import tempfile
import time
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from vocabtransfer.app.params import validate_params
from vocabtransfer.evaluate import harness
from vocabtransfer.io import read_json, read_parquet
from vocabtransfer.pipeline.stage_spec import Context, Stage
from vocabtransfer.plan.params_root import Params
from smoke_inputs import DATA  # the data root the pipeline reads

LIMIT = int(sys.argv[1]) if len(sys.argv) > 1 else 20
devices = sys.argv[2].split(",") if len(sys.argv) > 2 else ["cpu", "cuda"]
root = Path(tempfile.mkdtemp(prefix="lm_eval_cuda_"))
lines = [s.strip() for s in (DATA / "pretrain_text/sw.txt").open(encoding="utf-8") if s.strip()][:2000]
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
tok.post_processor = processors.ByteLevel(trim_offsets=True)
tok.train_from_iterator(
    lines,
    trainers.BpeTrainer(vocab_size=1000, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False),
)
tok.add_special_tokens(["<|endoftext|>"])
tokenizer = PreTrainedTokenizerFast(
    tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|endoftext|>", unk_token="<|endoftext|>"
)
torch.manual_seed(0)
model = LlamaForCausalLM(
    LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=4096,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
)
model_dir = root / "model"
model.save_pretrained(model_dir)
tokenizer.save_pretrained(model_dir)
# the params as a job reads them: validated, every default filled in
params = Params(
    validate_params(
        {
            "seed": 7,
            "languages": ["sw"],
            "source_model": str(model_dir),
            "corpus": {"sources": {"sw": {"path": "unused.txt"}}},
            "init": {"methods": ["random"]},
            "pretrain": {"methods": [], "objectives": [], "pairs": [], "seeds": 1},
            "lm_eval": {
                "tasks": ["local_xnli_{lang}", "sw:local_tydiqa_sw"],
                "num_fewshot": 0,
                "limit": LIMIT,
                "batch_size": 8,
            },
        }
    )
)
stage = Stage(name="harness", run=harness.run, help="", wildcards=("lang", "model"))
results, ok = {}, True
for device in devices:
    out = root / device
    ctx = Context(
        stage=stage,
        params=params,
        wildcards={"lang": "sw", "model": "source"},
        input={"model": model_dir},
        output={"scores": out / "scores.json", "samples": out / "samples.parquet"},
        threads=1,
        device=device,
    )
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    harness.run(ctx)
    seconds = time.perf_counter() - start
    scores, samples = read_json(out / "scores.json"), read_parquet(out / "samples.parquet").to_pandas()
    results[device] = (scores, samples)
    peak = torch.cuda.max_memory_allocated() if device.startswith("cuda") else 0
    print(f"== {device}: {seconds:.1f} s (stage's own: {scores['seconds']} s), peak CUDA memory {peak / 2**20:.1f} MiB")
    print(json.dumps(scores["scores"], indent=1), "versions:", scores["versions"])
    for task, metrics in (("local_xnli_sw", ["acc"]), ("local_tydiqa_sw", ["exact_match", "f1"])):
        rows = samples[samples.task == task]
        n_ok = scores["scores"][task]["n"] == LIMIT and rows.doc_id.nunique() == LIMIT
        range_ok = all(
            rows[rows.metric == m].value.between(0, 1).all() and 0 <= scores["scores"][task][m] <= 1 for m in metrics
        )
        print(
            f"{device} {task}: n={scores['scores'][task]['n']} (expected {LIMIT}) {'OK' if n_ok else 'WRONG'}; "
            f"values in [0, 1]: {range_ok}"
        )
        ok &= n_ok and range_ok
    if device.startswith("cuda"):
        ok &= peak > 0
        print("model ran on CUDA (peak memory > 0):", peak > 0)
if len(results) == 2:
    (a, (sa, xa)), (b, (sb, xb)) = results.items()
    la = xa[xa.task == "local_xnli_sw"].sort_values("doc_id").loglikelihoods.tolist()
    lb = xb[xb.task == "local_xnli_sw"].sort_values("doc_id").loglikelihoods.tolist()
    diff = max(abs(p - q) for u, v in zip(la, lb) for p, q in zip(u, v))
    same_acc = sa["scores"]["local_xnli_sw"]["acc"] == sb["scores"]["local_xnli_sw"]["acc"]
    ga = xa[(xa.task == "local_tydiqa_sw") & (xa.metric == "f1")].sort_values("doc_id").response.tolist()
    gb = xb[(xb.task == "local_tydiqa_sw") & (xb.metric == "f1")].sort_values("doc_id").response.tolist()
    print(
        f"{a} vs {b}: max |Δ log-likelihood| over XNLI choices {diff:.2e} (largest |ll| "
        f"{max(abs(p) for u in la for p in u):.1f}); same acc: {same_acc}; same generations: "
        f"{sum(x == y for x, y in zip(ga, gb))}/{len(ga)}"
    )
    ok &= diff < 1e-3 * max(1.0, max(abs(p) for u in la for p in u))
print("LM_EVAL_CHECK", "PASS" if ok else "FAIL")
sys.exit(0 if ok else 1)
