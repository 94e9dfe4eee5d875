"""Shared pieces of the probe tests: Gemma-style sentencepiece tokenizers trained on the fly."""

from __future__ import annotations

import io
from pathlib import Path

from workload.probes.tokenizer import SAMPLES

CORPUS = SAMPLES * 3 + ["The weather is nice today, 2026.", "我爱你 ❤️ 😂 hello world"] * 5

# Gemma's own sentencepiece spec: no normalization, no dummy prefix, byte fallback.
GEMMA_SPEC = dict(
    normalization_rule_name="identity", add_dummy_prefix=False, remove_extra_whitespaces=False, byte_fallback=True
)
# sentencepiece's defaults: NFKC folds full-width punctuation, unknown characters become <unk>.
DEFAULT_SPEC = dict(normalization_rule_name="nmt_nfkc", add_dummy_prefix=True, byte_fallback=False)


def train_sentencepiece(out_dir: Path, **spec) -> Path:
    import sentencepiece as spm

    out_dir.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(CORPUS),
        model_writer=buf,
        vocab_size=400,
        model_type="bpe",
        character_coverage=1.0,
        hard_vocab_limit=False,
        split_digits=True,
        pad_id=0,
        eos_id=1,
        bos_id=2,
        unk_id=3,
        pad_piece="<pad>",
        eos_piece="<eos>",
        bos_piece="<bos>",
        unk_piece="<unk>",
        num_threads=1,
        minloglevel=2,
        **spec,
    )
    (out_dir / "tokenizer.model").write_bytes(buf.getvalue())
    return out_dir


def multirank_worker(rank: int, world_size: int, store: str, mode: str, out_dir: str) -> None:
    """One gloo rank for the multi-rank probe tests; writes its records to out_dir/rank<N>.json.

    mode "healthy": every rank runs the collective probes through run_probes.
    mode "stuck": rank 0 runs the multi-rank probe with a 2 s deadline while rank 1 never joins.
    """
    import datetime
    import json
    import os
    import time

    import torch
    import torch.distributed as dist

    from workload.probes import run_probes
    from workload.probes._common import ProbeContext
    from workload.probes.collective import multi_rank_collective

    dist.init_process_group(
        "gloo", init_method=f"file://{store}", world_size=world_size, rank=rank, timeout=datetime.timedelta(seconds=30)
    )
    if mode == "healthy":
        records = run_probes(torch.device("cpu"), only=["collective_smoke", "multi_rank_collective"])
    elif rank == 0:
        started = time.perf_counter()
        records = [multi_rank_collective(ProbeContext(torch.device("cpu")), timeout_s=2.0)]
        records[0]["values"]["waited_s"] = time.perf_counter() - started
    else:
        time.sleep(4)
        records = []
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(records, f)
    os._exit(0)  # a stuck collective may still hold the group; do not wait for its teardown
