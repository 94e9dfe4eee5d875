"""Gemma-family classifiers: hub id / local path / tiny random configs, LoRA, adapter export and reload."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from ..errors import ModelError, PathError, UnsupportedFamily
from .tiny import TINY_FAMILIES, is_tiny, tiny_config_kwargs, train_tokenizer

# transformers' sequence-classification class per model_type; None: no such class, we provide the head.
SEQ_CLS_CLASSES = {
    "gemma": "GemmaForSequenceClassification",
    "gemma2": "Gemma2ForSequenceClassification",
    "gemma3": "Gemma3ForSequenceClassification",
    "gemma3_text": "Gemma3TextForSequenceClassification",
    "gemma4": None,
    "gemma4_text": None,
}
CONFIG_CLASSES = {
    "gemma": "GemmaConfig",
    "gemma2": "Gemma2Config",
    "gemma3_text": "Gemma3TextConfig",
    "gemma4_text": "Gemma4TextConfig",
}
ADAPTER_META = "workload_adapter.json"
LABEL_MAP = "label_map.json"


def _hf():
    import transformers

    return transformers


def _transformers_class(name: str, family: str):
    transformers = _hf()
    cls = getattr(transformers, name, None)
    if cls is None:
        raise UnsupportedFamily(
            f"the installed transformers {transformers.__version__} has no {name}: "
            f"Gemma family {family!r} is not supported by it; install a transformers "
            "release that includes this family"
        )
    return cls


class LastTokenClassifier(nn.Module):
    """A `score` head on a decoder backbone, pooling the last non-pad token (for Gemma 4, which has none)."""

    def __init__(self, backbone: nn.Module, num_labels: int):
        super().__init__()
        self.model = backbone
        self.config = backbone.config
        self.score = nn.Linear(backbone.config.hidden_size, num_labels, bias=False)
        nn.init.normal_(self.score.weight, std=getattr(backbone.config, "initializer_range", 0.02))

    def forward(self, input_ids, attention_mask=None, **_):
        from transformers.modeling_outputs import SequenceClassifierOutput

        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        hidden = self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        last = (positions * attention_mask.to(positions.dtype)).argmax(-1)
        pooled = hidden[torch.arange(hidden.shape[0], device=hidden.device), last]
        return SequenceClassifierOutput(logits=self.score(pooled.to(self.score.weight.dtype)))


@dataclass
class LoadedModel:
    model: nn.Module  # PeftModel after apply_lora
    tokenizer: object
    family: str
    model_id: str
    revision: str | None
    base_dir: Path | None = None  # where a tiny base was materialised (saved with the adapter)


def _dtype_kwargs(torch_dtype: torch.dtype) -> dict:
    import transformers

    major = int(transformers.__version__.split(".")[0])
    return {"dtype": torch_dtype} if major >= 5 else {"torch_dtype": torch_dtype}


def _attn_kwargs(attn: str | None) -> dict:
    """None/"auto" lets transformers choose (Gemma 2 softcapping, for instance, is eager-only)."""
    return {} if attn in (None, "auto") else {"attn_implementation": attn}


def _from_config(cls, config, attn: str | None):
    try:
        return cls._from_config(config, **_attn_kwargs(attn))
    except ValueError as e:
        raise ModelError(f"{cls.__name__} with attention implementation {attn!r}: {e}") from e


def load_tokenizer(source: str | Path):
    """A Gemma tokenizer: from a directory with tokenizer.model only (tiny) or any HF tokenizer source."""
    from transformers import AutoTokenizer

    source_path = Path(source)
    if (
        source_path.is_dir()
        and (source_path / "tokenizer.model").is_file()
        and not (source_path / "tokenizer_config.json").is_file()
    ):
        tok = _transformers_class("GemmaTokenizer", "gemma").from_pretrained(str(source_path))
    else:
        tok = AutoTokenizer.from_pretrained(str(source))
    if tok.pad_token_id is None:
        raise ModelError(f"tokenizer of {source} has no pad token; batches need one")
    return tok


def _tiny_model(model_id: str, num_labels: int, tokenizer, attn: str | None, seed: int) -> tuple[nn.Module, str]:
    family = TINY_FAMILIES[model_id]
    config = _transformers_class(CONFIG_CLASSES[family], family)(
        **tiny_config_kwargs(family, len(tokenizer)), num_labels=num_labels
    )
    torch.manual_seed(seed)
    if family == "gemma4_text":
        backbone = _from_config(_transformers_class("Gemma4TextModel", family), config, attn)
        return LastTokenClassifier(backbone, num_labels), family
    return _from_config(_transformers_class(SEQ_CLS_CLASSES[family], family), config, attn), family


def _pretrained_model(model_id: str, revision: str | None, num_labels: int, torch_dtype, attn: str | None):
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(model_id, revision=revision)
    except (KeyError, ValueError) as e:
        import transformers

        raise UnsupportedFamily(
            f"the installed transformers {transformers.__version__} cannot read the config of {model_id}: {e}"
        ) from e
    except OSError as e:
        raise ModelError(f"cannot load {model_id}: {e}") from e
    family = config.model_type
    if family not in SEQ_CLS_CLASSES:
        raise ModelError(f"{model_id} is a {family!r} model, not a Gemma family ({sorted(SEQ_CLS_CLASSES)})")
    kwargs = dict(revision=revision, **_attn_kwargs(attn), **_dtype_kwargs(torch_dtype))
    try:
        if family == "gemma4_text":
            backbone = _transformers_class("Gemma4TextModel", family).from_pretrained(model_id, **kwargs)
            return LastTokenClassifier(backbone, num_labels), family
        if family == "gemma4":
            full = _transformers_class("Gemma4Model", family).from_pretrained(model_id, **kwargs)
            return LastTokenClassifier(full.language_model, num_labels), family
        cls = _transformers_class(SEQ_CLS_CLASSES[family], family)
        return cls.from_pretrained(model_id, num_labels=num_labels, **kwargs), family
    except OSError as e:
        raise ModelError(f"cannot load weights of {model_id}: {e}") from e
    except ValueError as e:
        raise ModelError(f"cannot load {model_id}: {e}") from e


def _looks_like_path(model_id: str) -> bool:
    return model_id.startswith((".", "/", "~")) or Path(model_id).expanduser().exists() or model_id.count("/") > 1


def check_model_source(model_id: str) -> None:
    """A local model path must be a directory with config.json, a hub id is `owner/name` (PathError otherwise,
    with a "did you mean" for a near miss of a tiny model); hub ids are checked further when loaded."""
    if is_tiny(model_id):
        return
    if not _looks_like_path(model_id):
        if "/" not in model_id:  # every Gemma on the hub is owner/name (google/gemma-2b): no need to ask it
            import difflib

            near = difflib.get_close_matches(model_id, sorted(TINY_FAMILIES), n=1, cutoff=0.75)
            hint = f"did you mean {near[0]}? " if near else ""
            raise PathError(
                f"--model {model_id}: not a tiny model, a local directory or a hub id (owner/name); "
                f"{hint}tiny models: {', '.join(sorted(TINY_FAMILIES))}"
            )
        return
    path = Path(model_id).expanduser()
    if not path.exists():
        raise PathError(
            f"--model {model_id}: no such directory; pass a model directory (with config.json "
            f"and weights), a hub id such as google/gemma-2b, or one of {sorted(TINY_FAMILIES)}"
        )
    if not (path / "config.json").is_file():
        raise PathError(
            f"--model {model_id}: no config.json in it; a model directory holds what "
            "save_pretrained writes (config.json, *.safetensors, tokenizer files)"
        )


def load_base(
    model_id: str,
    num_labels: int,
    *,
    torch_dtype=torch.float32,
    attn: str | None = None,
    revision: str | None = None,
    seed: int = 42,
    work_dir: Path | None = None,
    tokenizer_texts: list[str] | None = None,
) -> LoadedModel:
    """The base classifier (not yet LoRA-wrapped) and its tokenizer. Tiny models are built and saved to `work_dir`."""
    if is_tiny(model_id):
        if work_dir is None or tokenizer_texts is None:
            raise ModelError(f"{model_id} needs training texts to build its tokenizer")
        base_dir = Path(work_dir)
        train_tokenizer(tokenizer_texts, base_dir)
        tokenizer = load_tokenizer(base_dir)
        model, family = _tiny_model(model_id, num_labels, tokenizer, attn, seed)
        model = model.to(torch_dtype)
        _save_base(model, tokenizer, base_dir, model_id)
        return LoadedModel(model, tokenizer, family, model_id, None, base_dir)
    model, family = _pretrained_model(model_id, revision, num_labels, torch_dtype, attn)
    tokenizer = load_tokenizer(model_id)
    _set_pad(model, tokenizer)
    return LoadedModel(model, tokenizer, family, model_id, revision)


def _set_pad(model: nn.Module, tokenizer) -> None:
    if getattr(model.config, "pad_token_id", None) is None:
        model.config.pad_token_id = tokenizer.pad_token_id


def _save_base(model: nn.Module, tokenizer, base_dir: Path, model_id: str) -> None:
    backbone = model.model if isinstance(model, LastTokenClassifier) else model
    backbone.save_pretrained(str(base_dir), safe_serialization=True)
    tokenizer.save_pretrained(str(base_dir))
    (base_dir / "tiny.json").write_text(json.dumps({"model_id": model_id}))


def _load_tiny_base(base_dir: Path, num_labels: int, torch_dtype, attn: str | None) -> tuple[nn.Module, object, str]:
    from transformers import AutoConfig

    tokenizer = load_tokenizer(base_dir)
    family = AutoConfig.from_pretrained(str(base_dir)).model_type
    kwargs = dict(**_attn_kwargs(attn), **_dtype_kwargs(torch_dtype))
    if family == "gemma4_text":
        backbone = _transformers_class("Gemma4TextModel", family).from_pretrained(str(base_dir), **kwargs)
        return LastTokenClassifier(backbone, num_labels), tokenizer, family
    cls = _transformers_class(SEQ_CLS_CLASSES[family], family)
    return cls.from_pretrained(str(base_dir), num_labels=num_labels, **kwargs), tokenizer, family


def apply_lora(
    model: nn.Module, r: int, alpha: int, dropout: float, target_modules, train_embeddings: bool = False
) -> nn.Module:
    """Wrap with LoRA on `target_modules`; the `score` head (and optionally `embed_tokens`) is trained in full."""
    from peft import LoraConfig, get_peft_model

    full = ["score"] + (["embed_tokens"] if train_embeddings else [])
    config = LoraConfig(
        r=r,
        lora_alpha=alpha,
        lora_dropout=dropout,
        target_modules=list(target_modules),
        modules_to_save=full,
        bias="none",
    )
    return get_peft_model(model, config)


def make_trainable_fp32(model: nn.Module) -> None:
    """Trainable parameters in fp32 (required for fp16 AMP: GradScaler cannot unscale fp16 gradients)."""
    for p in model.parameters():
        if p.requires_grad and p.dtype != torch.float32:
            p.data = p.data.float()


def count_parameters(model: nn.Module) -> tuple[int, int, int]:
    """(all base parameters, trainable parameters, non-embedding base parameters)."""
    total = trainable = embedding = 0
    for name, p in model.named_parameters():
        if "lora_" in name or "modules_to_save" in name:
            trainable += p.numel() if p.requires_grad else 0
            continue
        total += p.numel()
        if "embed" in name:
            embedding += p.numel()
    return total, trainable, total - embedding


def save_adapter(loaded: LoadedModel, out_dir: Path, labels: tuple[str, ...], recipe_info: dict) -> Path:
    """Adapter + `score` head (safetensors), label map, and what predict needs to rebuild the base."""
    out_dir.mkdir(parents=True, exist_ok=True)
    loaded.model.save_pretrained(str(out_dir), safe_serialization=True)
    (out_dir / LABEL_MAP).write_text(
        json.dumps(
            {"labels": list(labels), "label2id": {name: i for i, name in enumerate(labels)}},
            ensure_ascii=False,
            indent=1,
        )
    )
    base = loaded.model_id
    if loaded.base_dir is not None:
        import shutil

        target = out_dir / "base"
        if target.resolve() != loaded.base_dir.resolve():
            shutil.copytree(loaded.base_dir, target, dirs_exist_ok=True)
        base = "base"
    meta = {
        "base_model": base,
        "model_id": loaded.model_id,
        "revision": loaded.revision,
        "family": loaded.family,
        **recipe_info,
    }
    (out_dir / ADAPTER_META).write_text(json.dumps(meta, indent=1))
    return out_dir


def read_adapter_meta(adapter_dir: Path) -> tuple[dict, tuple[str, ...]]:
    """(workload_adapter.json, labels) of an adapter dir; PathError, saying what to pass, when it is not one."""
    hint = "pass the adapter/ directory a `python -m workload train --out DIR` run wrote (DIR/adapter)"
    if not adapter_dir.is_dir():
        raise PathError(f"--adapter {adapter_dir}: no such directory; {hint}")
    try:
        meta = json.loads((adapter_dir / ADAPTER_META).read_text())
        labels = tuple(json.loads((adapter_dir / LABEL_MAP).read_text())["labels"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise PathError(
            f"--adapter {adapter_dir}: not a workload adapter ({ADAPTER_META} or {LABEL_MAP} "
            f"missing or unreadable: {e}); {hint}"
        ) from None
    return meta, labels


def load_adapter(adapter_dir: str | Path, *, torch_dtype=torch.float32, attn: str | None = None):
    """Rebuild base + adapter for inference: (model, tokenizer, labels, meta)."""
    from peft import PeftModel

    adapter_dir = Path(adapter_dir)
    meta, labels = read_adapter_meta(adapter_dir)
    if meta["base_model"] == "base":
        base, tokenizer, _ = _load_tiny_base(adapter_dir / "base", len(labels), torch_dtype, attn)
    else:
        base, _ = _pretrained_model(meta["model_id"], meta.get("revision"), len(labels), torch_dtype, attn)
        tokenizer = load_tokenizer(meta["model_id"])
        _set_pad(base, tokenizer)
    model = PeftModel.from_pretrained(base, str(adapter_dir))
    make_trainable_fp32(model)
    for p in model.parameters():
        p.requires_grad_(False)
    model.eval()
    return model, tokenizer, labels, meta
