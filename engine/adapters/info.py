"""What a loaded adapter is, as clients see it (no MLX here)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class AdapterInfo:
    name: str
    key: str  # unique per load ("name#serial"): routes rows and namespaces the prefix cache
    source: str  # the directory it was read from, relative to the adapter root (paths.Place.shown)
    fine_tune_type: str  # "lora" or "dora"
    rank: int
    scale: float
    layers: int  # linear layers of the base it adapts
    nbytes: int  # memory its weights occupy on the device
    active_requests: int = 0  # requests using it when this snapshot was taken
    unloading: bool = False  # takes no new request; goes once active_requests is 0
    digest: str = ""  # SHA-256 of its files: the same adapter whatever name or load (keys the prefix cache's disk tier)
