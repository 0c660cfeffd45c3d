"""Reading DCP ``.metadata`` files without letting them run code.

torch's ``FileSystemReader.read_metadata`` calls ``pickle.load`` on the file, so a crafted
``.metadata`` (a ``__reduce__`` that calls ``os.system``) runs on load whatever the manifest's
checksums say: an attacker who can write the file can re-hash it too. ``SafeFileSystemReader``
unpickles with an allow-list of exactly the classes a DCP metadata file holds (found by listing
the globals of real files with ``pickletools``), then checks the result's shape: the data files
it points at are plain names inside the part directory, no storage transforms, and the tensors
it declares fit in the bytes on disk (so a forged size cannot make ``digest`` allocate terabytes).
"""

from __future__ import annotations

import io
import pickle
import re
from pathlib import Path
from typing import Any

import torch
from torch.distributed.checkpoint import DefaultLoadPlanner, FileSystemReader
from torch.distributed.checkpoint.metadata import (
    BytesStorageMetadata,
    Metadata,
    MetadataIndex,
    StorageMeta,
    TensorStorageMetadata,
)

from .errors import CheckpointError

METADATA_FILE = ".metadata"
MAX_METADATA_BYTES = 64 * 1024**2  # a 70B model's metadata is a few MB; more is not a DCP file
_DATA_FILE = re.compile(r"^__\d+_\d+\.distcp$")

# (module, name) pairs a DCP metadata pickle references; anything else is refused before it is
# imported, so no attacker-chosen callable is ever resolved.
_ALLOWED_GLOBALS = {
    ("torch.distributed.checkpoint.metadata", name)
    for name in ("Metadata", "MetadataIndex", "StorageMeta", "TensorProperties", "TensorStorageMetadata",
                 "BytesStorageMetadata", "ChunkStorageMetadata", "_MEM_FORMAT_ENCODING")
} | {
    ("torch.distributed.checkpoint.filesystem", "_StorageInfo"),
    ("torch", "Size"),
    ("torch.serialization", "_get_layout"),  # rebuilds torch.strided from its name
    ("pathlib", "PosixPath"),  # StorageMeta.checkpoint_id
    ("pathlib", "PurePosixPath"),
    ("pathlib", "WindowsPath"),
    ("pathlib", "PureWindowsPath"),
    ("collections", "OrderedDict"),
}


class _MetadataUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _ALLOWED_GLOBALS:
            return super().find_class(module, name)
        if module == "torch" and isinstance(getattr(torch, name, None), (torch.dtype, torch.layout, torch.memory_format)):
            return getattr(torch, name)
        raise pickle.UnpicklingError(f"global '{module}.{name}' is not a DCP metadata type")

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("persistent references are not used by DCP metadata")


def _where(path: Path) -> str:
    """``global_step_8/optim/actor/.metadata``: enough to find the file, short enough for one line."""
    parts = path.parts
    for i in range(len(parts) - 1, -1, -1):
        if parts[i].startswith("global_step_"):
            return "/".join(parts[i:])
    return str(path)


def _refuse(path: Path, why: str) -> CheckpointError:
    return CheckpointError(f"refused {_where(path)}: {why[:200]}; not loaded, nothing in it was run")


def load_metadata(path: Path) -> Metadata:
    """Unpickle and shape-check one DCP ``.metadata`` file, or raise a one-line ``CheckpointError``."""
    try:
        if path.exists() and not path.is_file():  # a FIFO would block the read forever
            raise _refuse(path, "not a regular file")
        size = path.stat().st_size
        if size > MAX_METADATA_BYTES:
            raise _refuse(path, f"{size} bytes, more than {MAX_METADATA_BYTES}")
        data = path.read_bytes()
    except FileNotFoundError:
        raise CheckpointError(f"missing file {_where(path)}") from None
    except OSError as exc:
        raise CheckpointError(f"cannot read {_where(path)}: {exc.strerror}") from None
    try:
        md = _MetadataUnpickler(io.BytesIO(data)).load()
    except RecursionError:
        raise _refuse(path, "nesting too deep") from None
    except pickle.UnpicklingError as exc:
        raise _refuse(path, str(exc).splitlines()[0] if str(exc) else "not a pickle") from None
    except Exception as exc:  # any other failure on untrusted bytes gets the same verdict
        raise _refuse(path, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}") from None
    _check_shape(md, path)
    return md


