"""``actor.strategy: fsdp`` / ``critic.strategy: fsdp``: FSDP2 (``torch.distributed.fsdp.fully_shard``).

Each transformer block is its own FSDP unit and the model root another (embeddings, final norm, heads),
so a rank holds 1/N of every parameter and of the AdamW state, and all-gathers one block at a time.
Parameters become DTensors: ``get_model_state_dict`` hands DCP each rank's shards, so a checkpoint holds
every byte once whatever the world size and resumes on another world size (DCP reshards on load).

Mixed precision where the device has it: bf16 compute with fp32 gradient reduction on CUDA with bf16;
full fp32 on CPU/gloo (CPU bf16 matmuls are slow and would change the tiny runs' numbers). The sharded
fp32 parameters are the master copy either way, so checkpoints are fp32.

The same code runs on gloo/CPU and nccl/GPU: the device mesh takes the actor's device type. One process
without torchrun gets a one-rank process group (``init_distributed(single_process_group=True)``).
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard

from verl.config import TrainerConfigError

BLOCK_LISTS = ("h", "layers", "blocks")  # GPT-2 transformer.h; Llama/Qwen/Mistral model.layers

# The value model returns a squeezed view; nothing modifies it in place (values_of slices it into a new
# tensor), so FSDP2's per-forward warning about in-place ops on views is noise in every step's log.
warnings.filterwarnings("ignore", message=r"FSDP2-wrapped module \(\w+\) returned a view tensor")


def mesh_for(device: torch.device, world_size: int) -> DeviceMesh:
    return init_device_mesh(device.type, (world_size,))


def precision_for(device: torch.device) -> MixedPrecisionPolicy:
    if device.type == "cuda" and torch.cuda.is_bf16_supported():
        return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    return MixedPrecisionPolicy()  # fp32 throughout


def transformer_blocks(model: nn.Module) -> list[nn.Module]:
    """The repeated blocks of an HF model (or of a value model's backbone), found by the list's name."""
    for name, module in model.named_modules():
        if isinstance(module, nn.ModuleList) and name.rsplit(".", 1)[-1] in BLOCK_LISTS and len(module) > 0:
            return list(module)
    return []


def shard(model: nn.Module, mesh: DeviceMesh, precision: MixedPrecisionPolicy, key: str) -> nn.Module:
    """``fully_shard`` each transformer block, then the root; returns the same (now FSDP) module."""
    blocks = transformer_blocks(model)
    if not blocks:
        raise TrainerConfigError(f"{key}=fsdp: the model has no transformer block list ({'/'.join(BLOCK_LISTS)}) to "
                          "shard; use ddp for it")
    for block in blocks:
        fully_shard(block, mesh=mesh, mp_policy=precision)
    fully_shard(model, mesh=mesh, mp_policy=precision)
    return model


def is_sharded(model: nn.Module) -> bool:
    return isinstance(model, FSDPModule)


@contextlib.contextmanager
def root_unsharded(*models: nn.Module) -> Iterator[None]:
    """Gather the root unit's parameters (embeddings, final norm, LM head) for code that calls those
    sub-modules directly, outside the model's forward (the logit lens of ``verl_layer_kl``). Every rank
    must enter it together (an all-gather); a no-op for unsharded models."""
    roots = [m for m in models if isinstance(m, FSDPModule)]
    for m in roots:
        m.unshard()
    try:
        yield
    finally:
        for m in roots:
            m.reshard()


def full(t: torch.Tensor) -> torch.Tensor:
    """A DTensor's whole value (a collective), any other tensor as it is."""
    return t.full_tensor() if hasattr(t, "full_tensor") else t
