"""Manifest layer: YAML text → validated models, with located errors."""

from sand.manifest.loader import (
    LoadedManifest,
    load_manifest,
    load_manifest_bytes,
    parse_manifest,
)
from sand.manifest.models import Manifest

__all__ = ["LoadedManifest", "Manifest", "load_manifest", "load_manifest_bytes", "parse_manifest"]
