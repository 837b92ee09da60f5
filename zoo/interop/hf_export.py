"""`zoo.export_hf`: a causal ``moe_lm`` written as a Mixtral checkpoint (config.json and
safetensors in transformers' per-expert layout, sharded with an index), with the byte-level
tokenizer's files, for ``transformers.MixtralForCausalLM.from_pretrained``."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
from safetensors.torch import save_file
from tqdm import tqdm

from zoo.architectures.moe.moe_transformer import MoETransformer
from zoo.errors import InvalidArgumentError
from zoo.interop.hf_checkpoint import CONFIG_FILE, INDEX_FILE, SINGLE_FILE
from zoo.store.files import atomic_files
from zoo.tokenizer import ByteTokenizer


def export_hf(model: nn.Module, directory: str | os.PathLike, max_shard_size: int = 5 * 2**30) -> Path:
    """Write ``model`` (a causal moe_lm with its lm head, Mixtral options only) as a Mixtral
    checkpoint: config.json and safetensors in the per-expert layout that transformers'
    ``save_pretrained`` writes, sharded above ``max_shard_size`` bytes with an index. A
    byte-level model (`ByteTokenizer`'s vocabulary) gets that tokenizer's files too
    (`ByteTokenizer.hf_files`), for ``transformers.AutoTokenizer``. Files appear whole or not
    at all; the config is written last."""
    _check_exportable(model)
    directory = Path(directory)
    tensors = dict(_mixtral_tensors(model))
    shards = _split_shards(tensors, max_shard_size)
    names = (
        [SINGLE_FILE]
        if len(shards) == 1
        else [f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors" for i in range(len(shards))]
    )
    with atomic_files(directory, last=(CONFIG_FILE,)) as staging:
        for name, shard in zip(names, tqdm(shards, desc="writing shards", unit="shard", disable=len(shards) == 1)):
            standalone = {k: tensors[k].contiguous().clone() for k in shard}  # views of fused experts
            save_file(standalone, staging / name, metadata={"format": "pt"})
        if len(shards) > 1:
            index = {
                "metadata": {"total_size": sum(t.numel() * t.element_size() for t in tensors.values())},
                "weight_map": {key: name for name, shard in zip(names, shards) for key in shard},
            }
            (staging / INDEX_FILE).write_text(json.dumps(index, indent=2) + "\n")
            names.append(INDEX_FILE)
        (staging / CONFIG_FILE).write_text(json.dumps(_mixtral_config(model), indent=2) + "\n")
        tokenizer = ByteTokenizer()
        if model.config.vocab_size == tokenizer.vocab_size:
            for name, content in tokenizer.hf_files(model.config.max_position_embeddings).items():
                (staging / name).write_text(json.dumps(content, indent=2) + "\n")
                names.append(name)
        for stale in (SINGLE_FILE, INDEX_FILE, *tokenizer.hf_file_names):  # a previous export's other files
            if stale not in names:
                (directory / stale).unlink(missing_ok=True)
    return directory


def _check_exportable(model: nn.Module) -> None:
    is_lm = isinstance(model, MoETransformer) and model.causal and model.head == "lm"
    if not is_lm or not isinstance(model.lm_head, nn.Linear):
        raise InvalidArgumentError("export_hf writes causal language models: a moe_lm with its 'lm' head")
    cfg = model.config
    unsupported = {
        "shared_expert_size": cfg.shared_expert_size != 0,
        "dense_layers": bool(cfg.dense_layers),
        "qkv_bias": cfg.qkv_bias,
        "qk_norm": cfg.qk_norm,
        "clip_qkv": cfg.clip_qkv is not None,
        "norm_topk_prob": not cfg.norm_topk_prob,
        "rope_theta": cfg.rope_theta is None,
        "capacity_factor": cfg.capacity_factor is not None,
    }
    bad = [name for name, is_bad in unsupported.items() if is_bad]
    if bad:
        raise InvalidArgumentError(f"Mixtral has no equivalent of these options of the model: {', '.join(bad)}")


def _mixtral_tensors(model: MoETransformer) -> Iterator[tuple[str, torch.Tensor]]:
    """(Mixtral key, tensor) pairs; expert tensors are views of the fused parameters."""
    inter = model.config.intermediate_size
    for name, tensor in model.state_dict().items():
        fused = re.match(r"^layers\.(\d+)\.mlp\.experts\.(gate_up_proj|down_proj)$", name)
        if fused:
            prefix = f"model.layers.{fused[1]}.block_sparse_moe.experts"
            for e, weight in enumerate(tensor):
                if fused[2] == "down_proj":
                    yield f"{prefix}.{e}.w2.weight", weight
                else:
                    yield f"{prefix}.{e}.w1.weight", weight[:inter]
                    yield f"{prefix}.{e}.w3.weight", weight[inter:]
        elif name == "lm_head.weight":
            if not model.config.tie_word_embeddings:
                yield name, tensor
        else:
            yield "model." + name.replace(".mlp.gate.", ".block_sparse_moe.gate."), tensor


def _split_shards(tensors: dict[str, torch.Tensor], max_shard_size: int) -> list[list[str]]:
    """Keys grouped in order into shards of at most ``max_shard_size`` bytes (a bigger tensor
    gets a shard of its own)."""
    shards: list[list[str]] = [[]]
    size = 0
    for key, tensor in tensors.items():
        nbytes = tensor.numel() * tensor.element_size()
        if shards[-1] and size + nbytes > max_shard_size:
            shards.append([])
            size = 0
        shards[-1].append(key)
        size += nbytes
    return shards


def _mixtral_config(model: MoETransformer) -> dict[str, Any]:
    cfg = model.config
    dtype = next(model.parameters()).dtype
    return {
        "architectures": ["MixtralForCausalLM"],
        "model_type": "mixtral",
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.hidden_size,
        "intermediate_size": cfg.intermediate_size,
        "num_hidden_layers": cfg.num_layers,
        "num_attention_heads": cfg.num_heads,
        "num_key_value_heads": cfg.num_kv_heads,
        "head_dim": cfg.attention_head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": cfg.max_position_embeddings,
        "initializer_range": cfg.initializer_range,
        "rms_norm_eps": cfg.rms_norm_eps,
        "rope_parameters": {"rope_theta": cfg.rope_theta, "rope_type": "default"},
        "rope_theta": cfg.rope_theta,  # where transformers 4.x reads it
        "sliding_window": cfg.sliding_window,
        "attention_dropout": cfg.attention_dropout,
        "num_local_experts": cfg.num_experts,
        "num_experts_per_tok": cfg.top_k,
        "router_aux_loss_coef": cfg.router_aux_loss_coef,
        "router_jitter_noise": cfg.router_jitter,
        "output_router_logits": False,
        "tie_word_embeddings": cfg.tie_word_embeddings,
        "pad_token_id": cfg.pad_token_id,
        "bos_token_id": cfg.bos_token_id,
        "eos_token_id": cfg.eos_token_id,
        "use_cache": True,
        "dtype": str(dtype).removeprefix("torch."),
    }
