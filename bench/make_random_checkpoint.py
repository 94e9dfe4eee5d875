"""Write a randomly initialised gemma-2b-shaped checkpoint (+ a sentencepiece tokenizer trained on the bundled
sample) to a directory, so `python -m workload train --model DIR` exercises the local-path loading code on a
real-sized model where the hub cannot be reached.

    python bench/make_random_checkpoint.py /tmp/gemma-2b-random
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from workload.data.dataset import load_dataset  # noqa: E402
from workload.model.classifier import load_tokenizer  # noqa: E402
from workload.model.tiny import train_tokenizer  # noqa: E402

GEMMA_2B = dict(
    vocab_size=256000,
    hidden_size=2048,
    intermediate_size=16384,
    num_hidden_layers=18,
    num_attention_heads=8,
    num_key_value_heads=1,
    head_dim=256,
)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", type=Path)
    p.add_argument("--layers", type=int, default=GEMMA_2B["num_hidden_layers"])
    args = p.parse_args(argv)
    from transformers import GemmaConfig, GemmaForCausalLM

    data = load_dataset()
    train_tokenizer([e.text for e in data.train], args.out)
    tokenizer = load_tokenizer(args.out)
    config = GemmaConfig(
        **{**GEMMA_2B, "num_hidden_layers": args.layers}, pad_token_id=0, eos_token_id=1, bos_token_id=2
    )
    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    with torch.device(device):
        model = GemmaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(args.out, safe_serialization=True)
    tokenizer.save_pretrained(args.out)
    print(f"wrote {args.out}: {sum(p.numel() for p in model.parameters()) / 1e9:.2f}B parameters")
    return 0


if __name__ == "__main__":
    sys.exit(main())
