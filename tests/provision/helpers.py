"""Builders shared by the provisioning tests."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from sand.desired.spec import DesiredRepo, DesiredSecret, DesiredVM, with_fingerprints
from sand.manifest import parse_manifest
from sand.manifest.models import Manifest


def make_vm(**changes: Any) -> DesiredVM:
    vm = DesiredVM(
        project="demo",
        name="vm1",
        backend="laptop",
        backend_type="lima",
        image="default",
        cpus=2,
        memory=1 << 30,
        disk=20 << 30,
        state="running",
        protect=False,
        node=None,
        ports=(),
        user="claude",
        agents=("claude",),
        packages=(),
        repos=(),
        secrets=(),
        bundle_digest="",
    )
    return with_fingerprints(replace(vm, **changes))


def secret(name: str, scope: str, env: str | None = None) -> DesiredSecret:
    return DesiredSecret(name=name, scope=scope, env=env or name)


def repo(name: str, url: str, path: str, token: str | None = None) -> DesiredRepo:
    return DesiredRepo(name=name, url=url, branch=None, path=path, token_secret=token)


def manifest(secrets_yaml: str) -> Manifest:
    return parse_manifest(
        "apiVersion: sand/v1\n"
        "project: demo\n"
        "backends:\n  laptop:\n    type: lima\n"
        f"secrets:\n{secrets_yaml}"
    )
