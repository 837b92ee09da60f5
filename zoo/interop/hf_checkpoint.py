"""Hugging Face checkpoints of MoE language models: `load_pretrained` builds ``moe_lm`` or
``moe_encoder`` from a Mixtral, Qwen2-MoE or OLMoE directory (config.json + safetensors, one file
or shards with model.safetensors.index.json); `export_hf` writes a directory that
``transformers.MixtralForCausalLM.from_pretrained`` loads. zoo never imports transformers.

Expert weights are accepted in both layouts found on the hub: one tensor per expert
(``block_sparse_moe.experts.E.w1/w2/w3`` for Mixtral, ``mlp.experts.E.gate_proj/up_proj/down_proj``
for Qwen2-MoE and OLMoE) and transformers 5's packed ``mlp.experts.gate_up_proj/down_proj``.
Shards are read one tensor at a time (memory-mapped) into the model's preallocated
parameters, so loading needs no more memory than the model itself.
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
from tqdm import tqdm

from zoo.architectures import ARCHS
from zoo.architectures.moe.moe_transformer import MoETransformer
from zoo.errors import ConfigFileError, InvalidArgumentError, WeightsError, WeightsMismatchError, WeightsNotFoundError
from zoo.store import weight_entries
from zoo.store.files import read_json
from zoo.store.model_config import ModelConfig, set_config
from zoo.store.state_dict_files import open_safetensors

CONFIG_FILE = "config.json"
INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"
MODEL_TYPES = ("mixtral", "qwen2_moe", "olmoe")
CHECKPOINT_FILES = (CONFIG_FILE, INDEX_FILE, "*.safetensors")  # what loading a checkpoint reads
_DEFAULT_ROPE_THETA = {"mixtral": 1e6, "qwen2_moe": 1e4, "olmoe": 1e4}  # the config classes' defaults

# one expert's projection in the per-expert layouts: (layer, expert, projection)
_EXPERT_KEY = re.compile(
    r"^layers\.(\d+)\.(?:block_sparse_moe|mlp)\.experts\.(\d+)\.(w1|w2|w3|gate_proj|up_proj|down_proj)\.weight$"
)
_GATE_PART, _UP_PART, _DOWN_PART = ("w1", "gate_proj"), ("w3", "up_proj"), ("w2", "down_proj")


def config_to_kwargs(config: dict[str, Any]) -> dict[str, Any]:
    """zoo model options (MoEConfig fields) from a Hugging Face config.json dict."""
    model_type = config.get("model_type")
    if model_type not in MODEL_TYPES:
        raise InvalidArgumentError(
            f"unsupported model_type {model_type!r}; zoo reads {', '.join(MODEL_TYPES)} checkpoints"
        )
    if config.get("hidden_act", "silu") != "silu":
        raise InvalidArgumentError(
            f"zoo's experts are SwiGLU; this checkpoint uses hidden_act={config['hidden_act']!r}"
        )
    rope = config.get("rope_parameters") or {}
    for scaling in (rope, config.get("rope_scaling") or {}):
        kind = scaling.get("rope_type", scaling.get("type", "default"))
        if kind != "default":
            raise InvalidArgumentError(
                f"rope_type {kind!r} (scaled rotary embeddings) is not supported; only 'default'"
            )
    kwargs = _shared_kwargs(config, model_type, rope)
    return kwargs | _TYPE_KWARGS[model_type](config, kwargs)


def _shared_kwargs(config: dict[str, Any], model_type: str, rope: dict[str, Any]) -> dict[str, Any]:
    """The options every model type spells the same way."""
    heads = config["num_attention_heads"]
    return dict(
        vocab_size=config["vocab_size"],
        hidden_size=config["hidden_size"],
        num_layers=config["num_hidden_layers"],
        num_heads=heads,
        num_kv_heads=config.get("num_key_value_heads") or heads,
        head_dim=config.get("head_dim"),
        num_experts=config.get("num_local_experts", config.get("num_experts")),
        top_k=config["num_experts_per_tok"],
        max_position_embeddings=config.get("max_position_embeddings", 4096),
        rope_theta=float(rope.get("rope_theta", config.get("rope_theta", _DEFAULT_ROPE_THETA[model_type]))),
        rms_norm_eps=config.get("rms_norm_eps", 1e-5 if model_type != "qwen2_moe" else 1e-6),
        attention_dropout=float(config.get("attention_dropout", 0.0)),
        tie_word_embeddings=config.get("tie_word_embeddings", False),
        pad_token_id=config.get("pad_token_id"),
        bos_token_id=config.get("bos_token_id"),
        eos_token_id=_first(config.get("eos_token_id")),
        router_aux_loss_coef=config.get("router_aux_loss_coef", 0.001),
        router_z_loss_coef=config.get("router_z_loss_coef", 0.0),  # not part of these models' training
        initializer_range=config.get("initializer_range", 0.02),
    )


def _mixtral_kwargs(config: dict[str, Any], shared: dict[str, Any]) -> dict[str, Any]:
    return dict(
        intermediate_size=config["intermediate_size"],
        norm_topk_prob=True,
        sliding_window=config.get("sliding_window"),
        router_jitter=config.get("router_jitter_noise", 0.0),
    )


def _qwen2_moe_kwargs(config: dict[str, Any], shared: dict[str, Any]) -> dict[str, Any]:
    if config.get("use_sliding_window"):
        raise InvalidArgumentError("Qwen2-MoE's per-layer sliding windows (use_sliding_window=true) are not supported")
    step, dense_only = config.get("decoder_sparse_step", 1), set(config.get("mlp_only_layers") or ())
    layers = range(config["num_hidden_layers"])
    return dict(
        intermediate_size=config["moe_intermediate_size"],
        norm_topk_prob=config.get("norm_topk_prob", False),
        shared_expert_size=config.get("shared_expert_intermediate_size", 0),
        dense_intermediate_size=config["intermediate_size"],
        dense_layers=[i for i in layers if i in dense_only or shared["num_experts"] == 0 or (i + 1) % step],
        qkv_bias=config.get("qkv_bias", True),
        num_experts=shared["num_experts"] or 1,  # all layers dense: the value is unused
    )


def _olmoe_kwargs(config: dict[str, Any], shared: dict[str, Any]) -> dict[str, Any]:
    if config.get("attention_bias"):
        raise InvalidArgumentError("OLMoE with attention_bias=true is not supported")
    return dict(
        intermediate_size=config["intermediate_size"],
        norm_topk_prob=config.get("norm_topk_prob", False),
        qk_norm=True,
        clip_qkv=config.get("clip_qkv"),
    )


# each model type's own options, given the shared ones
_TYPE_KWARGS = {"mixtral": _mixtral_kwargs, "qwen2_moe": _qwen2_moe_kwargs, "olmoe": _olmoe_kwargs}


def _first(value: Any) -> Any:
    return value[0] if isinstance(value, list) else value


def load_pretrained(
    arch: str,
    directory: str | os.PathLike,
    *,
    head: str | None = None,
    num_classes: int | None = None,
    dtype: torch.dtype | None = None,
    **overrides: Any,
) -> nn.Module:
    """Build ``arch`` (moe_lm or moe_encoder: the architecture `zoo.loading.resolve` made of the
    name) from the Hugging Face checkpoint in ``directory``; ``overrides`` replace options of its
    config (e.g. ``router_z_loss_coef``). The parameters
    are made in ``dtype`` (default float32). A classification head is freshly initialised (the
    checkpoint's LM head is then left out). What `zoo.load(name, weights=directory)` calls."""
    directory = Path(directory)
    head = _checked_head(arch, head)
    kwargs = {**_config_kwargs(directory / CONFIG_FILE), **overrides}
    files = _shard_files(directory)
    with torch.device("meta"):
        model = _build(arch, head, num_classes, kwargs, directory / CONFIG_FILE)
    _check_size(model, files, directory / CONFIG_FILE)
    model.to(dtype=dtype).to_empty(device="cpu")
    model.tie_weights()  # to_empty made separate tensors
    filler = _ParameterFiller(model)
    for file in tqdm(files, desc="loading shards", unit="shard", disable=len(files) == 1):
        with open_safetensors(file) as f:
            for key in f.keys():
                filler.put(key, f.get_tensor(key))
    filler.check(directory)
    if head != "lm" or not isinstance(model.lm_head, nn.Linear):
        model.reset_classifier(model.num_classes)  # a fresh head in place of the uninitialised one
    model.to(dtype=dtype)
    config = ModelConfig(arch, head, kwargs, weights=str(directory), num_classes=model.num_classes)
    return set_config(model, config)


def _checked_head(arch: str, head: str | None) -> str:
    """The head to build of ``arch``, an architecture that reads these checkpoints."""
    if not weight_entries.arch_spec(arch).hf_checkpoints:
        archs = [name for name, spec in ARCHS.items() if spec.hf_checkpoints]
        raise InvalidArgumentError(f"Hugging Face MoE checkpoints load into {' or '.join(archs)}, not {arch}")
    heads = weight_entries.supported_heads(arch)
    head = head or heads[0]
    if head not in heads:
        raise InvalidArgumentError(f"{arch} has no head {head!r}; choose one of: {', '.join(heads)}")
    return head


def _config_kwargs(path: Path) -> dict[str, Any]:
    """zoo's options from a checkpoint's config.json; anything missing or mistyped names the file."""
    config = _read_json(path)
    if not isinstance(config, dict):
        raise ConfigFileError(f"{path} must hold a JSON object (a transformers config)")
    try:
        kwargs = config_to_kwargs(config)
    except KeyError as error:
        raise ConfigFileError(f"{path}: field {error} is missing; it is not a complete transformers config") from None
    except ConfigFileError:
        raise
    except (TypeError, ValueError, AttributeError, IndexError, OverflowError) as error:
        raise ConfigFileError(f"{path}: {error}") from None
    _check_bounds(kwargs, path)
    return kwargs


# what a config may ask for before anything is built (the largest published MoE models fit):
# sizes up to 2**20, up to 256 layers of up to 512 experts, 20,000 experts in all
_MAX_SIZE, _MAX_LAYERS, _MAX_EXPERTS, _MAX_ALL_EXPERTS = 2**20, 256, 512, 20_000
_SIZES = (
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_heads",
    "num_kv_heads",
    "head_dim",
    "max_position_embeddings",
    "shared_expert_size",
    "dense_intermediate_size",
    "top_k",
)


def _check_bounds(kwargs: dict[str, Any], path: Path) -> None:
    for name in (*_SIZES, "num_layers", "num_experts"):
        value = kwargs.get(name)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or not 0 < value <= _MAX_SIZE):
            raise ConfigFileError(f"{path}: {name}={value!r} must be a whole number from 1 to {_MAX_SIZE:,}")
    layers, experts = kwargs["num_layers"], kwargs.get("num_experts") or 1
    if layers > _MAX_LAYERS or experts > _MAX_EXPERTS or layers * experts > _MAX_ALL_EXPERTS:
        raise ConfigFileError(
            f"{path}: {layers} layers of {experts} experts is beyond what zoo builds "
            f"({_MAX_LAYERS} layers, {_MAX_EXPERTS} experts, {_MAX_ALL_EXPERTS:,} experts in all)"
        )