def _check_shape(md: Any, path: Path) -> None:
    if not isinstance(md, Metadata):
        raise _refuse(path, f"top-level object is {type(md).__name__}, not Metadata")
    if not isinstance(md.state_dict_metadata, dict) or not isinstance(md.storage_data, dict):
        raise _refuse(path, "state_dict_metadata/storage_data are not mappings")
    if md.storage_meta is not None and not isinstance(md.storage_meta, StorageMeta):
        raise _refuse(path, "storage_meta is not StorageMeta")
    if md.planner_data is not None and not isinstance(md.planner_data, dict):
        raise _refuse(path, "planner_data is not a mapping")
    declared = 0
    for fqn, item in md.state_dict_metadata.items():
        if not isinstance(fqn, str):
            raise _refuse(path, "a state-dict key is not a string")
        if isinstance(item, TensorStorageMetadata):
            if not isinstance(item.size, torch.Size) or not isinstance(item.properties.dtype, torch.dtype):
                raise _refuse(path, f"tensor {fqn[:80]!r} has no valid size/dtype")
            declared += item.size.numel() * item.properties.dtype.itemsize
        elif not isinstance(item, BytesStorageMetadata):
            raise _refuse(path, f"entry {fqn[:80]!r} is {type(item).__name__}")
    on_disk: dict[str, int] = {}
    for index, info in md.storage_data.items():
        name = getattr(info, "relative_path", None)
        if not isinstance(index, MetadataIndex) or not isinstance(name, str) or not _DATA_FILE.match(name):
            raise _refuse(path, f"storage entry points at {str(name)[:80]!r}, not a __<rank>_<n>.distcp file")
        if not (isinstance(info.offset, int) and isinstance(info.length, int) and info.offset >= 0 and info.length >= 0):
            raise _refuse(path, f"storage entry of {str(index.fqn)[:80]!r} has a bad offset/length")
        if getattr(info, "transform_descriptors", None):
            raise _refuse(path, "storage transforms are not used by these checkpoints")
        if name not in on_disk:
            data_file = path.parent / name
            on_disk[name] = data_file.stat().st_size if data_file.is_file() else 0
    # each tensor is stored whole at least once (replicas are deduplicated, shards add up), so the
    # data files can never be smaller than the tensors the metadata declares
    if declared > sum(on_disk.values()):
        raise _refuse(path, f"declares {declared} bytes of tensors but its data files hold {sum(on_disk.values())}")


class SafeFileSystemReader(FileSystemReader):
    """``FileSystemReader`` whose metadata goes through ``load_metadata``; read once and cached, so the
    file checked is the file used."""

    def __init__(self, path: str | Path) -> None:
        super().__init__(str(path))
        self._metadata: dict[Any, Metadata] = {}

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        rank = kwargs.get("rank")
        if rank not in self._metadata:
            self._metadata[rank] = load_metadata(Path(self._get_metadata_path(rank)))
        md = self._metadata[rank]
        if md.storage_meta is None:
            md.storage_meta = StorageMeta()
        md.storage_meta.load_id = self.load_id
        return md


class WeightsOnlyLoadPlanner(DefaultLoadPlanner):
    """DCP unpickles non-tensor entries (optimizer hyper-parameters) with ``weights_only=False``;
    a checkpoint is untrusted input, so those go through the restricted unpickler too."""

    def load_bytes(self, read_item: Any, value: io.BytesIO) -> None:
        obj = torch.load(value, weights_only=True)
        if self.flatten_state_dict:
            from torch.distributed.checkpoint._traverse import set_element

            set_element(self.original_state_dict, self.mappings[read_item.dest_index.fqn], obj)
        else:
            self.state_dict[read_item.dest_index.fqn] = obj
