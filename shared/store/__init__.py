"""The partitioned on-disk graph store: format (manifest), writer and reader."""
from argosy.shared.store.manifest import FORMAT_VERSION, Manifest, PartEntry
from argosy.shared.store.reader import PartitionStore, PartData
from argosy.shared.store.writer import write_store, write_store_from_edges

__all__ = ["FORMAT_VERSION", "Manifest", "PartEntry", "PartitionStore", "PartData",
           "write_store", "write_store_from_edges"]