def _build(arch: str, head: str, num_classes: int | None, kwargs: dict[str, Any], path: Path) -> nn.Module:
    """The architecture on the meta device; options the config gives that it refuses name the file."""
    try:
        return weight_entries.get_builder(arch)(head=head, num_classes=num_classes, **kwargs)
    except (TypeError, ValueError, AttributeError, ZeroDivisionError, OverflowError) as error:
        raise ConfigFileError(f"{path} describes a model zoo cannot build: {error}") from None


def _check_size(model: nn.Module, files: list[Path], path: Path) -> None:
    """Refuse a config describing a model far larger than the tensors the checkpoint holds, before
    any memory is allocated for it (every parameter but a fresh head comes from the files)."""
    held = 0
    for file in files:
        with open_safetensors(file) as f:
            for key in f.keys():
                held += math.prod(f.get_slice(key).get_shape())
    wanted = sum(p.numel() for p in model.parameters())
    if wanted > 2 * held + 10_000_000:
        raise ConfigFileError(
            f"{path} describes a model of {wanted:,} parameters, but the checkpoint holds "
            f"{held:,} values: the config does not belong to these weights"
        )


def _shard_files(directory: Path) -> list[Path]:
    """The checkpoint's safetensors files; shard names from the index stay inside ``directory``."""
    if (directory / INDEX_FILE).is_file():
        files = [directory / name for name in _indexed_shards(directory / INDEX_FILE)]
        bad = [file for file in files if not file.is_file()]
        if bad:
            more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
            problem = (
                "is missing: download the checkpoint's missing shards"
                if not os.path.lexists(bad[0])
                else "is not a file (a folder, a device or a link to one): put the shard itself there"
            )
            raise WeightsNotFoundError(
                f"{directory / INDEX_FILE}: field 'weight_map' names the shard {bad[0].name[:80]!r}{more}, which "
                f"{problem}"
            )
        return files
    if (directory / SINGLE_FILE).is_file():
        return [directory / SINGLE_FILE]
    files = sorted(directory.glob("*.safetensors"))
    if not files:
        raise WeightsNotFoundError(
            f"no safetensors weights in {directory} (expected {SINGLE_FILE} or {INDEX_FILE}); "
            "convert a pytorch_model.bin checkpoint with transformers' save_pretrained(safe_serialization=True)"
        )
    return files


MAX_JSON_BYTES = 64 << 20  # an index of 100k tensors is a few MB


def _read_json(path: Path) -> Any:
    """A checkpoint's JSON file, parsed; an error names the file."""
    return read_json(path, MAX_JSON_BYTES)


def _indexed_shards(index: Path) -> list[str]:
    """The shard file names of ``model.safetensors.index.json``: plain names of .safetensors files
    in the same folder, never a path elsewhere."""
    data = _read_json(index)
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise WeightsError(f"{index}: field 'weight_map' must map tensor names to shard files")
    names = sorted({str(name) for name in weight_map.values()})
    bad = [n for n in names if Path(n).name != n or n in (".", "..") or not n.endswith(".safetensors")]
    if bad:
        raise WeightsError(
            f"{index}: field 'weight_map' names {bad[0][:80]!r}, not a .safetensors file in the checkpoint's folder"
        )
    return names


class _ParameterFiller:
    """Copies checkpoint tensors into a model's preallocated parameters under zoo's names,
    expert by expert for per-expert layouts, and reports what stayed empty or had no place."""

    def __init__(self, model: MoETransformer) -> None:
        self.params = model.state_dict(keep_vars=True)
        self.intermediate = model.config.intermediate_size
        self.filled: set[int] = set()  # ids of fully written tensors (tied names share one)
        self.expert_parts: dict[str, set[tuple[int, str]]] = {}
        self.unexpected: list[str] = []
        self.mismatched: list[str] = []

    def put(self, key: str, tensor: torch.Tensor) -> None:
        name = key.removeprefix("model.")
        if name.endswith("rotary_emb.inv_freq"):  # a buffer older checkpoints saved; recomputed here
            return
        if name == "lm_head.weight" and name not in self.params:  # a classification head replaces it
            return
        match = _EXPERT_KEY.match(name)
        if match:
            self._put_expert(key, int(match[1]), int(match[2]), match[3], tensor)
            return
        name = name.replace(".block_sparse_moe.", ".mlp.")
        target = self.params.get(name)
        if target is None:
            self.unexpected.append(key)
        elif target.shape != tensor.shape:
            self.mismatched.append(f"{key} {tuple(tensor.shape)} vs model {tuple(target.shape)}")
        else:
            with torch.no_grad():
                target.copy_(tensor)
            self.filled.add(id(target))

    def _put_expert(self, key: str, layer: int, expert: int, part: str, tensor: torch.Tensor) -> None:
        fused = "gate_up_proj" if part not in _DOWN_PART else "down_proj"
        name = f"layers.{layer}.mlp.experts.{fused}"
        target = self.params.get(name)
        if target is None or expert >= target.shape[0]:
            self.unexpected.append(key)
            return
        inter = self.intermediate
        rows = {"gate": slice(0, inter), "up": slice(inter, 2 * inter), "down": slice(None)}
        role = "gate" if part in _GATE_PART else "up" if part in _UP_PART else "down"
        destination = target[expert, rows[role]]
        if destination.shape != tensor.shape:
            self.mismatched.append(f"{key} {tuple(tensor.shape)} vs model {tuple(destination.shape)}")
            return
        with torch.no_grad():
            destination.copy_(tensor)
        self.expert_parts.setdefault(name, set()).add((expert, role))

    def check(self, directory: Path) -> None:
        missing = []
        for name, tensor in self.params.items():
            if id(tensor) in self.filled or name.startswith("classifier."):  # classifiers start fresh
                continue
            if name.endswith(("experts.gate_up_proj", "experts.down_proj")):
                roles = ("down",) if name.endswith("down_proj") else ("gate", "up")
                want = {(e, role) for e in range(tensor.shape[0]) for role in roles}
                if self.expert_parts.get(name, set()) >= want:
                    continue
            missing.append(name)
        if missing or self.unexpected or self.mismatched:
            lines = [f"the checkpoint in {directory} doesn't fit the model:"]
            problems = (("missing", missing), ("unexpected", self.unexpected), ("shape mismatches", self.mismatched))
            for label, keys in problems:
                if keys:
                    more = f" … and {len(keys) - 10} more" if len(keys) > 10 else ""
                    lines.append(f"  {label} ({len(keys)}): {', '.join(keys[:10])}{more}")
            lines.append("  Check that config.json belongs to these weights.")
            raise WeightsMismatchError("\n".join(lines))
